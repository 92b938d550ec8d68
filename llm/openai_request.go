// Chat Completions requests: the conversation mapped onto messages, the
// per-preset quirks decided (see openai.go), rendered as the SDK's params
// (openai_body.go encodes them).

package llm

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"
)

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

// thinking asks for reasoning the way the preset's server understands.
func (p *openAIProvider) thinking(c *openAICall, model string, budget int) {
	_, style := p.cfg.thinkingStyle()
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
	// One system message, SystemTurn after System: the automatic prefix
	// cache matches the stable start, and servers whose chat templates take
	// a single leading system message (many open models') accept it.
	switch {
	case req.System != "" && req.SystemTurn != "":
		out = append(out, openAIMessage{role: "system", text: req.System + "\n\n" + req.SystemTurn})
	case req.System != "" || req.SystemTurn != "":
		out = append(out, openAIMessage{role: "system", text: req.System + req.SystemTurn})
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
