package llmtest

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strings"
	"time"
	"unicode/utf8"
)

// Reply scripts the answer to one model request, in the format the request
// asked for: POST …/chat/completions (OpenAI) or POST …/messages
// (Anthropic). The zero Reply streams an empty answer that ends normally.
//
// OpenAI order: role chunk, thinking chunks, text chunks (or the Chunks bulk
// chunks), tool call chunks, the finish chunk, the usage chunk, [DONE].
//
// Anthropic order: message_start, ping, a thinking block (thinking_delta
// chunks, then signature_delta), the RedactedThinking blocks, a text block,
// one tool_use block per call (input_json_delta chunks), message_delta
// (stop_reason, usage), message_stop.
type Reply struct {
	// Thinking is streamed as delta.reasoning_content (DeepSeek/Qwen style)
	// or as an Anthropic thinking block, split like Text; ThinkingChunks
	// gives the pieces explicitly.
	Thinking       string   `json:"thinking,omitempty"`
	ThinkingChunks []string `json:"thinkingChunks,omitempty"`
	// Signature is the Anthropic thinking block's signature; "" sends one
	// derived from the thinking text (see DefaultSignature).
	Signature string `json:"signature,omitempty"`
	// RedactedThinking are Anthropic redacted_thinking blocks (their data),
	// streamed after the thinking block. The OpenAI format ignores them.
	RedactedThinking []string `json:"redactedThinking,omitempty"`

	// Text is streamed as delta.content. Split > 0 cuts Text (and Thinking)
	// into that many nearly equal pieces; Split == 0 cuts after each space,
	// like a tokenizer would. TextChunks gives the pieces explicitly.
	Text       string   `json:"text,omitempty"`
	TextChunks []string `json:"textChunks,omitempty"`
	Split      int      `json:"split,omitempty"`

	// Chunks > 0 streams that many delta.content chunks instead of Text,
	// each ChunkText (default "x"), or ChunkFunc(i) when set. Meant for
	// benchmarks: the server does not flush each chunk unless Delay or
	// ChunkFunc is set, and allocates nothing per chunk without ChunkFunc.
	Chunks    int    `json:"chunks,omitempty"`
	ChunkText string `json:"chunkText,omitempty"`
	// ChunkFunc is called just before chunk i is written, so it can embed a
	// sequence number and a send timestamp. Go API only.
	ChunkFunc func(i int) string `json:"-"`
	// Buffered, with no Delay, writes ChunkFunc's chunks without a flush
	// each: the HTTP server sends them when its buffer is full, as a model
	// server does whose output outruns the network. Without it every chunk
	// is its own socket write, so a client reads one chunk per read.
	Buffered bool `json:"buffered,omitempty"`

	// ToolCalls are streamed after the text; Interleave sends their argument
	// fragments round-robin by index instead of one call after the other
	// (OpenAI format only: Anthropic streams one block after the other).
	ToolCalls  []ToolCall `json:"toolCalls,omitempty"`
	Interleave bool       `json:"interleave,omitempty"`

	// FinishReason defaults to "tool_calls" when ToolCalls is set, else "stop".
	FinishReason string `json:"finishReason,omitempty"`
	// StopReason is the Anthropic stop_reason. "" maps FinishReason: stop →
	// end_turn, length → max_tokens, tool_calls → tool_use, content_filter →
	// refusal; any other FinishReason is sent as it is.
	StopReason string `json:"stopReason,omitempty"`
	// Usage is sent in the final usage chunk (when the request asked for
	// stream_options.include_usage), or in message_start/message_delta.
	// Nil sends small made-up counts.
	Usage *Usage `json:"usage,omitempty"`
	// UsageInChoices sends the usage on the finish chunk, with its choices
	// and whatever include_usage said; NoUsage sends none (OpenAI format: for
	// servers without include_usage support).
	UsageInChoices bool `json:"usageInChoices,omitempty"`
	NoUsage        bool `json:"noUsage,omitempty"`

	// Delay is slept before each chunk (JSON: "delayMs").
	Delay time.Duration `json:"-"`

	// Disconnect closes the TCP connection after AfterChunks chunks, without
	// finishing the HTTP response or sending [DONE]. Hang sends AfterChunks
	// chunks and then blocks until the client goes away (or the server
	// closes). StreamError sends AfterChunks chunks and then an in-stream
	// error of that type (e.g. "overloaded_error"; message ErrorMessage) and
	// ends the response: `event: error` in the Anthropic format, a
	// {"error":{…}} chunk in the OpenAI one.
	//
	// AfterChunks counts every OpenAI data chunk, the role chunk included;
	// in the Anthropic format it counts message_start, each delta, each
	// tool_use block start and message_delta (not content_block_start/stop
	// of text and thinking blocks, ping or message_stop), so a given
	// AfterChunks shows the same text in both formats.
	Disconnect  bool   `json:"disconnect,omitempty"`
	Hang        bool   `json:"hang,omitempty"`
	StreamError string `json:"streamError,omitempty"`
	AfterChunks int    `json:"afterChunks,omitempty"`

	// Status >= 400 answers with a JSON error in the request's format
	// instead of a stream. ErrorMessage/ErrorType/ErrorCode default per
	// status; RetryAfter, when set, is sent as the Retry-After header
	// verbatim.
	Status       int    `json:"status,omitempty"`
	ErrorMessage string `json:"errorMessage,omitempty"`
	ErrorType    string `json:"errorType,omitempty"`
	ErrorCode    string `json:"errorCode,omitempty"`
	RetryAfter   string `json:"retryAfter,omitempty"`
	// Header adds response headers (stream and error answers alike), e.g.
	// "retry-after-ms".
	Header map[string]string `json:"header,omitempty"`
}

// ToolCall is one streamed function call (ID defaults to "call_llmtest_<i>").
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	// ArgChunks gives the argument fragments explicitly; otherwise
	// Arguments is cut into Reply.Split pieces (3 when Split is 0).
	ArgChunks []string `json:"argChunks,omitempty"`
}

// Usage is what the usage chunk reports. PromptTokens counts all prompt
// tokens in both formats: the Anthropic input_tokens sent is PromptTokens -
// CachedTokens - CacheCreationTokens, with the cache counts beside it.
type Usage struct {
	PromptTokens     int64 `json:"promptTokens"`
	CompletionTokens int64 `json:"completionTokens"`
	ReasoningTokens  int64 `json:"reasoningTokens,omitempty"`
	// CachedTokens are prompt tokens read from the cache
	// (cache_read_input_tokens); CacheCreationTokens were written to it
	// (Anthropic only).
	CachedTokens        int64 `json:"cachedTokens,omitempty"`
	CacheCreationTokens int64 `json:"cacheCreationTokens,omitempty"`
}

type replyJSON Reply

type replyWire struct {
	*replyJSON
	DelayMS float64 `json:"delayMs,omitempty"`
}

// MarshalJSON adds "delayMs" for Delay.
func (r Reply) MarshalJSON() ([]byte, error) {
	return json.Marshal(replyWire{replyJSON: (*replyJSON)(&r), DelayMS: float64(r.Delay) / float64(time.Millisecond)})
}

// UnmarshalJSON reads "delayMs" into Delay.
func (r *Reply) UnmarshalJSON(b []byte) error {
	w := replyWire{replyJSON: (*replyJSON)(r)}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	r.Delay = time.Duration(w.DelayMS * float64(time.Millisecond))
	return nil
}

func (r *Reply) finishReason() string {
	switch {
	case r.FinishReason != "":
		return r.FinishReason
	case len(r.ToolCalls) > 0:
		return "tool_calls"
	default:
		return "stop"
	}
}

func (r *Reply) stopReason() string {
	if r.StopReason != "" {
		return r.StopReason
	}
	switch f := r.finishReason(); f {
	case "stop":
		return "end_turn"
	case "length":
		return "max_tokens"
	case "tool_calls":
		return "tool_use"
	case "content_filter":
		return "refusal"
	default:
		return f
	}
}

func (r *Reply) usage() *Usage {
	if r.Usage == nil {
		return &Usage{PromptTokens: 10, CompletionTokens: 5}
	}
	return r.Usage
}

func (r *Reply) signature() string {
	if r.Signature != "" {
		return r.Signature
	}
	return DefaultSignature(r.Thinking + strings.Join(r.ThinkingChunks, ""))
}

// DefaultSignature is the signature the fake gives a thinking block whose
// Reply has none.
func DefaultSignature(thinking string) string {
	return fmt.Sprintf("llmtest-sig-%08x", crc32.ChecksumIEEE([]byte(thinking)))
}

// streamErrorStatus is the HTTP status of StreamError's type.
func (r *Reply) streamErrorStatus() int {
	for status, d := range anthropicErrors {
		if d[1] == r.StreamError {
			return status
		}
	}
	return 500
}

func (r *Reply) streamErrorMessage() string {
	if r.ErrorMessage != "" {
		return r.ErrorMessage
	}
	if d, ok := anthropicErrors[r.streamErrorStatus()]; ok {
		return d[0]
	}
	return "Internal server error"
}

func (r *Reply) textPieces() []string {
	if r.TextChunks != nil {
		return r.TextChunks
	}
	return split(r.Text, r.Split)
}

func (r *Reply) thinkingPieces() []string {
	if r.ThinkingChunks != nil {
		return r.ThinkingChunks
	}
	return split(r.Thinking, r.Split)
}

func (r *Reply) argPieces(tc *ToolCall) []string {
	if tc.ArgChunks != nil {
		return tc.ArgChunks
	}
	n := r.Split
	if n == 0 {
		n = 3
	}
	return splitN(tc.Arguments, n)
}

// split cuts s after each space (n == 0) or into n nearly equal pieces.
func split(s string, n int) []string {
	if s == "" {
		return nil
	}
	if n > 0 {
		return splitN(s, n)
	}
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			out = append(out, s[start:i+1])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// splitN cuts s into up to n pieces on rune boundaries.
func splitN(s string, n int) []string {
	if s == "" {
		return nil
	}
	if n <= 1 || len(s) <= 1 {
		return []string{s}
	}
	size := (len(s) + n - 1) / n
	out := make([]string, 0, n)
	for len(s) > 0 {
		end := min(size, len(s))
		for end < len(s) && !utf8.RuneStart(s[end]) {
			end++
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}
