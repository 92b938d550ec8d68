// Anthropic Messages provider (protocol "anthropic"; presets anthropic and
// anthropic_compatible).
//
// SDK decision, measured the same way as for OpenAI (BenchmarkAnthropicStream
// vs BenchmarkAnthropicSDKDecode): requests go through the official SDK,
// github.com/anthropics/anthropic-sdk-go/v2 (typed params, auth headers,
// base URL, error decoding into *anthropic.Error), with its retries off. The
// response stream is read here: the SDK's ssestream/MessageStreamEventUnion
// decoder reflects over every field of every event (see the numbers in the
// benchmark file); the gjson reader below picks the fields we use.
//
// Wire details:
//   - thinking blocks are sent back with their signature, redacted_thinking
//     blocks with their data, in the order the turn stored them; a thinking
//     block without a signature (a cancelled stream's partial) is dropped,
//     since the API rejects it;
//   - RoleTool messages become a user message of tool_result blocks;
//     consecutive messages of one role are merged into one;
//   - Request.ThinkingBudget (else Config.ThinkingBudget) > 0 sends
//     thinking {type: enabled, budget_tokens} (at least 1024, and max_tokens
//     is raised above it when needed);
//   - the system prompt's stable start (Request.System) and the last block
//     of the last message carry cache_control breakpoints, so the
//     conversation prefix is cached; Request.SystemTurn is a second system
//     block after the first breakpoint;
//   - the anthropic preset talks the SDK's API version and auth; every other
//     preset (anthropic_compatible servers) gets anthropic-version 2023-06-01
//     and the key in both x-api-key and Authorization, which those servers
//     implement;
//   - a base URL ending in /v1 is accepted (the /v1 is dropped: the client
//     appends /v1/messages).

package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"
	"github.com/tidwall/gjson"
)

func init() { Register(ProtocolAnthropic, NewAnthropic) }

// DefaultAnthropicBaseURL is used when Config.BaseURL is empty.
const DefaultAnthropicBaseURL = "https://api.anthropic.com"

// Default output caps when neither the request nor the config sets one.
const (
	defaultAnthropicMaxTokens = 16384
	// Compatible servers often cap output at 8K and reject more.
	defaultCompatMaxTokens = 8192
)

type anthropicProvider struct {
	cfg    Config
	svc    anthropic.MessageService
	compat bool
}

// NewAnthropic builds the Anthropic Messages provider. A missing API key is
// not an error here: Stream reports ErrNoCredentials. The provider does not
// retry; New wraps it in WithRetry.
func NewAnthropic(cfg Config) (Provider, error) {
	cfg = cfg.resolved()
	base := strings.TrimRight(cfg.BaseURL, "/")
	base = strings.TrimSuffix(base, "/v1")
	if base == "" {
		base = DefaultAnthropicBaseURL
	}
	compat := cfg.Provider != "anthropic"
	// NewMessageService, unlike anthropic.NewClient, reads no ANTHROPIC_*
	// variables or profile files: only LoadConfig's sources apply.
	opts := []option.RequestOption{
		option.WithBaseURL(base + "/"),
		option.WithHTTPClient(newHTTPClient()),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
		if compat {
			opts = append(opts, option.WithHeader("x-api-key", cfg.APIKey))
		}
	}
	if compat {
		opts = append(opts, option.WithHeader("anthropic-version", "2023-06-01"))
	}
	return &anthropicProvider{cfg: cfg, svc: anthropic.NewMessageService(opts...), compat: compat}, nil
}

// Stream implements Provider.
func (p *anthropicProvider) Stream(ctx context.Context, req *Request, emit func(Event)) error {
	if p.cfg.APIKey == "" {
		return ErrNoCredentials
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	params, err := p.params(req)
	if err != nil {
		return err
	}
	return streamCall(ctx, "anthropic", p.cfg.Retry.idleTimeout(),
		func(rctx context.Context, resp **http.Response) openedStream {
			return p.svc.NewStreaming(rctx, params, option.WithResponseInto(resp))
		},
		p.requestError,
		func(body io.Reader) error { return decodeAnthropicStream(body, emit) },
		func(err error) error { return redactErr(err, p.cfg.APIKey) })
}

func (p *anthropicProvider) params(req *Request) (anthropic.MessageNewParams, error) {
	model := req.Model
	if model == "" {
		model = p.cfg.Model
	}
	if model == "" {
		return anthropic.MessageNewParams{}, fmt.Errorf("%s: no model configured (set IAC_CODE_MODEL or providers.%s.model in settings.yml)",
			p.cfg.Provider, p.cfg.Provider)
	}
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = p.cfg.MaxTokens
	}
	if maxTokens <= 0 {
		maxTokens = defaultAnthropicMaxTokens
		if p.compat {
			maxTokens = defaultCompatMaxTokens
		}
	}
	params := anthropic.MessageNewParams{
		Model:    anthropic.Model(model),
		Messages: anthropicMessages(req.Messages),
	}
	budget := req.ThinkingBudget
	if budget <= 0 {
		budget = p.cfg.ThinkingBudget
	}
	if budget > 0 {
		budget = max(budget, 1024) // the API's minimum
		if maxTokens <= budget {
			maxTokens = budget + 4096
		}
		params.Thinking = anthropic.ThinkingConfigParamOfEnabled(int64(budget))
	}
	params.MaxTokens = int64(maxTokens)
	if req.System != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.System, CacheControl: anthropic.NewCacheControlEphemeralParam()}}
	}
	if req.SystemTurn != "" {
		// After the breakpoint: a change here leaves the cached System
		// (and the tools before it) a hit.
		params.System = append(params.System, anthropic.TextBlockParam{Text: req.SystemTurn})
	}
	for _, t := range req.Tools {
		tool := anthropic.ToolParam{Name: t.Name, InputSchema: anthropicSchema(t.InputSchema)}
		if t.Description != "" {
			tool.Description = anthropic.String(t.Description)
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}
	return params, nil
}

// anthropicSchema sends a tool's JSON schema as written.
func anthropicSchema(schema json.RawMessage) anthropic.ToolInputSchemaParam {
	if len(bytes.TrimSpace(schema)) == 0 {
		schema = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return param.Override[anthropic.ToolInputSchemaParam](schema)
}

// anthropicMessages maps the conversation onto Messages API messages.
func anthropicMessages(msgs []Message) []anthropic.MessageParam {
	type turn struct {
		assistant bool
		blocks    []anthropic.ContentBlockParamUnion
	}
	turns := make([]turn, 0, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		assistant := m.Role == RoleAssistant
		var blocks []anthropic.ContentBlockParamUnion
		if assistant {
			blocks = anthropicAssistant(m)
		} else {
			blocks = anthropicUser(m)
		}
		if len(blocks) == 0 {
			continue
		}
		if n := len(turns); n > 0 && turns[n-1].assistant == assistant {
			turns[n-1].blocks = append(turns[n-1].blocks, blocks...)
			continue
		}
		turns = append(turns, turn{assistant: assistant, blocks: blocks})
	}
	// Cache the conversation so far: a breakpoint on the last block.
	if n := len(turns); n > 0 {
		last := turns[n-1].blocks[len(turns[n-1].blocks)-1]
		switch {
		case last.OfText != nil:
			last.OfText.CacheControl = anthropic.NewCacheControlEphemeralParam()
		case last.OfToolResult != nil:
			last.OfToolResult.CacheControl = anthropic.NewCacheControlEphemeralParam()
		case last.OfImage != nil:
			last.OfImage.CacheControl = anthropic.NewCacheControlEphemeralParam()
		}
	}
	out := make([]anthropic.MessageParam, len(turns))
	for i, t := range turns {
		if t.assistant {
			out[i] = anthropic.NewAssistantMessage(t.blocks...)
		} else {
			out[i] = anthropic.NewUserMessage(t.blocks...)
		}
	}
	return out
}

func anthropicAssistant(m *Message) []anthropic.ContentBlockParamUnion {
	var blocks []anthropic.ContentBlockParamUnion
	for _, b := range m.Content {
		switch b.Type {
		case BlockThinking:
			if b.Signature != "" {
				blocks = append(blocks, anthropic.NewThinkingBlock(b.Signature, b.Text))
			}
		case BlockRedactedThinking:
			if b.Data != "" {
				blocks = append(blocks, anthropic.NewRedactedThinkingBlock(b.Data))
			}
		case BlockText, BlockSummary:
			if strings.TrimSpace(b.Text) != "" {
				blocks = append(blocks, anthropic.NewTextBlock(b.Text))
			}
		case BlockToolUse:
			input := b.Input
			if len(bytes.TrimSpace(input)) == 0 || !json.Valid(input) {
				input = json.RawMessage("{}")
			}
			blocks = append(blocks, anthropic.NewToolUseBlock(b.ToolCallID, input, b.Name))
		}
	}
	return blocks
}

func anthropicUser(m *Message) []anthropic.ContentBlockParamUnion {
	var blocks []anthropic.ContentBlockParamUnion
	// Tool results first: they must open the message after the tool_use.
	for _, b := range m.Content {
		if b.Type != BlockToolResult {
			continue
		}
		text := b.Text
		if text == "" {
			text = "(no output)"
		}
		r := anthropic.ToolResultBlockParam{
			ToolUseID: b.ToolCallID,
			Content:   []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: text}}},
		}
		if b.IsError {
			r.IsError = anthropic.Bool(true)
		}
		blocks = append(blocks, anthropic.ContentBlockParamUnion{OfToolResult: &r})
	}
	for _, b := range m.Content {
		switch {
		case (b.Type == BlockText || b.Type == BlockSummary) && strings.TrimSpace(b.Text) != "":
			blocks = append(blocks, anthropic.NewTextBlock(b.Text))
		case b.Type == BlockImage:
			blocks = append(blocks, anthropic.NewImageBlockBase64(b.MediaType, b.Data))
		}
	}
	return blocks
}

// requestError turns a failed request into *APIError where there was an
// HTTP answer.
func (p *anthropicProvider) requestError(err error, resp *http.Response) error {
	var sdkErr *anthropic.Error
	status, msg := 0, ""
	var header http.Header
	if errors.As(err, &sdkErr) {
		status, msg = sdkErr.StatusCode, sdkErr.Message
		if t := string(sdkErr.Type()); t != "" && msg != "" {
			msg = t + ": " + msg
		}
		if sdkErr.Response != nil {
			header = sdkErr.Response.Header
		}
	}
	if resp != nil && resp.StatusCode >= 400 {
		status, header = resp.StatusCode, resp.Header
		if msg == "" && resp.Body != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
			msg = errorMessage(body)
		}
	}
	if status == 0 {
		return redactErr(fmt.Errorf("anthropic: %w", err), p.cfg.APIKey)
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	if p.cfg.APIKey != "" {
		msg = strings.ReplaceAll(msg, p.cfg.APIKey, "[redacted]")
	}
	return &APIError{Status: status, Message: msg, RetryAfter: retryAfter(header)}
}

// Block kinds of a streamed answer.
const (
	anOther uint8 = iota
	anText
	anThinking
	anToolUse
)

type anBlock struct {
	kind  uint8
	call  int    // tool call index
	sig   string // thinking signature
	args  bool   // input_json_delta seen
	input string // input given whole in content_block_start
}

// anStream is the state of one streamed answer.
type anStream struct {
	emit   func(Event)
	blocks []anBlock
	nCalls int
	stop   string
	done   bool

	input, cacheRead, cacheWrite, output, thought int64
	gotUsage                                      bool
	slab                                          textSlab
}

// decodeAnthropicStream reads Messages API SSE events and emits Events. It
// returns nil only after message_stop.
func decodeAnthropicStream(body io.Reader, emit func(Event)) error {
	more := false
	s := &anStream{emit: func(ev Event) { ev.Buffered = more; emit(ev) }}
	err := readSSE(body, func(event, data []byte, buffered bool) (bool, error) {
		if len(data) == 0 {
			return false, nil
		}
		more = buffered
		return s.event(data)
	})
	if err != nil && err != io.EOF {
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			return err
		}
		return fmt.Errorf("anthropic: %w: %w", ErrStreamInterrupted, err)
	}
	if !s.done {
		return fmt.Errorf("anthropic: %w: stream ended without message_stop: %w", ErrStreamInterrupted, io.ErrUnexpectedEOF)
	}
	if s.gotUsage {
		emit(Event{Type: EventUsage, Usage: Usage{
			InputTokens:       s.input + s.cacheRead + s.cacheWrite,
			OutputTokens:      s.output,
			ThoughtTokens:     s.thought,
			CachedReadTokens:  s.cacheRead,
			CachedWriteTokens: s.cacheWrite,
		}})
	}
	emit(Event{Type: EventStop, StopReason: s.stopReason()})
	return nil
}

func (s *anStream) event(data []byte) (done bool, err error) {
	root := parseJSON(data)
	if !root.IsObject() {
		return false, errors.New("anthropic: stream event is not a JSON object")
	}
	var typ, index, delta, block, message, usage, apiErr gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			typ = v
		case "index":
			index = v
		case "delta":
			delta = v
		case "content_block":
			block = v
		case "message":
			message = v
		case "usage":
			usage = v
		case "error":
			apiErr = v
		}
		return true
	})
	switch typ.Str {
	case "content_block_delta":
		s.delta(s.block(index), delta)
	case "content_block_start":
		s.start(index, block)
	case "content_block_stop":
		s.blockStop(s.block(index))
	case "message_start":
		s.setUsage(message.Get("usage"))
	case "message_delta":
		if r := delta.Get("stop_reason"); r.Type == gjson.String {
			s.stop = stopReasonString(r.Str)
		}
		s.setUsage(usage)
	case "message_stop":
		s.done = true
		return true, nil
	case "error":
		return false, anthropicStreamError(apiErr)
	}
	// ping and unknown events are ignored.
	return false, nil
}

func (s *anStream) block(index gjson.Result) *anBlock {
	i := int(index.Int())
	if i < 0 || i >= len(s.blocks) {
		return nil
	}
	return &s.blocks[i]
}

func (s *anStream) start(index, cb gjson.Result) {
	i := int(index.Int())
	if i < 0 || i > 1<<12 {
		return
	}
	for len(s.blocks) <= i {
		s.blocks = append(s.blocks, anBlock{})
	}
	b := &s.blocks[i]
	*b = anBlock{}
	switch cb.Get("type").Str {
	case "text":
		b.kind = anText
		if t := own(cb.Get("text")); t != "" {
			s.emit(Event{Type: EventTextDelta, Text: t})
		}
	case "thinking":
		b.kind = anThinking
		if t := own(cb.Get("thinking")); t != "" {
			s.emit(Event{Type: EventThinkingDelta, Text: t})
		}
		b.sig = own(cb.Get("signature"))
	case "redacted_thinking":
		if d := own(cb.Get("data")); d != "" {
			s.emit(Event{Type: EventRedactedThinking, Text: d})
		}
	case "tool_use":
		b.kind = anToolUse
		b.call = s.nCalls
		s.nCalls++
		id := own(cb.Get("id"))
		if id == "" {
			id = "toolu_" + strconv.Itoa(b.call)
		}
		s.emit(Event{Type: EventToolCallStart, Index: b.call, ID: id, Name: own(cb.Get("name"))})
		if in := cb.Get("input"); in.IsObject() && strings.TrimSpace(in.Raw) != "{}" {
			b.input = strings.Clone(in.Raw)
		}
	}
}

func (s *anStream) delta(b *anBlock, d gjson.Result) {
	if b == nil {
		return
	}
	var typ, text, thinking, sig, partial gjson.Result
	d.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			typ = v
		case "text":
			text = v
		case "thinking":
			thinking = v
		case "signature":
			sig = v
		case "partial_json":
			partial = v
		}
		return true
	})
	switch typ.Str {
	case "text_delta":
		if t := s.slab.own(text); t != "" {
			s.emit(Event{Type: EventTextDelta, Text: t})
		}
	case "thinking_delta":
		if t := s.slab.own(thinking); t != "" {
			s.emit(Event{Type: EventThinkingDelta, Text: t})
		}
	case "signature_delta":
		b.sig += own(sig)
	case "input_json_delta":
		if b.kind == anToolUse {
			if a := own(partial); a != "" {
				b.args = true
				s.emit(Event{Type: EventToolCallArgs, Index: b.call, ArgsDelta: a})
			}
		}
	}
}

func (s *anStream) blockStop(b *anBlock) {
	if b == nil {
		return
	}
	switch b.kind {
	case anThinking:
		if b.sig != "" {
			s.emit(Event{Type: EventThinkingSignature, Text: b.sig})
		}
	case anToolUse:
		if !b.args && b.input != "" {
			// A server that sent the input whole in content_block_start.
			s.emit(Event{Type: EventToolCallArgs, Index: b.call, ArgsDelta: b.input})
		}
		s.emit(Event{Type: EventToolCallEnd, Index: b.call})
	}
	b.kind = anOther
}

// setUsage reads message_start's usage, then message_delta's cumulative
// counts (a field absent from a message_delta keeps its earlier value).
func (s *anStream) setUsage(u gjson.Result) {
	if !u.IsObject() {
		return
	}
	s.gotUsage = true
	u.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "input_tokens":
			if v.Type == gjson.Number {
				s.input = v.Int()
			}
		case "cache_read_input_tokens":
			if v.Type == gjson.Number {
				s.cacheRead = v.Int()
			}
		case "cache_creation_input_tokens":
			if v.Type == gjson.Number {
				s.cacheWrite = v.Int()
			}
		case "output_tokens":
			if v.Type == gjson.Number {
				s.output = v.Int()
			}
		case "output_tokens_details":
			if t := v.Get("thinking_tokens"); t.Type == gjson.Number {
				s.thought = t.Int()
			}
		}
		return true
	})
}

func stopReasonString(r string) string {
	for _, known := range [...]string{"end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn", "model_context_window_exceeded"} {
		if r == known {
			return known
		}
	}
	return strings.Clone(r)
}

func (s *anStream) stopReason() StopReason {
	switch s.stop {
	case "max_tokens", "model_context_window_exceeded":
		return StopMaxTokens
	case "refusal":
		return StopRefusal
	case "tool_use":
		return StopToolUse
	}
	if s.nCalls > 0 {
		return StopToolUse
	}
	return StopEndTurn
}

// anthropicErrorStatus maps Anthropic error types to HTTP statuses, for
// errors that arrive inside a stream.
var anthropicErrorStatus = map[string]int{
	"invalid_request_error": 400,
	"authentication_error":  401,
	"billing_error":         402,
	"permission_error":      403,
	"not_found_error":       404,
	"request_too_large":     413,
	"rate_limit_error":      429,
	"api_error":             500,
	"timeout_error":         504,
	"overloaded_error":      529,
}

// anthropicStreamError maps an `event: error` payload.
func anthropicStreamError(e gjson.Result) error {
	typ := e.Get("type").String()
	msg := e.Get("message").String()
	status, ok := anthropicErrorStatus[typ]
	if !ok {
		status = 500
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	if typ != "" {
		msg = typ + ": " + msg
	}
	return &APIError{Status: status, Message: strings.Clone(msg)}
}
