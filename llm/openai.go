// OpenAI-compatible Chat Completions provider ("openai_compatible").
//
// SDK decision: requests go through the official SDK,
// github.com/openai/openai-go/v3 (typed params, auth, base URL, error
// decoding into *openai.Error). It can carry DeepSeek/Qwen reasoning_content
// both ways: SetExtraFields puts it on assistant messages, and the stream's
// delta fields are read from raw JSON, so no other SDK is needed.
//
// The response stream is decoded here rather than by the SDK's
// ssestream/ChatCompletionChunk path, which measured ~25µs and ~58
// allocations per chunk (reflection over every field). The SSE reader below
// takes the common text/reasoning chunk with one strict hand scan
// (fastChunk, ~0.35µs) and everything else with gjson (already an SDK
// dependency; ~0.7µs when it walked every chunk): ~0.75–1µs and ~1.15
// allocations per chunk over HTTP, the one allocation being the delta text.
// The raw *http.Response comes from option.WithResponseInto.
//
// Per-preset request quirks (see Preset):
//   - output cap: max_completion_tokens for the openai preset and any base
//     URL on api.openai.com (OpenAI's reasoning models reject max_tokens),
//     max_tokens everywhere else (what compatible servers know);
//   - thinking (Request.ThinkingBudget, else Config.ThinkingBudget, > 0):
//     DashScope gets enable_thinking + thinking_budget, OpenAI reasoning
//     models and Gemini reasoning_effort, OpenRouter reasoning.max_tokens,
//     Zhipu thinking.type=enabled; others nothing (the model decides);
//   - reasoning_content (DeepSeek/Qwen) is sent back on the assistant
//     messages of the current turn (after the last user message), where
//     DeepSeek's thinking mode needs it during tool calls, and dropped from
//     earlier turns, which DeepSeek asks clients not to resend;
//   - usage: stream_options.include_usage is always asked for; a server that
//     ignores it and puts usage on a chunk with choices, or sends none, is
//     handled (the last usage seen is reported; none = no EventUsage).

package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"
)

func init() { Register(ProtocolOpenAI, NewOpenAI) }

// DefaultOpenAIBaseURL is used when Config.BaseURL is empty.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1"

// openAIProvider streams Chat Completions. It is safe for concurrent use.
type openAIProvider struct {
	cfg    Config
	preset Preset
	svc    openai.ChatCompletionService
	// maxCompletion: send max_completion_tokens instead of max_tokens.
	maxCompletion bool
	tools         toolCache
}

// maxIdleModelConns bounds the idle connections kept to the model host.
const maxIdleModelConns = 256

// newHTTPClient is the client both providers use.
func newHTTPClient() *http.Client {
	var transport http.RoundTripper = http.DefaultTransport
	if t, ok := transport.(*http.Transport); ok {
		t = t.Clone()
		// A server that accepts but never answers fails instead of hanging
		// (the idle timeout usually fires first).
		t.ResponseHeaderTimeout = 10 * time.Minute
		// Every session of the server talks to the same model host: keep a
		// connection per concurrent call for the next one (the default is
		// 2, so most model calls would dial and handshake again).
		t.MaxIdleConnsPerHost = maxIdleModelConns
		if t.DialContext != nil {
			t.DialContext = dialAhead(t.DialContext)
		}
		transport = t
	}
	return &http.Client{Transport: transport}
}

// NewOpenAI builds the OpenAI-compatible provider. A missing API key is not an
// error here: Stream reports ErrNoCredentials so the agent can ask for auth.
// The provider does not retry; New wraps it in WithRetry.
func NewOpenAI(cfg Config) (Provider, error) {
	cfg = cfg.resolved()
	base := cfg.BaseURL
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	preset, _ := cfg.Preset()
	// NewChatCompletionService, unlike openai.NewClient, ignores OPENAI_*
	// environment variables: only LoadConfig's sources configure this provider.
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithHTTPClient(newHTTPClient()),
		// Retries belong to WithRetry, which knows whether output was shown.
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	p := &openAIProvider{cfg: cfg, preset: preset, svc: openai.NewChatCompletionService(opts...)}
	p.maxCompletion = preset.MaxCompletionTokens
	if u, err := url.Parse(base); err == nil && strings.EqualFold(u.Hostname(), "api.openai.com") {
		p.maxCompletion = true
	}
	return p, nil
}

// Stream implements Provider.
func (p *openAIProvider) Stream(ctx context.Context, req *Request, emit func(Event)) error {
	if !p.cfg.HasCredentials() {
		return ErrNoCredentials
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	call, err := p.call(req)
	if err != nil {
		return err
	}
	body, err := call.body()
	if err != nil {
		return err
	}
	return streamCall(ctx, "openai_compatible", p.cfg.Retry.idleTimeout(),
		func(rctx context.Context, resp **http.Response) openedStream {
			// The body is encoded already (see openAICall.body); the SDK
			// sends it, adding "stream":true as it does to its own encoding.
			return p.svc.NewStreaming(rctx, bodyGivenParams,
				option.WithRequestBody("application/json", body), option.WithResponseInto(resp))
		},
		p.requestError,
		func(body io.Reader) error { return decodeOpenAIStream(body, emit) },
		p.redact)
}

// bodyGivenParams stand for a request whose body option.WithRequestBody
// gives: the SDK encodes them (before the option replaces the encoding) as
// the two bytes {}, where zero params cost a reflection walk over ~40 fields.
var bodyGivenParams = param.Override[openai.ChatCompletionNewParams](json.RawMessage(`{}`))

// openAICall is one Chat Completions request as this provider builds it:
// what goes into it is decided once here; params renders it as the SDK's
// types, body encodes it.
type openAICall struct {
	model    string
	messages []openAIMessage
	// maxTokens > 0 is sent as max_completion_tokens when maxCompletion,
	// else as max_tokens.
	maxTokens     int64
	maxCompletion bool
	effort        shared.ReasoningEffort
	// extras are top-level fields the SDK's types lack (thinking switches).
	extras map[string]any
	// tools are the tool definitions as the SDK encodes them (toolCache).
	tools []json.RawMessage
}

// openAIMessage is one request message.
type openAIMessage struct {
	role string // "system", "user", "assistant" or "tool"
	// text is the content, unless parts are set (a user message with
	// images) or an assistant message has tool calls and no text
	// (noContent).
	text      string
	parts     []openAIPart
	noContent bool
	// toolCallID: a tool message's call.
	toolCallID string
	// toolCalls: an assistant message's calls.
	toolCalls []openAIToolCall
	// reasoning is sent back as reasoning_content (assistant, "" none).
	reasoning string
}

// openAIPart is one content part of a user message: an image when imageURL
// is set, else text.
type openAIPart struct {
	text, imageURL string
}

// openAIToolCall is one tool call of an assistant message.
type openAIToolCall struct {
	id, name, args string
}

func (p *openAIProvider) call(req *Request) (*openAICall, error) {
	model := req.Model
	if model == "" {
		model = p.cfg.Model
	}
	if model == "" {
		return nil, fmt.Errorf("%s: no model configured (set IAC_CODE_MODEL or providers.%s.model in settings.yml)",
			p.cfg.Provider, p.cfg.Provider)
	}
	c := &openAICall{model: model, messages: openAIMessages(req), maxCompletion: p.maxCompletion}
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = p.cfg.MaxTokens
	}
	if maxTokens > 0 {
		c.maxTokens = int64(maxTokens)
	}
	budget := req.ThinkingBudget
	if budget <= 0 {
		budget = p.cfg.ThinkingBudget
	}
	if budget > 0 {
		p.thinking(c, model, budget)
	}
	for _, t := range req.Tools {
		raw, err := p.tools.get(t)
		if err != nil {
			return nil, err
		}
		c.tools = append(c.tools, raw)
	}
	return c, nil
}

// params renders the call as the SDK's request type.
func (c *openAICall) params() openai.ChatCompletionNewParams {
	params := openai.ChatCompletionNewParams{
		Model:           shared.ChatModel(c.model),
		Messages:        make([]openai.ChatCompletionMessageParamUnion, 0, len(c.messages)),
		StreamOptions:   openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		ReasoningEffort: c.effort,
	}
	for i := range c.messages {
		params.Messages = append(params.Messages, c.messages[i].param())
	}
	if c.maxTokens > 0 {
		if c.maxCompletion {
			params.MaxCompletionTokens = openai.Int(c.maxTokens)
		} else {
			params.MaxTokens = openai.Int(c.maxTokens)
		}
	}
	if c.extras != nil {
		params.SetExtraFields(c.extras)
	}
	for _, raw := range c.tools {
		params.Tools = append(params.Tools, param.Override[openai.ChatCompletionToolUnionParam](raw))
	}
	return params
}

// param renders the message as the SDK's type.
func (m *openAIMessage) param() openai.ChatCompletionMessageParamUnion {
	switch m.role {
	case "system":
		return openai.SystemMessage(m.text)
	case "tool":
		return openai.ToolMessage(m.text, m.toolCallID)
	case "assistant":
		var msg openai.ChatCompletionAssistantMessageParam
		for _, tc := range m.toolCalls {
			msg.ToolCalls = append(msg.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID:       tc.id,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.name, Arguments: tc.args},
				},
			})
		}
		if !m.noContent {
			msg.Content.OfString = openai.String(m.text)
		}
		if m.reasoning != "" {
			// DeepSeek/Qwen expect their reasoning back on tool-call turns.
			msg.SetExtraFields(map[string]any{"reasoning_content": m.reasoning})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &msg}
	}
	if m.parts == nil {
		return openai.UserMessage(m.text)
	}
	parts := make([]openai.ChatCompletionContentPartUnionParam, 0, len(m.parts))
	for _, pt := range m.parts {
		if pt.imageURL != "" {
			parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: pt.imageURL}))
		} else {
			parts = append(parts, openai.TextContentPart(pt.text))
		}
	}
	return openai.UserMessage(parts)
}

// maxCachedTools bounds toolCache (MCP servers may bring many tools, and
// change them).
const maxCachedTools = 1024

// toolCache keeps each tool definition as the SDK encodes it. The SDK
// encodes a definition by reflection and splices its raw schema in with
// sjson: ~0.2 ms of CPU per model call for the built-in tools, redone for
// the same tools at every call. A cached definition goes out as raw JSON.
// Definitions are found by name and compared whole (a tool of one name
// may differ between sessions: MCP servers, limits in descriptions): no
// key to build and hash from the ~5 KB of the definitions at every call.
type toolCache struct {
	mu sync.Mutex
	m  map[string][]cachedTool // by name, newest first
	n  int
}

// cachedTool is one definition and its encoding.
type cachedTool struct {
	description string
	schema      []byte
	raw         json.RawMessage
}

// maxToolVariants bounds the definitions kept under one name.
const maxToolVariants = 4

func (c *toolCache) get(t ToolSpec) (json.RawMessage, error) {
	c.mu.Lock()
	for _, e := range c.m[t.Name] {
		if e.description == t.Description && bytes.Equal(e.schema, t.InputSchema) {
			c.mu.Unlock()
			return e.raw, nil
		}
	}
	c.mu.Unlock()
	fn := shared.FunctionDefinitionParam{Name: t.Name}
	if t.Description != "" {
		fn.Description = openai.String(t.Description)
	}
	schema := t.InputSchema
	if len(bytes.TrimSpace(schema)) == 0 {
		schema = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	// Raw, so the schema is sent as written (key order, numbers).
	fn.SetExtraFields(map[string]any{"parameters": schema})
	raw, err := json.Marshal(openai.ChatCompletionFunctionTool(fn))
	if err != nil {
		return nil, fmt.Errorf("tool %s: %w", t.Name, err)
	}
	c.mu.Lock()
	if c.m == nil || c.n >= maxCachedTools {
		c.m, c.n = map[string][]cachedTool{}, 0
	}
	variants := c.m[t.Name]
	if len(variants) >= maxToolVariants {
		variants = variants[:maxToolVariants-1]
		c.n--
	}
	e := cachedTool{description: t.Description, schema: bytes.Clone(t.InputSchema), raw: raw}
	c.m[t.Name] = append([]cachedTool{e}, variants...)
	c.n++
	c.mu.Unlock()
	return raw, nil
}

// thinking asks for reasoning the way the preset's server understands.
func (p *openAIProvider) thinking(c *openAICall, model string, budget int) {
	style := p.preset.Thinking
	if p.maxCompletion && style == ThinkingNone {
		style = ThinkingEffort // openai_compatible pointed at api.openai.com
	}
	switch style {
	case ThinkingDashScope:
		c.extras = map[string]any{"enable_thinking": true, "thinking_budget": budget}
	case ThinkingEffort:
		if p.preset.Key == "gemini" || isOpenAIReasoningModel(model) {
			c.effort = effort(budget)
		}
	case ThinkingOpenRouter:
		c.extras = map[string]any{"reasoning": map[string]any{"max_tokens": budget}}
	case ThinkingZhipu:
		c.extras = map[string]any{"thinking": map[string]any{"type": "enabled"}}
	}
}

// effort maps a token budget onto reasoning_effort.
func effort(budget int) shared.ReasoningEffort {
	switch {
	case budget < 4096:
		return shared.ReasoningEffortLow
	case budget < 16384:
		return shared.ReasoningEffortMedium
	default:
		return shared.ReasoningEffortHigh
	}
}

// isOpenAIReasoningModel: the models that accept reasoning_effort.
func isOpenAIReasoningModel(model string) bool {
	m := strings.ToLower(model)
	m = m[strings.LastIndexByte(m, '/')+1:] // "openai/o3"
	for _, prefix := range []string{"o1", "o3", "o4", "gpt-5", "gpt-6", "gpt-oss"} {
		if strings.HasPrefix(m, prefix) {
			return true
		}
	}
	return false
}

// openAIMessages maps the conversation onto Chat Completions messages.
func openAIMessages(req *Request) []openAIMessage {
	out := make([]openAIMessage, 0, len(req.Messages)+1)
	if req.System != "" {
		out = append(out, openAIMessage{role: "system", text: req.System})
	}
	// The current turn starts at the last user message.
	turnStart := 0
	for i := range req.Messages {
		if req.Messages[i].Role == RoleUser {
			turnStart = i
		}
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		if m.Role == RoleAssistant {
			out = append(out, openAIAssistant(m, i > turnStart))
			continue
		}
		// Tool results first: they must directly follow the assistant's
		// tool_calls. Then text joins into one user message; a summary
		// becomes a message of its own.
		for _, b := range m.Content {
			if b.Type == BlockToolResult {
				out = append(out, openAIMessage{role: "tool", text: b.Text, toolCallID: b.ToolCallID})
			}
		}
		var text []string
		var parts []openAIPart
		flush := func() {
			switch {
			case parts != nil:
				if len(text) > 0 {
					parts = append(parts, openAIPart{text: strings.Join(text, "\n")})
				}
				out = append(out, openAIMessage{role: "user", parts: parts})
			case len(text) > 0:
				out = append(out, openAIMessage{role: "user", text: strings.Join(text, "\n")})
			}
			text, parts = text[:0], nil
		}
		for _, b := range m.Content {
			switch b.Type {
			case BlockText:
				text = append(text, b.Text)
			case BlockImage:
				// Images ride in the same user message as content parts,
				// in order, as data URLs.
				if len(text) > 0 {
					parts = append(parts, openAIPart{text: strings.Join(text, "\n")})
					text = text[:0]
				}
				parts = append(parts, openAIPart{imageURL: "data:" + b.MediaType + ";base64," + b.Data})
			case BlockSummary:
				flush()
				out = append(out, openAIMessage{role: "user", text: b.Text})
			}
		}
		flush()
	}
	return out
}

// openAIAssistant maps an assistant message; withReasoning sends its
// thinking back as reasoning_content.
func openAIAssistant(m *Message, withReasoning bool) openAIMessage {
	var text, thinking strings.Builder
	msg := openAIMessage{role: "assistant"}
	for _, b := range m.Content {
		switch b.Type {
		case BlockText:
			text.WriteString(b.Text)
		case BlockThinking:
			thinking.WriteString(b.Text)
		case BlockToolUse:
			args := string(b.Input)
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			msg.toolCalls = append(msg.toolCalls, openAIToolCall{id: b.ToolCallID, name: b.Name, args: args})
		}
	}
	msg.text = text.String()
	msg.noContent = text.Len() == 0 && len(msg.toolCalls) > 0
	if thinking.Len() > 0 && withReasoning {
		msg.reasoning = thinking.String()
	}
	return msg
}

// requestError turns a failed request into *APIError where there was an
// HTTP answer. resp is set by the SDK even when it reports an error.
func (p *openAIProvider) requestError(err error, resp *http.Response) error {
	var sdkErr *openai.Error
	status := 0
	var header http.Header
	msg := ""
	if errors.As(err, &sdkErr) {
		status, msg = sdkErr.StatusCode, sdkErr.Message
		if sdkErr.Response != nil {
			header = sdkErr.Response.Header
		}
	}
	if resp != nil && resp.StatusCode >= 400 {
		status, header = resp.StatusCode, resp.Header
		if msg == "" && resp.Body != nil {
			// The SDK re-populates the body after reading it.
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
			msg = errorMessage(body)
		}
	}
	if status == 0 {
		return p.redact(fmt.Errorf("openai_compatible: %w", err))
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &APIError{Status: status, Message: p.redactString(msg), RetryAfter: retryAfter(header)}
}

// errorMessage digs a message out of a non-OpenAI-shaped error body.
func errorMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &v) == nil {
		var s string
		var o struct {
			Message string `json:"message"`
		}
		switch {
		case json.Unmarshal(v.Error, &o) == nil && o.Message != "":
			return o.Message
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case v.Message != "":
			return v.Message
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 300 {
		cut := 300
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// retryAfter reads retry-after-ms (OpenAI) or Retry-After (seconds or date).
func retryAfter(h http.Header) time.Duration {
	if h == nil {
		return 0
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s > 0 {
			return time.Duration(s * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

func (p *openAIProvider) redactString(s string) string {
	if p.cfg.APIKey == "" {
		return s
	}
	return strings.ReplaceAll(s, p.cfg.APIKey, "[redacted]")
}

// redact keeps the API key out of error text (e.g. a key pasted into a URL).
func (p *openAIProvider) redact(err error) error { return redactErr(err, p.cfg.APIKey) }

// redactErr hides key in err's text; errors.Is/As still see the cause.
func redactErr(err error, key string) error {
	if err == nil || key == "" || !strings.Contains(err.Error(), key) {
		return err
	}
	return &redactedError{msg: strings.ReplaceAll(err.Error(), key, "[redacted]"), err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// oaStream is the state of one streamed answer.
type oaStream struct {
	emit     func(Event)
	calls    []int // OpenAI tool call index -> our index+1 (0 = not started)
	nCalls   int
	finish   string
	usage    Usage
	gotUsage bool
	err      error
	// shapes are the common chunk's bytes around its text, learned from
	// chunks fastChunk took (see shapeChunk): one for text, one for
	// reasoning.
	shapes [2]chunkShape
	slab   textSlab
}

// decodeOpenAIStream reads SSE events from body and emits Events. It returns
// nil only when the stream carried a finish_reason.
func decodeOpenAIStream(body io.Reader, emit func(Event)) error {
	more := false
	s := &oaStream{emit: func(ev Event) { ev.Buffered = more; emit(ev) }}
	err := readSSE(body, func(_, data []byte, buffered bool) (bool, error) {
		if len(data) == 0 {
			return false, nil
		}
		more = buffered
		return s.event(data)
	})
	more = false
	if err == io.EOF {
		err = nil
	}
	return s.finishStream(err)
}

var doneMarker = []byte("[DONE]")

// event handles one SSE data payload; done reports [DONE]. The common chunk
// (text or reasoning of choice 0, nothing else acted on) takes fastChunk, a
// single strict scan; anything else takes the full gjson path (fullChunk).
func (s *oaStream) event(data []byte) (done bool, err error) {
	if bytes.Equal(bytes.TrimSpace(data), doneMarker) {
		return true, nil
	}
	if s.shapeChunk(data) || s.fastChunk(data) {
		return false, nil
	}
	return false, s.fullChunk(data)
}

// fullChunk reads a chunk with gjson in one pass over the keys we use,
// without decoding the rest.
func (s *oaStream) fullChunk(data []byte) error {
	// root aliases the read buffer: strings kept past this call go through own.
	root := parseJSON(data)
	if !root.IsObject() {
		return errors.New("openai_compatible: stream chunk is not a JSON object")
	}
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "choices":
			v.ForEach(func(_, c gjson.Result) bool {
				s.choice(c)
				return true
			})
		case "usage":
			if v.IsObject() {
				s.setUsage(v)
			}
		case "error":
			if v.Type != gjson.Null {
				s.err = streamError(v)
				return false
			}
		}
		return true
	})
	return s.err
}

func (s *oaStream) choice(c gjson.Result) {
	var index int64
	var delta, finish gjson.Result
	c.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			index = v.Int()
		case "delta":
			delta = v
		case "finish_reason":
			finish = v
		}
		return true
	})
	if index != 0 {
		return // we ask for one choice
	}
	var content, reasoning, toolCalls gjson.Result
	delta.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content":
			content = v
		case "reasoning_content":
			reasoning = v
		case "reasoning": // vLLM, OpenRouter
			if reasoning.Type != gjson.String {
				reasoning = v
			}
		case "tool_calls":
			toolCalls = v
		}
		return true
	})
	if t := own(reasoning); t != "" {
		s.emit(Event{Type: EventThinkingDelta, Text: t})
	}
	if t := own(content); t != "" {
		s.emit(Event{Type: EventTextDelta, Text: t})
	}
	if toolCalls.IsArray() {
		toolCalls.ForEach(func(_, tc gjson.Result) bool {
			s.toolCall(tc)
			return true
		})
	}
	if finish.Type == gjson.String && finish.Str != "" {
		s.finish = finishReason(finish.Str)
	}
}

func (s *oaStream) toolCall(tc gjson.Result) {
	var index int64
	var id, fn gjson.Result
	tc.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			index = v.Int()
		case "id":
			id = v
		case "function":
			fn = v
		}
		return true
	})
	var name, args gjson.Result
	fn.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "name":
			name = v
		case "arguments":
			args = v
		}
		return true
	})
	idx := int(index)
	if idx < 0 || idx > 1<<10 {
		idx = 0
	}
	for len(s.calls) <= idx {
		s.calls = append(s.calls, 0)
	}
	if s.calls[idx] == 0 {
		s.nCalls++
		s.calls[idx] = s.nCalls
		callID := own(id)
		if callID == "" {
			callID = "call_" + strconv.Itoa(s.nCalls-1)
		}
		s.emit(Event{Type: EventToolCallStart, Index: s.nCalls - 1, ID: callID, Name: own(name)})
	}
	if a := own(args); a != "" {
		s.emit(Event{Type: EventToolCallArgs, Index: s.calls[idx] - 1, ArgsDelta: a})
	}
}

func (s *oaStream) setUsage(u gjson.Result) {
	s.gotUsage = true
	s.usage = Usage{
		InputTokens:      u.Get("prompt_tokens").Int(),
		OutputTokens:     u.Get("completion_tokens").Int(),
		ThoughtTokens:    u.Get("completion_tokens_details.reasoning_tokens").Int(),
		CachedReadTokens: u.Get("prompt_tokens_details.cached_tokens").Int(),
	}
	if s.usage.CachedReadTokens == 0 {
		s.usage.CachedReadTokens = u.Get("prompt_cache_hit_tokens").Int() // DeepSeek
	}
}

// streamError maps an in-stream {"error":{...}} (OpenRouter, proxies).
func streamError(v gjson.Result) error {
	msg := v.String()
	if v.IsObject() {
		msg = v.Get("message").String()
	}
	status := 500
	if n := v.Get("code"); n.Exists() {
		if c, err := strconv.Atoi(n.String()); err == nil && c >= 400 && c < 600 {
			status = c
		}
	}
	return &APIError{Status: status, Message: strings.Clone(msg)}
}

func finishReason(r string) string {
	for _, known := range [...]string{"stop", "tool_calls", "function_call", "length", "content_filter"} {
		if r == known {
			return known
		}
	}
	return strings.Clone(r)
}

// finishStream emits the closing events, or fails a stream cut short.
func (s *oaStream) finishStream(err error) error {
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			return err
		}
		return fmt.Errorf("openai_compatible: %w: %w", ErrStreamInterrupted, err)
	}
	if s.finish == "" {
		return fmt.Errorf("openai_compatible: %w: stream ended without finish_reason: %w", ErrStreamInterrupted, io.ErrUnexpectedEOF)
	}
	for i := range s.nCalls {
		s.emit(Event{Type: EventToolCallEnd, Index: i})
	}
	if s.gotUsage {
		s.emit(Event{Type: EventUsage, Usage: s.usage})
	}
	s.emit(Event{Type: EventStop, StopReason: s.stopReason()})
	return nil
}

func (s *oaStream) stopReason() StopReason {
	switch {
	case s.finish == "tool_calls" || s.finish == "function_call" || s.nCalls > 0:
		return StopToolUse
	case s.finish == "length":
		return StopMaxTokens
	case s.finish == "content_filter":
		return StopRefusal
	default:
		return StopEndTurn
	}
}

// fastChunk handles the chunk that makes up nearly all of a stream: one
// choice with index 0 whose delta carries content and/or reasoning, no
// tool_calls, no finish_reason, no usage object, no error. It scans the
// payload once, strictly, and emits only after the whole payload matched;
// on anything else (other keys' values are skipped as gjson skips them, but
// escaped keys, malformed JSON, trailing bytes, more choices, ... ) it
// returns false having done nothing, and fullChunk decides. So both paths
// give the same events for every payload (FuzzOpenAIFastChunk checks this).
// It halves the decoder's cost per chunk (BenchmarkOpenAIDecode ~0.7µs with
// gjson's ForEach walking every key of every level, ~0.35µs here).
func (s *oaStream) fastChunk(data []byte) bool {
	sc := jscan{d: data}
	if !sc.open('{') {
		return false
	}
	var d fastDelta
	choices := false
	for more := !sc.close('}'); more; {
		k, ok := sc.key()
		if !ok {
			return false
		}
		switch string(k) {
		case "choices":
			if choices || !sc.choices(&d) {
				return false // a second "choices" is processed too: full path
			}
			choices = true
		case "usage":
			if sc.peek() == '{' || !sc.skip() {
				return false
			}
		case "error":
			if !sc.null() {
				return false
			}
		default:
			if !sc.skip() {
				return false
			}
		}
		if more, ok = sc.next('}'); !ok {
			return false
		}
	}
	sc.ws()
	if sc.i != len(data) {
		return false // gjson would look for keys after the object
	}
	s.learnShape(data, &d)
	if t := s.text(d.reasoning); t != "" {
		s.emit(Event{Type: EventThinkingDelta, Text: t})
	}
	if t := s.text(d.content); t != "" {
		s.emit(Event{Type: EventTextDelta, Text: t})
	}
	return true
}

// chunkShape is a chunk fastChunk took, cut around the string token that
// made its one event: head is everything before the token, tail everything
// after. The chunks of a stream differ only in that token (id, created,
// model and fingerprint repeat), so the next chunk is usually head + token
// + tail.
//
// Why that is exact: jscan reads left to right and nothing it decides
// depends on a string token's bytes beyond where the token ends. A chunk
// head + t + tail, with t one whole string token, is therefore scanned as
// the learned chunk was, step for step, except that the delta's field
// holds t; and as the learned chunk's field still held its own token at
// the end (no later key replaced it, checked when learning), fastChunk
// would emit exactly one event of the same kind with text(t). So
// shapeChunk gives what fastChunk gives, and fastChunk what fullChunk
// gives (FuzzOpenAIShapeChunk, FuzzOpenAIFastChunk).
type chunkShape struct {
	head, tail []byte
	kind       EventType
}

// learnShape keeps data's shape when fastChunk took it and it carries one
// non-empty string in the delta: content, or reasoning with content null or
// absent.
func (s *oaStream) learnShape(data []byte, d *fastDelta) {
	tok, kind := d.content, EventTextDelta
	switch {
	case len(d.content) > 2 && d.reasoning == nil:
	case len(d.reasoning) > 2 && d.content == nil:
		tok, kind = d.reasoning, EventThinkingDelta
	default:
		return
	}
	// tok is a slice of data: where it starts (slices share the end of
	// their backing array).
	at := cap(data) - cap(tok)
	if at < 0 || at+len(tok) > len(data) {
		return
	}
	sh := &s.shapes[0]
	if kind == EventThinkingDelta {
		sh = &s.shapes[1]
	}
	sh.head = append(sh.head[:0], data[:at]...)
	sh.tail = append(sh.tail[:0], data[at+len(tok):]...)
	sh.kind = kind
}

// shapeChunk takes a chunk of a learned shape: it checks the head and tail
// bytes and scans only the token between them.
func (s *oaStream) shapeChunk(data []byte) bool {
	for i := range s.shapes {
		sh := &s.shapes[i]
		if len(sh.head) == 0 || len(data) < len(sh.head)+len(sh.tail)+2 ||
			!bytes.HasPrefix(data, sh.head) || !bytes.HasSuffix(data, sh.tail) {
			continue
		}
		sc := jscan{d: data[:len(data)-len(sh.tail)], i: len(sh.head)}
		if sc.d[sc.i] != '"' {
			continue
		}
		tok, _, ok := sc.str()
		if !ok || sc.i != len(sc.d) {
			continue // not one whole string token between them
		}
		if t := s.text(tok); t != "" {
			s.emit(Event{Type: sh.kind, Text: t})
		}
		return true
	}
	return false
}

// fastDelta holds string tokens (quotes included; nil for null or absent)
// of the last delta, with choice's last-key-wins rules.
type fastDelta struct {
	content, reasoning []byte
	reasoningIsString  bool
}

// text is own for a string token from fastChunk: unescaped text goes
// through the stream's slab (one allocation per few hundred deltas).
func (s *oaStream) text(tok []byte) string {
	if len(tok) <= 2 {
		return ""
	}
	if bytes.IndexByte(tok, '\\') < 0 {
		return s.slab.string(tok[1 : len(tok)-1])
	}
	return own(parseJSON(tok)) // gjson's unescaping, as the full path
}

// jscan is a strict JSON scanner over one chunk for fastChunk. Methods
// report false when the input is not what the fast path takes.
type jscan struct {
	d []byte
	i int
}

func (sc *jscan) ws() {
	for sc.i < len(sc.d) {
		switch c := sc.d[sc.i]; {
		case c > ' ':
			return
		case c == ' ', c == '\t', c == '\n', c == '\r':
			sc.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, 0 at the end.
func (sc *jscan) peek() byte {
	sc.ws()
	if sc.i < len(sc.d) {
		return sc.d[sc.i]
	}
	return 0
}

// open consumes c, the opening bracket of a value.
func (sc *jscan) open(c byte) bool {
	if sc.peek() != c {
		return false
	}
	sc.i++
	return true
}

// close consumes c if it comes next: an empty object or array.
func (sc *jscan) close(c byte) bool { return sc.open(c) }

// next consumes the ',' (more) or the closing c after a member.
func (sc *jscan) next(c byte) (more, ok bool) {
	switch sc.peek() {
	case ',':
		sc.i++
		return true, true
	case c:
		sc.i++
		return false, true
	}
	return false, false
}

// str consumes a string token and returns it, quotes included; esc
// reports a backslash in it.
func (sc *jscan) str() (tok []byte, esc, ok bool) {
	if sc.peek() != '"' {
		return nil, false, false
	}
	start := sc.i
	rest := sc.d[start+1:]
	// The first quote not escaped: one after an even run of backslashes
	// (what reading byte by byte, a backslash taking the next byte, finds:
	// the byte before a run of backslashes is never an escape).
	for j := 0; ; j++ {
		q := bytes.IndexByte(rest[j:], '"')
		if q < 0 {
			return nil, false, false
		}
		if !esc && bytes.IndexByte(rest[j:j+q], '\\') >= 0 {
			esc = true
		}
		j += q
		n := 0
		for n < j && rest[j-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			sc.i = start + 2 + j
			return sc.d[start:sc.i], esc, true
		}
	}
}

// key consumes `"name":` and returns name; escaped names are refused.
func (sc *jscan) key() ([]byte, bool) {
	tok, esc, ok := sc.str()
	if !ok || esc || sc.peek() != ':' {
		return nil, false
	}
	sc.i++
	return tok[1 : len(tok)-1], true
}

// word consumes a run of letters (true, false, null).
func (sc *jscan) word() []byte {
	s := sc.i
	for sc.i < len(sc.d) && sc.d[sc.i] >= 'a' && sc.d[sc.i] <= 'z' {
		sc.i++
	}
	return sc.d[s:sc.i]
}

func (sc *jscan) null() bool {
	return sc.peek() == 'n' && string(sc.word()) == "null"
}

// strOrNull consumes a string (returned) or null (nil).
func (sc *jscan) strOrNull() ([]byte, bool) {
	if sc.peek() == '"' {
		tok, _, ok := sc.str()
		return tok, ok
	}
	return nil, sc.null()
}

// skip consumes any value, spanning nested ones as gjson does (its
// parseSquash also counts parentheses).
func (sc *jscan) skip() bool {
	c := sc.peek()
	switch {
	case c == '"':
		_, _, ok := sc.str()
		return ok
	case c == 't' || c == 'f' || c == 'n':
		w := string(sc.word())
		return w == "true" || w == "false" || w == "null"
	case c == '-' || c >= '0' && c <= '9':
		sc.i++
		for sc.i < len(sc.d) {
			switch c := sc.d[sc.i]; {
			case c >= '0' && c <= '9', c == '.', c == 'e', c == 'E', c == '+', c == '-':
				sc.i++
				continue
			}
			break
		}
		return true
	case c == '{' || c == '[':
		d, depth := sc.d, 0
		for j := sc.i; j < len(d); j++ {
			switch d[j] {
			case '{', '[', '(':
				depth++
			case '}', ']', ')':
				if depth--; depth == 0 {
					sc.i = j + 1
					return true
				}
			case '"':
				sc.i = j
				if _, _, ok := sc.str(); !ok {
					return false
				}
				j = sc.i - 1
			}
		}
	}
	return false
}

// choices consumes `[]` or `[{choice}]` with index 0, a delta object and
// finish_reason null.
func (sc *jscan) choices(d *fastDelta) bool {
	if !sc.open('[') {
		return false
	}
	if sc.close(']') {
		return true
	}
	if !sc.open('{') {
		return false
	}
	for more := !sc.close('}'); more; {
		k, ok := sc.key()
		if !ok {
			return false
		}
		switch string(k) {
		case "index":
			if sc.peek() != '0' {
				return false
			}
			sc.i++
			if sc.i < len(sc.d) && sc.d[sc.i] >= '0' && sc.d[sc.i] <= '9' || !sc.skipNumberTail() {
				return false
			}
		case "delta":
			if !sc.delta(d) {
				return false
			}
		case "finish_reason":
			if !sc.null() {
				return false
			}
		default:
			if !sc.skip() {
				return false
			}
		}
		if more, ok = sc.next('}'); !ok {
			return false
		}
	}
	return sc.close(']') // one choice only
}

// skipNumberTail accepts the end of the number 0: nothing more of it.
func (sc *jscan) skipNumberTail() bool {
	if sc.i >= len(sc.d) {
		return true
	}
	switch sc.d[sc.i] {
	case '.', 'e', 'E', '+', '-':
		return false
	}
	return true
}

// delta consumes the delta object into d, starting afresh: the full path
// uses the last "delta" key.
func (sc *jscan) delta(d *fastDelta) bool {
	*d = fastDelta{}
	if !sc.open('{') {
		return false
	}
	for more := !sc.close('}'); more; {
		k, ok := sc.key()
		if !ok {
			return false
		}
		switch string(k) {
		case "content":
			if d.content, ok = sc.strOrNull(); !ok {
				return false
			}
		case "reasoning_content":
			if d.reasoning, ok = sc.strOrNull(); !ok {
				return false
			}
			d.reasoningIsString = d.reasoning != nil
		case "reasoning": // taken unless reasoning_content is a string
			tok, ok := sc.strOrNull()
			if !ok {
				return false
			}
			if !d.reasoningIsString {
				d.reasoning, d.reasoningIsString = tok, tok != nil
			}
		case "tool_calls":
			if !sc.null() {
				return false
			}
		default:
			if !sc.skip() {
				return false
			}
		}
		if more, ok = sc.next('}'); !ok {
			return false
		}
	}
	return true
}
