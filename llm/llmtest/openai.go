package llmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// ChatRequest is the part of a Chat Completions request tests look at.
type ChatRequest struct {
	Model         string         `json:"model"`
	Stream        bool           `json:"stream"`
	StreamOptions *StreamOptions `json:"stream_options"`
	MaxTokens     int            `json:"max_tokens"`
	Messages      []ChatMessage  `json:"messages"`
	Tools         []ChatTool     `json:"tools"`
}

// StreamOptions of a request.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatMessage is one request message.
type ChatMessage struct {
	Role string `json:"role"`
	// Content is a JSON string or an array of content parts; see Text.
	Content          json.RawMessage `json:"content"`
	ReasoningContent string          `json:"reasoning_content"`
	ToolCalls        []ChatToolCall  `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
}

// Text returns the message content as plain text (text parts joined).
func (m ChatMessage) Text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var b strings.Builder
	for _, p := range m.Parts() {
		b.WriteString(p.Text)
	}
	return b.String()
}

// ContentPart is one part of an array content.
type ContentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url,omitempty"`
}

// Parts returns the content parts (a string content as one text part).
func (m ChatMessage) Parts() []ContentPart {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []ContentPart{{Type: "text", Text: s}}
	}
	var parts []ContentPart
	_ = json.Unmarshal(m.Content, &parts)
	return parts
}

// ChatToolCall is a tool call in an assistant request message.
type ChatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// ChatTool is a tool offered to the model.
type ChatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	head, reply, leave, ok := s.take(w, r, FormatOpenAI, writeError)
	defer leave()
	if !ok {
		return
	}
	model := head.Model
	if model == "" {
		model = "gpt-4o-mini"
	}
	st := newStreamer(s, w, r, &reply, fmt.Sprintf("chatcmpl-llmtest%d", s.seq.Add(1)), model,
		head.StreamOptions != nil && head.StreamOptions.IncludeUsage)
	st.run()
	st.drain()
}

var defaultErrors = map[int][3]string{
	400: {"Invalid request.", "invalid_request_error", ""},
	401: {"Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.", "invalid_request_error", "invalid_api_key"},
	403: {"You are not allowed to sample from this model.", "invalid_request_error", ""},
	404: {"The model does not exist or you do not have access to it.", "invalid_request_error", "model_not_found"},
	429: {"Rate limit reached for requests. Please try again later.", "requests", "rate_limit_exceeded"},
	500: {"The server had an error while processing your request. Sorry about that!", "server_error", ""},
	503: {"The engine is currently overloaded, please try again later.", "server_error", ""},
}

// writeError answers like OpenAI: {"error":{"message","type","param","code"}}.
func writeError(w http.ResponseWriter, r *Reply) {
	d := defaultErrors[r.Status]
	if d[0] == "" {
		d = [3]string{http.StatusText(r.Status), "server_error", ""}
	}
	msg, typ, code := r.ErrorMessage, r.ErrorType, r.ErrorCode
	if msg == "" {
		msg = d[0]
	}
	if typ == "" {
		typ = d[1]
	}
	if code == "" {
		code = d[2]
	}
	type apiError struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	e := apiError{Message: msg, Type: typ}
	if code != "" {
		e.Code = &code
	}
	body, _ := json.Marshal(map[string]apiError{"error": e})
	for k, v := range r.Header {
		w.Header().Set(k, v)
	}
	if r.RetryAfter != "" {
		w.Header().Set("Retry-After", r.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(r.Status)
	_, _ = w.Write(append(body, '\n'))
}

// streamer writes one scripted SSE answer in the OpenAI format.
type streamer struct {
	pacer
	head  []byte // `data: {...,"choices":[{"index":0,"delta":`
	tail  []byte // `}],"usage":null}` + "\n\n" after finish_reason
	buf   []byte
	usage bool
}

func newStreamer(srv *Server, w http.ResponseWriter, r *http.Request, reply *Reply, id, model string, usage bool) *streamer {
	st := &streamer{pacer: newPacer(srv, w, r, reply), usage: usage && !reply.NoUsage}
	st.head = fmt.Appendf(nil, `data: {"id":%q,"object":"chat.completion.chunk","created":%d,"model":`, id, time.Now().Unix())
	st.head = appendString(st.head, model)
	st.head = append(st.head, `,"service_tier":"default","system_fingerprint":"fp_llmtest","choices":[{"index":0,"delta":`...)
	st.tail = []byte(`}]`)
	if usage {
		st.tail = append(st.tail, `,"usage":null`...)
	}
	st.tail = append(st.tail, "}\n\n"...)
	st.buf = make([]byte, 0, 512)
	st.errorEvent = func() []byte {
		b := []byte(`data: {"error":{"message":`)
		b = appendString(b, reply.streamErrorMessage())
		b = append(b, `,"type":`...)
		b = appendString(b, reply.StreamError)
		return fmt.Appendf(b, `,"code":%d}}`+"\n\n", reply.streamErrorStatus())
	}
	return st
}

func (st *streamer) run() {
	r := st.reply
	st.writeHeader("X-Request-Id")

	if !st.delta(`{"role":"assistant","content":"","refusal":null}`, "") {
		return
	}
	for _, p := range r.thinkingPieces() {
		if !st.deltaText(`{"content":null,"reasoning_content":`, p) {
			return
		}
	}
	if r.Chunks > 0 {
		text := r.ChunkText
		if text == "" {
			text = "x"
		}
		for i := range r.Chunks {
			if r.ChunkFunc == nil {
				if !st.deltaText(`{"content":`, text) {
					return
				}
				continue
			}
			// Pace first, so a timestamp taken by ChunkFunc excludes Delay.
			if !st.ready() || !st.put(st.textChunk(`{"content":`, r.ChunkFunc(i))) {
				return
			}
		}
	} else {
		for _, p := range r.textPieces() {
			if !st.deltaText(`{"content":`, p) {
				return
			}
		}
	}
	if !st.toolCalls() {
		return
	}
	if r.UsageInChoices && !r.NoUsage {
		if !st.finishWithUsage() {
			return
		}
	} else {
		if !st.delta(`{}`, r.finishReason()) {
			return
		}
		if st.usage && !st.usageChunk() {
			return
		}
	}
	if st.cutAt >= 0 {
		st.cut()
		return
	}
	st.drain()
	_, _ = st.w.Write([]byte("data: [DONE]\n\n"))
	_ = st.rc.Flush()
}

func (st *streamer) toolCalls() bool {
	r := st.reply
	if len(r.ToolCalls) == 0 {
		return true
	}
	pieces := make([][]string, len(r.ToolCalls))
	for i := range r.ToolCalls {
		pieces[i] = r.argPieces(&r.ToolCalls[i])
	}
	// The first fragment of each call carries id and name (arguments "").
	first := func(i int) bool {
		tc := &r.ToolCalls[i]
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("call_llmtest_%d", i)
		}
		b := fmt.Appendf(nil, `{"tool_calls":[{"index":%d,"id":`, i)
		b = appendString(b, id)
		b = append(b, `,"type":"function","function":{"name":`...)
		b = appendString(b, tc.Name)
		b = append(b, `,"arguments":""}}]}`...)
		return st.delta(string(b), "")
	}
	frag := func(i int, p string) bool {
		b := fmt.Appendf(nil, `{"tool_calls":[{"index":%d,"function":{"arguments":`, i)
		b = appendString(b, p)
		b = append(b, `}}]}`...)
		return st.delta(string(b), "")
	}
	if !r.Interleave {
		for i := range r.ToolCalls {
			if !first(i) {
				return false
			}
			for _, p := range pieces[i] {
				if !frag(i, p) {
					return false
				}
			}
		}
		return true
	}
	for i := range r.ToolCalls {
		if !first(i) {
			return false
		}
	}
	for j := 0; ; j++ {
		more := false
		for i := range pieces {
			if j < len(pieces[i]) {
				more = true
				if !frag(i, pieces[i][j]) {
					return false
				}
			}
		}
		if !more {
			return true
		}
	}
}

func (st *streamer) usageChunk() bool {
	b := st.head[:bytes.LastIndex(st.head, []byte(`[{"index"`))]
	b = append(append([]byte(nil), b...), "[]"...)
	b = appendOpenAIUsage(b, st.reply.usage())
	b = append(b, "}\n\n"...)
	return st.ready() && st.put(b)
}

// finishWithUsage sends the finish chunk carrying the usage, as servers do
// that ignore stream_options.include_usage.
func (st *streamer) finishWithUsage() bool {
	if !st.ready() {
		return false
	}
	b := append([]byte(nil), st.head...)
	b = append(b, `{},"logprobs":null,"finish_reason":`...)
	b = appendString(b, st.reply.finishReason())
	b = append(b, "}]"...)
	b = appendOpenAIUsage(b, st.reply.usage())
	b = append(b, "}\n\n"...)
	return st.put(b)
}

func appendOpenAIUsage(b []byte, u *Usage) []byte {
	return fmt.Appendf(b, `,"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,`+
		`"prompt_tokens_details":{"cached_tokens":%d,"audio_tokens":0},`+
		`"completion_tokens_details":{"reasoning_tokens":%d,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`,
		u.PromptTokens, u.CompletionTokens, u.PromptTokens+u.CompletionTokens, u.CachedTokens, u.ReasoningTokens)
}

// delta sends one choice chunk with a preformatted delta object.
func (st *streamer) delta(delta, finish string) bool {
	if !st.ready() {
		return false
	}
	b := append(st.buf[:0], st.head...)
	b = append(b, delta...)
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	if finish == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, finish)
	}
	b = append(b, st.tail...)
	st.buf = b
	return st.put(b)
}

// deltaText sends a {prefix"text"} delta without allocating.
func (st *streamer) deltaText(prefix, text string) bool {
	return st.ready() && st.put(st.textChunk(prefix, text))
}

func (st *streamer) textChunk(prefix, text string) []byte {
	b := append(st.buf[:0], st.head...)
	b = append(b, prefix...)
	b = appendString(b, text)
	b = append(b, `},"logprobs":null,"finish_reason":null`...)
	b = append(b, st.tail...)
	st.buf = b
	return b
}
