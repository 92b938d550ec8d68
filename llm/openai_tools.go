package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
)

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
