package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// The Anthropic Messages format: POST {Root}/v1/messages (any path ending in
// /messages), answered with the same bytes the Messages API streams:
//
//	event: message_start
//	data: {"type":"message_start","message":{…,"usage":{…}}}
//
//	event: content_block_delta
//	data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}
//	…
//	event: message_stop
//	data: {"type":"message_stop"}

// AnthropicRequest is the part of a Messages API request tests look at.
type AnthropicRequest struct {
	Model     string             `json:"model"`
	MaxTokens int                `json:"max_tokens"`
	Stream    bool               `json:"stream"`
	System    json.RawMessage    `json:"system"`
	Messages  []AnthropicMessage `json:"messages"`
	Tools     []AnthropicTool    `json:"tools"`
	Thinking  *AnthropicThinking `json:"thinking"`
}

// SystemText returns the system prompt (a string or text blocks joined).
func (r AnthropicRequest) SystemText() string { return blocksText(r.System) }

// AnthropicMessage is one request message.
type AnthropicMessage struct {
	Role string `json:"role"`
	// Content is a JSON string or an array of blocks; see Blocks.
	Content json.RawMessage `json:"content"`
}

// Blocks returns the content blocks (a string content as one text block).
func (m AnthropicMessage) Blocks() []AnthropicBlock {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []AnthropicBlock{{Type: "text", Text: s}}
	}
	var blocks []AnthropicBlock
	_ = json.Unmarshal(m.Content, &blocks)
	return blocks
}

// AnthropicBlock is a request content block; only the fields of its type
// are set.
type AnthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	Signature string          `json:"signature,omitempty"`
	Data      string          `json:"data,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	// Source is an image block's data.
	Source *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	} `json:"source,omitempty"`
	CacheControl *struct {
		Type string `json:"type"`
	} `json:"cache_control,omitempty"`
}

// ContentText returns a tool_result's content as text.
func (b AnthropicBlock) ContentText() string { return blocksText(b.Content) }

// AnthropicTool is a tool offered to the model.
type AnthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// AnthropicThinking is the request's thinking configuration.
type AnthropicThinking struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens"`
}

func blocksText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// anthropicErrors are the default message and error type per status.
var anthropicErrors = map[int][2]string{
	400: {"Invalid request.", "invalid_request_error"},
	401: {"invalid x-api-key", "authentication_error"},
	402: {"Your credit balance is too low to access the Anthropic API.", "billing_error"},
	403: {"Your API key does not have permission to use the specified resource.", "permission_error"},
	404: {"The requested resource could not be found.", "not_found_error"},
	413: {"Request exceeds the maximum allowed number of bytes.", "request_too_large"},
	429: {"Number of request tokens has exceeded your per-minute rate limit.", "rate_limit_error"},
	500: {"Internal server error", "api_error"},
	504: {"Request timed out.", "timeout_error"},
	529: {"Overloaded", "overloaded_error"},
}

// writeAnthropicError answers like the Messages API:
// {"type":"error","error":{"type","message"},"request_id"}.
func writeAnthropicError(w http.ResponseWriter, r *Reply) {
	d, ok := anthropicErrors[r.Status]
	if !ok {
		d = [2]string{http.StatusText(r.Status), "api_error"}
	}
	msg, typ := r.ErrorMessage, r.ErrorType
	if msg == "" {
		msg = d[0]
	}
	if typ == "" {
		typ = d[1]
	}
	b := []byte(`{"type":"error","error":{"type":`)
	b = appendString(b, typ)
	b = append(b, `,"message":`...)
	b = appendString(b, msg)
	b = append(b, `},"request_id":"req_llmtest"}`+"\n"...)
	h := w.Header()
	for k, v := range r.Header {
		h.Set(k, v)
	}
	if r.RetryAfter != "" {
		h.Set("Retry-After", r.RetryAfter)
	}
	h.Set("Content-Type", "application/json")
	h.Set("request-id", "req_llmtest")
	w.WriteHeader(r.Status)
	_, _ = w.Write(b)
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	head, reply, leave, ok := s.take(w, r, FormatAnthropic, writeAnthropicError)
	defer leave()
	if !ok {
		return
	}
	model := head.Model
	if model == "" {
		model = "claude-llmtest"
	}
	st := &anStreamer{pacer: newPacer(s, w, r, &reply), buf: make([]byte, 0, 512)}
	st.errorEvent = func() []byte {
		b := []byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":")
		b = appendString(b, reply.StreamError)
		b = append(b, `,"message":`...)
		b = appendString(b, reply.streamErrorMessage())
		return append(b, "}}\n\n"...)
	}
	st.run(fmt.Sprintf("msg_llmtest%d", s.seq.Add(1)), model)
	st.drain()
}

// anStreamer writes one scripted answer in the Anthropic format.
type anStreamer struct {
	pacer
	buf   []byte
	index int
}

// send writes one event; counted events are paced and may cut the stream.
func (st *anStreamer) send(counted bool, name string, data []byte) bool {
	if counted && !st.ready() {
		return false
	}
	b := append(st.buf[:0], "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	st.buf = b
	if counted {
		return st.put(b)
	}
	return st.write(b)
}

// textDelta writes a content_block_delta without allocating.
func (st *anStreamer) textDelta(kind, field, text string) bool {
	if !st.ready() {
		return false
	}
	b := append(st.buf[:0], "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
	b = appendInt(b, st.index)
	b = append(b, `,"delta":{"type":"`...)
	b = append(b, kind...)
	b = append(b, `","`...)
	b = append(b, field...)
	b = append(b, `":`...)
	b = appendString(b, text)
	b = append(b, "}}\n\n"...)
	st.buf = b
	return st.put(b)
}

func appendInt(b []byte, i int) []byte { return fmt.Appendf(b, "%d", i) }

func (st *anStreamer) blockStart(counted bool, block string) bool {
	return st.send(counted, "content_block_start",
		fmt.Appendf(nil, `{"type":"content_block_start","index":%d,"content_block":%s}`, st.index, block))
}

func (st *anStreamer) blockStop() bool {
	ok := st.send(false, "content_block_stop", fmt.Appendf(nil, `{"type":"content_block_stop","index":%d}`, st.index))
	st.index++
	return ok
}

func (st *anStreamer) run(id, model string) {
	r := st.reply
	st.writeHeader("request-id")
	u := r.usage()
	in := max(u.PromptTokens-u.CachedTokens-u.CacheCreationTokens, 0)
	usage := fmt.Sprintf(`"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d`,
		in, u.CacheCreationTokens, u.CachedTokens)

	start := fmt.Appendf(nil, `{"type":"message_start","message":{"id":%q,"type":"message","role":"assistant","model":`, id)
	start = appendString(start, model)
	start = fmt.Appendf(start, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{%s,"output_tokens":1}}}`, usage)
	if !st.send(true, "message_start", start) || !st.send(false, "ping", []byte(`{"type": "ping"}`)) {
		return
	}

	if thinking := r.thinkingPieces(); len(thinking) > 0 || r.Signature != "" {
		if !st.blockStart(false, `{"type":"thinking","thinking":"","signature":""}`) {
			return
		}
		for _, p := range thinking {
			if !st.textDelta("thinking_delta", "thinking", p) {
				return
			}
		}
		if !st.textDelta("signature_delta", "signature", r.signature()) || !st.blockStop() {
			return
		}
	}
	for _, d := range r.RedactedThinking {
		block := appendString([]byte(`{"type":"redacted_thinking","data":`), d)
		if !st.blockStart(false, string(append(block, '}'))) || !st.blockStop() {
			return
		}
	}
	if !st.text() || !st.toolCalls() {
		return
	}

	delta := []byte(`{"type":"message_delta","delta":{"stop_reason":`)
	delta = appendString(delta, r.stopReason())
	delta = fmt.Appendf(delta, `,"stop_sequence":null},"usage":{%s,"output_tokens":%d`, usage, u.CompletionTokens)
	if u.ReasoningTokens > 0 {
		delta = fmt.Appendf(delta, `,"output_tokens_details":{"thinking_tokens":%d}`, u.ReasoningTokens)
	}
	delta = append(delta, "}}"...)
	if !st.send(true, "message_delta", delta) {
		return
	}
	if st.cutAt >= 0 {
		st.cut()
		return
	}
	st.send(false, "message_stop", []byte(`{"type":"message_stop"}`))
}

func (st *anStreamer) text() bool {
	r := st.reply
	pieces := r.textPieces()
	if r.Chunks == 0 && len(pieces) == 0 {
		return true
	}
	if !st.blockStart(false, `{"type":"text","text":""}`) {
		return false
	}
	if r.Chunks > 0 {
		text := r.ChunkText
		if text == "" {
			text = "x"
		}
		for i := range r.Chunks {
			if r.ChunkFunc != nil {
				// Pace first, so a timestamp taken by ChunkFunc excludes Delay.
				if !st.ready() {
					return false
				}
				text = r.ChunkFunc(i)
				b := append(st.buf[:0], "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
				b = appendInt(b, st.index)
				b = append(b, `,"delta":{"type":"text_delta","text":`...)
				b = appendString(b, text)
				b = append(b, "}}\n\n"...)
				st.buf = b
				if !st.put(b) {
					return false
				}
				continue
			}
			if !st.textDelta("text_delta", "text", text) {
				return false
			}
		}
	} else {
		for _, p := range pieces {
			if !st.textDelta("text_delta", "text", p) {
				return false
			}
		}
	}
	return st.blockStop()
}

func (st *anStreamer) toolCalls() bool {
	r := st.reply
	for i := range r.ToolCalls {
		tc := &r.ToolCalls[i]
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("toolu_llmtest_%d", i)
		}
		block := appendString([]byte(`{"type":"tool_use","id":`), id)
		block = append(block, `,"name":`...)
		block = appendString(block, tc.Name)
		block = append(block, `,"input":{}}`...)
		if !st.blockStart(true, string(block)) {
			return false
		}
		for _, p := range r.argPieces(tc) {
			if !st.textDelta("input_json_delta", "partial_json", p) {
				return false
			}
		}
		if !st.blockStop() {
			return false
		}
	}
	return true
}

// Format-neutral views of a recorded request, so one assertion serves both
// formats (the e2e suite runs against either).

// Model is the request's model.
func (r RecordedRequest) Model() string {
	if r.Format == FormatAnthropic {
		return r.Anthropic.Model
	}
	return r.Chat.Model
}

// Streaming reports whether the request asked for a stream.
func (r RecordedRequest) Streaming() bool {
	if r.Format == FormatAnthropic {
		return r.Anthropic.Stream
	}
	return r.Chat.Stream
}

// SystemPrompt is the system prompt (OpenAI: the system messages joined).
func (r RecordedRequest) SystemPrompt() string {
	if r.Format == FormatAnthropic {
		return r.Anthropic.SystemText()
	}
	var parts []string
	for _, m := range r.Chat.Messages {
		if m.Role == "system" || m.Role == "developer" {
			parts = append(parts, m.Text())
		}
	}
	return strings.Join(parts, "\n")
}

// ToolResult is a tool result sent to the model.
type ToolResult struct {
	ID      string
	Content string
	// IsError is set by the Anthropic format only (is_error).
	IsError bool
}

// ToolResults lists the tool results of the request, in order: OpenAI role
// "tool" messages, Anthropic tool_result blocks.
func (r RecordedRequest) ToolResults() []ToolResult {
	var out []ToolResult
	if r.Format == FormatAnthropic {
		for _, m := range r.Anthropic.Messages {
			for _, b := range m.Blocks() {
				if b.Type == "tool_result" {
					out = append(out, ToolResult{ID: b.ToolUseID, Content: b.ContentText(), IsError: b.IsError})
				}
			}
		}
		return out
	}
	for _, m := range r.Chat.Messages {
		if m.Role == "tool" {
			out = append(out, ToolResult{ID: m.ToolCallID, Content: m.Text()})
		}
	}
	return out
}

// Image is an image sent to the model, in order of appearance.
type Image struct {
	// Role of the message holding it.
	Role string
	// MediaType and Data (base64): Anthropic's source; for OpenAI, parsed
	// from the data URL (URL keeps it whole).
	MediaType, Data string
	URL             string
}

// Images lists the images of the request: OpenAI image_url content parts,
// Anthropic image blocks.
func (r RecordedRequest) Images() []Image {
	var out []Image
	if r.Format == FormatAnthropic {
		for _, m := range r.Anthropic.Messages {
			for _, b := range m.Blocks() {
				if b.Type == "image" && b.Source != nil {
					out = append(out, Image{Role: m.Role, MediaType: b.Source.MediaType, Data: b.Source.Data})
				}
			}
		}
		return out
	}
	for _, m := range r.Chat.Messages {
		for _, p := range m.Parts() {
			if p.Type != "image_url" || p.ImageURL == nil {
				continue
			}
			img := Image{Role: m.Role, URL: p.ImageURL.URL}
			if rest, ok := strings.CutPrefix(p.ImageURL.URL, "data:"); ok {
				if meta, data, ok := strings.Cut(rest, ","); ok {
					img.MediaType, img.Data = strings.TrimSuffix(meta, ";base64"), data
				}
			}
			out = append(out, img)
		}
	}
	return out
}

// Thought is reasoning sent back to the model on an assistant message.
type Thought struct {
	Text string
	// Signature is the Anthropic thinking block's signature; Redacted is a
	// redacted_thinking block's data.
	Signature, Redacted string
}

// Thoughts lists the reasoning sent back, in order: OpenAI
// reasoning_content, Anthropic thinking and redacted_thinking blocks.
func (r RecordedRequest) Thoughts() []Thought {
	var out []Thought
	if r.Format == FormatAnthropic {
		for _, m := range r.Anthropic.Messages {
			for _, b := range m.Blocks() {
				switch b.Type {
				case "thinking":
					out = append(out, Thought{Text: b.Thinking, Signature: b.Signature})
				case "redacted_thinking":
					out = append(out, Thought{Redacted: b.Data})
				}
			}
		}
		return out
	}
	for _, m := range r.Chat.Messages {
		if m.ReasoningContent != "" {
			out = append(out, Thought{Text: m.ReasoningContent})
		}
	}
	return out
}
