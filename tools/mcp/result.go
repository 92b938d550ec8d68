package mcp

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/iac-code/iac-code/tools"
)

// MaxBinaryBlock bounds one image, audio or blob block shown to the client
// (base64 characters); a larger one is shown as a text marker. Clients
// read lines of 10 MiB (Go SDK) to 32 MiB (TypeScript SDK).
const MaxBinaryBlock = 4 << 20

// ToResult maps an MCP tool result: its content blocks one to one onto the
// client's content blocks (text, image, audio, resource_link, resource),
// and the model gets the text, with a short marker for each non-text
// block. isError makes a failed call.
func ToResult(r *sdk.CallToolResult) tools.Result {
	if r == nil {
		return tools.Errorf("The MCP server returned no result.")
	}
	var text []string
	blocks := make([]tools.ContentBlock, 0, len(r.Content))
	for _, c := range r.Content {
		b, model := mapBlock(c)
		if b.Type == "" {
			continue
		}
		blocks = append(blocks, b)
		text = append(text, model)
	}
	if len(text) == 0 && r.StructuredContent != nil {
		if raw, err := json.Marshal(r.StructuredContent); err == nil {
			text = append(text, string(raw))
			blocks = append(blocks, tools.ContentBlock{Type: "text", Text: string(raw)})
		}
	}
	out := tools.Result{Output: strings.Join(text, "\n"), IsError: r.IsError, Content: blocks}
	if out.Output == "" {
		if r.IsError {
			out.Output = "The MCP tool reported an error without details."
		} else {
			out.Output = "(no output)"
		}
	}
	raw := map[string]any{"isError": r.IsError, "blocks": len(blocks)}
	if r.StructuredContent != nil {
		raw["structuredContent"] = r.StructuredContent
	}
	out.Raw = raw
	return out
}

// mapBlock maps one MCP content block to the client's block and the text
// the model reads for it.
func mapBlock(c sdk.Content) (tools.ContentBlock, string) {
	switch v := c.(type) {
	case *sdk.TextContent:
		return tools.ContentBlock{Type: "text", Text: v.Text}, v.Text
	case *sdk.ImageContent:
		return binaryBlock("image", v.MIMEType, v.Data)
	case *sdk.AudioContent:
		return binaryBlock("audio", v.MIMEType, v.Data)
	case *sdk.ResourceLink:
		b := tools.ContentBlock{Type: "resource_link", URI: v.URI, Name: v.Name, Title: v.Title,
			Description: v.Description, MimeType: v.MIMEType, Size: v.Size}
		if b.Name == "" {
			b.Name = v.URI
		}
		return b, fmt.Sprintf("[resource_link: %s <%s>]", b.Name, v.URI)
	case *sdk.EmbeddedResource:
		r := v.Resource
		if r == nil {
			return tools.ContentBlock{}, ""
		}
		if r.Blob != nil && r.Text == "" {
			data := base64.StdEncoding.EncodeToString(r.Blob)
			marker := fmt.Sprintf("[resource: %s (%s, binary, %d bytes)]", r.URI, orUnknown(r.MIMEType), len(r.Blob))
			if len(data) > MaxBinaryBlock {
				return tools.ContentBlock{Type: "text", Text: marker + " (too large to show)"}, marker
			}
			return tools.ContentBlock{Type: "resource", Resource: &tools.ResourceContents{URI: r.URI, MimeType: r.MIMEType,
				Blob: data, IsBlob: true}}, marker
		}
		return tools.ContentBlock{Type: "resource", Resource: &tools.ResourceContents{URI: r.URI, MimeType: r.MIMEType, Text: r.Text}},
			fmt.Sprintf("<resource uri=%q>\n%s\n</resource>", r.URI, r.Text)
	}
	return tools.ContentBlock{}, "" // tool_use/tool_result blocks belong to sampling, not to tool results
}

func binaryBlock(kind, mime string, data []byte) (tools.ContentBlock, string) {
	marker := fmt.Sprintf("[%s: %s, %d bytes]", kind, orUnknown(mime), len(data))
	encoded := base64.StdEncoding.EncodeToString(data)
	if len(encoded) > MaxBinaryBlock {
		return tools.ContentBlock{Type: "text", Text: marker + " (too large to show)"}, marker
	}
	return tools.ContentBlock{Type: kind, Data: encoded, MimeType: orUnknown(mime)}, marker
}

func orUnknown(mime string) string {
	if mime == "" {
		return "application/octet-stream"
	}
	return mime
}
