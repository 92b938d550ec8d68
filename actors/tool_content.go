package actors

import (
	"encoding/json"
	"fmt"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools"
)

// toolCall is one tool invocation requested by the model, prepared once:
// the tool_call update, the permission request, the policy decision and the
// run all use the same tools.Call.
type toolCall struct {
	index int
	id    string
	name  string
	input json.RawMessage
	tool  tools.Tool // nil when the model named an unknown tool
	call  tools.Call // nil when tool is nil or Prepare failed
	// prepErr is Prepare's error: the call fails with it, never asked about.
	prepErr error
}

// prepareCall decodes and resolves a call of the model (see tools.Tool).
func prepareCall(index int, id, name string, input json.RawMessage, reg *tools.Registry, env *tools.Env) toolCall {
	c := toolCall{index: index, id: id, name: name, input: input}
	c.tool, _ = reg.Get(name)
	if c.tool != nil {
		c.call, c.prepErr = c.tool.Prepare(env, input)
		if c.call == nil && c.prepErr == nil {
			c.prepErr = fmt.Errorf("Invalid input for tool '%s'", name)
		}
	}
	return c
}

func (c *toolCall) kind() string {
	if c.tool == nil {
		return string(tools.KindOther)
	}
	return string(c.tool.Kind())
}

// startUpdate is the `tool_call` announcing the call (status pending).
func (c *toolCall) startUpdate() protocol.ToolCallUpdate {
	title := c.name
	var locs []protocol.ToolCallLocation
	if c.call != nil {
		if t := c.call.Title(); t != "" {
			title = t
		}
		locs = toLocations(c.call.Locations())
	}
	return protocol.ToolCallUpdate{
		SessionUpdate: protocol.UpdateToolCall,
		ToolCallID:    c.id,
		Title:         title,
		Name:          c.name,
		Kind:          c.kind(),
		Status:        protocol.ToolPending,
		Locations:     locs,
		RawInput:      c.input,
	}
}

// diffContent is a file change as tool call content.
func diffContent(d *tools.Diff) protocol.ToolCallContent {
	newText := d.NewText
	return protocol.ToolCallContent{Type: "diff", Path: d.Path, OldText: d.OldText, NewText: &newText}
}

func toLocations(in []tools.Location) []protocol.ToolCallLocation {
	if len(in) == 0 {
		return nil
	}
	out := make([]protocol.ToolCallLocation, len(in))
	for i, l := range in {
		out[i] = protocol.ToolCallLocation{Path: l.Path, Line: l.Line}
	}
	return out
}

// planUpdate is the ACP plan update of a task list.
func planUpdate(p *tools.Plan) protocol.PlanUpdate {
	u := protocol.PlanUpdate{SessionUpdate: protocol.UpdatePlan, Entries: make([]protocol.PlanEntry, len(p.Entries))}
	for i, e := range p.Entries {
		u.Entries[i] = protocol.PlanEntry{Content: e.Content, Priority: e.Priority, Status: e.Status}
	}
	return u
}

// resultContent is what the client is shown of a result: its rich blocks
// one to one (MCP) or its text. When the text was cut (bounded), the text
// blocks give way to the bounded text, the others stay.
func resultContent(res tools.Result, cut bool) []protocol.ToolCallContent {
	var out []protocol.ToolCallContent
	add := func(block any) { out = append(out, protocol.ToolCallContent{Type: "content", Content: block}) }
	if len(res.Content) == 0 || cut {
		if res.Output != "" {
			text := protocol.Text(res.Output)
			add(&text)
		}
	}
	for _, b := range res.Content {
		switch b.Type {
		case "text":
			if !cut {
				text := protocol.Text(b.Text)
				add(&text)
			}
		case "image", "audio":
			add(protocol.ImageContent{Type: b.Type, Data: b.Data, MimeType: b.MimeType})
		case "resource_link":
			add(protocol.ResourceLink{Type: b.Type, URI: b.URI, Name: b.Name, Title: b.Title,
				Description: b.Description, MimeType: b.MimeType, Size: b.Size})
		case "resource":
			if r := b.Resource; r != nil && r.IsBlob {
				add(protocol.EmbeddedResourceOut{Type: b.Type, Resource: protocol.BlobResourceContents{URI: r.URI, Blob: r.Blob, MimeType: r.MimeType}})
			} else if r != nil {
				add(protocol.EmbeddedResourceOut{Type: b.Type, Resource: protocol.TextResourceContents{URI: r.URI, Text: r.Text, MimeType: r.MimeType}})
			}
		}
	}
	return out
}
