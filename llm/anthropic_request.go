package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"
)

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
