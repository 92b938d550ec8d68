package actors

import (
	"testing"

	"github.com/iac-code/iac-code/tools"
)

// namedTool is a tool known by its name only (the registry's key).
type namedTool struct {
	tools.Tool
	name string
}

func (n namedTool) Name() string { return n.name }

// A model request reuses the registry made for the MCP tool list it saw
// last while the list is the same one, and sees a changed list at once.
func TestCurrentToolsFollowsTheMCPList(t *testing.T) {
	set := &mcpToolSet{}
	first := []tools.Tool{namedTool{name: "mcp__a__one"}, namedTool{name: "mcp__a__hidden"}}
	set.p.Store(&first)
	tr := &turn{base: tools.Default(), mcp: set, mcpKeep: func(tl tools.Tool) bool { return tl.Name() != "mcp__a__hidden" }}
	tr.tools = tr.base

	tr.tools = tr.currentTools()
	made := tr.tools
	if _, ok := made.Get("mcp__a__one"); !ok {
		t.Fatal("the MCP tool is missing")
	}
	if _, ok := made.Get("mcp__a__hidden"); ok {
		t.Fatal("a tool the turn's filter leaves out is offered")
	}
	if _, ok := made.Get(tools.NameReadFile); !ok {
		t.Fatal("the turn's own tools are missing")
	}
	if tr.tools = tr.currentTools(); tr.tools != made {
		t.Fatal("the same MCP list made a new registry")
	}

	second := []tools.Tool{namedTool{name: "mcp__a__two"}}
	set.p.Store(&second)
	tr.tools = tr.currentTools()
	if tr.tools == made {
		t.Fatal("a changed MCP list kept the old registry")
	}
	if _, ok := tr.tools.Get("mcp__a__one"); ok {
		t.Fatal("a tool the server dropped is still offered")
	}
	if _, ok := tr.tools.Get("mcp__a__two"); !ok {
		t.Fatal("the server's new tool is missing")
	}

	set.p.Store(nil)
	if tr.tools = tr.currentTools(); tr.tools != tr.base {
		t.Fatal("with no MCP tools left, the turn's own registry is not used")
	}
}
