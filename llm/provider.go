// Package llm talks to language models over their real streaming wire
// protocols. A Provider turns one model call into a stream of Events.
//
//   - config.go, settings.go: Config and LoadConfig (environment, then
//     $IAC_CODE_HOME/settings.yml and .credentials.yml), New, Register.
//   - presets.go: the built-in providers (Presets) and ContextWindow.
//   - openai*.go, anthropic.go: the two wire protocols; sse.go their shared
//     server-sent-events reader.
//   - retry.go: WithRetry (applied by New) and the stream idle timeout.
//   - assemble.go: Assembler, the assistant message built from events.
//   - live.go: Live, a provider whose configuration can be reloaded.
//   - credentials.go: writing .credentials.yml and settings.yml (login,
//     logout), atomically.
//   - llmtest: a scripted fake server speaking both protocols.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Provider streams one model call. Stream blocks until the call ends; it calls
// emit for every event, in order, from the calling goroutine. It returns nil
// after EventStop, ctx.Err() when cancelled, or an error (*APIError for HTTP
// failures). Implementations must abort the HTTP request as soon as ctx ends.
type Provider interface {
	Stream(ctx context.Context, req *Request, emit func(Event)) error
}

// Warmer is a Provider that can get ready for a session's first call
// before it is made (the built-in providers dial the model host ahead,
// warm.go). Warm does not wait.
type Warmer interface {
	Warm()
}

// warm warms p if it can.
func warm(p Provider) {
	if w, ok := p.(Warmer); ok {
		w.Warm()
	}
}

// BorrowText marks ctx for Stream: its emit copies whatever it keeps of the
// Text of text and thinking deltas before it returns, so the decoders pass
// that text aliasing their read buffer, valid only during the call, instead
// of copying each delta for it (a model call's assembler and notification
// copy it anyway). Wrapping providers pass such deltas on at once (retry
// holds only events the client is not shown).
func BorrowText(ctx context.Context) context.Context {
	return context.WithValue(ctx, borrowTextKey{}, true)
}

type borrowTextKey struct{}

func borrowsText(ctx context.Context) bool {
	b, _ := ctx.Value(borrowTextKey{}).(bool)
	return b
}

// Role of a conversation message.
type Role string

const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	// RoleTool carries tool results (one or more tool_result blocks).
	RoleTool Role = "tool"
)

// BlockType discriminates Block.
type BlockType string

const (
	BlockText             BlockType = "text"
	BlockThinking         BlockType = "thinking"
	BlockRedactedThinking BlockType = "redacted_thinking"
	BlockToolUse          BlockType = "tool_use"
	BlockToolResult       BlockType = "tool_result"
	// BlockSummary is a compaction summary standing in for older messages.
	BlockSummary BlockType = "summary"
	// BlockImage is an image of a user message: MediaType and base64 Data.
	BlockImage BlockType = "image"
)

// Block is one piece of a message. Only the fields of its type are set.
type Block struct {
	Type BlockType `json:"type"`
	Text string    `json:"text,omitempty"`
	// Signature authenticates a thinking block (Anthropic); Data holds a
	// redacted thinking payload. Both are sent back verbatim on the next call.
	// For an image Data is its base64 bytes and MediaType their type.
	Signature string `json:"signature,omitempty"`
	Data      string `json:"data,omitempty"`
	MediaType string `json:"mediaType,omitempty"`
	// ToolCallID links a tool_use to its tool_result.
	ToolCallID string          `json:"toolCallId,omitempty"`
	Name       string          `json:"name,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
	IsError    bool            `json:"isError,omitempty"`
	// Display is what the client was shown for this block (the ACP
	// tool_call / final tool_call_update), replayed verbatim by session/load.
	// Providers never send it to a model.
	Display json.RawMessage `json:"display,omitempty"`
}

// Message is one conversation message.
type Message struct {
	Role    Role    `json:"role"`
	Content []Block `json:"content"`
	// ID is the ACP messageId the client was shown this message's chunks
	// with (kept in the history, so a replay shows the same). Providers
	// never send it to a model.
	ID string `json:"id,omitempty"`
}

// TextOf joins the text blocks of a message.
func (m *Message) TextOf() string {
	var s string
	for _, b := range m.Content {
		if b.Type == BlockText {
			s += b.Text
		}
	}
	return s
}

// FirstText is the first text block that is not blank ("" if none): a
// client may send more blocks after the user's words (Goose sends a
// second text block with every prompt), which a title must not include.
func (m *Message) FirstText() string {
	for _, b := range m.Content {
		if b.Type == BlockText && strings.TrimSpace(b.Text) != "" {
			return b.Text
		}
	}
	return ""
}

// ImageMarker is the text an image becomes for a model that does not take
// images.
func ImageMarker(mediaType string) string { return "[image: " + mediaType + "]" }

// ImagesAsText returns msgs with every image replaced by its text marker
// (msgs itself when there is none), for models that take text only.
func ImagesAsText(msgs []Message) []Message {
	out := msgs
	for i := range msgs {
		if !msgs[i].HasImage() {
			continue
		}
		if &out[0] == &msgs[0] {
			out = append([]Message(nil), msgs...)
		}
		content := make([]Block, len(msgs[i].Content))
		for j, b := range msgs[i].Content {
			if b.Type == BlockImage {
				b = Block{Type: BlockText, Text: ImageMarker(b.MediaType)}
			}
			content[j] = b
		}
		out[i].Content = content
	}
	return out
}

// HasImage reports whether the message holds an image.
func (m *Message) HasImage() bool {
	for i := range m.Content {
		if m.Content[i].Type == BlockImage {
			return true
		}
	}
	return false
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// Request is one model call.
type Request struct {
	Model string
	// System is the system prompt's stable start, the same bytes at every
	// call of a project so the provider's prompt cache holds it (Anthropic:
	// a cache_control breakpoint; OpenAI: its automatic prefix cache).
	// SystemTurn follows it: what changes from prompt to prompt.
	System     string
	SystemTurn string
	Messages   []Message
	Tools      []ToolSpec
	MaxTokens  int
	// ThinkingBudget > 0 asks for extended thinking / reasoning where supported.
	ThinkingBudget int
}

// EventType discriminates Event.
type EventType uint8

const (
	EventTextDelta EventType = iota + 1
	EventThinkingDelta
	// EventThinkingSignature carries the signature of the thinking block just streamed.
	EventThinkingSignature
	EventRedactedThinking
	EventToolCallStart
	EventToolCallArgs
	EventToolCallEnd
	EventUsage
	EventStop
)

// Event is one streamed piece of a model answer.
type Event struct {
	Type EventType
	// Text is the delta for text/thinking events, the signature for
	// EventThinkingSignature and the payload for EventRedactedThinking.
	// Under BorrowText a delta's Text is valid only during the emit call.
	// A provider may join deltas of one kind that came in one read into
	// one event (the OpenAI decoder does, see oaStream.takeRun).
	Text string
	// Tool call events: Index orders calls within the answer; ID and Name are
	// set on EventToolCallStart, ArgsDelta on EventToolCallArgs.
	Index     int
	ID        string
	Name      string
	ArgsDelta string
	// Usage is set on EventUsage (counts for this call so far; providers
	// report once or with growing totals, the last one wins).
	Usage Usage
	// StopReason is set on EventStop.
	StopReason StopReason
	// Buffered: the next event has already been received, so a consumer
	// may hold this one back and send both together (text deltas joined
	// into one message) without delaying anything. False when the next
	// event has to come from the network, and from providers that cannot
	// tell.
	Buffered bool
	// PlainText: Text is printable ASCII without '"' or '\\', so it needs
	// no escaping inside a JSON string. False when not known.
	PlainText bool
}

// Usage counts tokens of one model call. InputTokens counts every prompt
// token, cached ones included (for Anthropic: input_tokens +
// cache_read_input_tokens + cache_creation_input_tokens), so InputTokens +
// OutputTokens is the context the call used. CachedReadTokens and
// CachedWriteTokens are the cached parts of InputTokens; ThoughtTokens is the
// reasoning part of OutputTokens.
type Usage struct {
	InputTokens       int64
	OutputTokens      int64
	ThoughtTokens     int64
	CachedReadTokens  int64
	CachedWriteTokens int64
}

// Add sums two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		InputTokens:       u.InputTokens + o.InputTokens,
		OutputTokens:      u.OutputTokens + o.OutputTokens,
		ThoughtTokens:     u.ThoughtTokens + o.ThoughtTokens,
		CachedReadTokens:  u.CachedReadTokens + o.CachedReadTokens,
		CachedWriteTokens: u.CachedWriteTokens + o.CachedWriteTokens,
	}
}

// StopReason says why a model call ended.
type StopReason string

const (
	StopEndTurn   StopReason = "end_turn"
	StopToolUse   StopReason = "tool_use"
	StopMaxTokens StopReason = "max_tokens"
	StopRefusal   StopReason = "refusal"
)

// APIError is an HTTP-level failure of the model API.
type APIError struct {
	Status     int
	Message    string
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	return fmt.Sprintf("model API error %d: %s", e.Status, e.Message)
}

// IsAuth reports a failure the user fixes by configuring credentials.
func (e *APIError) IsAuth() bool { return e.Status == 401 || e.Status == 403 }

// ErrNoCredentials means no API key is configured for the provider.
var ErrNoCredentials = errors.New("no API key configured")

// ErrStreamInterrupted wraps failures of a response stream that had started:
// a dropped connection, a stream that ended early or went idle.
var ErrStreamInterrupted = errors.New("stream interrupted")

// ErrIdleTimeout means the model server sent nothing for RetryPolicy.IdleTimeout.
// Errors carrying it also carry ErrStreamInterrupted.
var ErrIdleTimeout = errors.New("model server sent nothing for too long")

// IsAuthError reports errors that map to ACP "Authentication required".
func IsAuthError(err error) bool {
	if errors.Is(err, ErrNoCredentials) {
		return true
	}
	var apiErr *APIError
	return errors.As(err, &apiErr) && apiErr.IsAuth()
}
