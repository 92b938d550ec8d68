package actors

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools/mcp/mcptest"
)

// BenchmarkSessionNewMCP measures session/new with 1 and 4 stdio MCP
// servers, from the request to its answer: the servers started
// concurrently (process start, MCP handshake, tools/list) and the answer
// once all are connected. The servers are the test server of
// tools/mcp/mcptest (a Go binary) and, when e2e/node's modules are
// installed, the reference server @modelcontextprotocol/server-everything
// (Node.js). Each iteration closes its session (timer stopped), whose
// servers then exit.
func BenchmarkSessionNewMCP(b *testing.B) {
	bin, err := mcptest.Build(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	commands := map[string][]string{"go": {bin}}
	everything, _ := filepath.Abs("../e2e/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	if _, err := os.Stat(everything); err == nil {
		commands["everything"] = []string{"node", everything, "stdio"}
	}
	for _, kind := range []string{"go", "everything"} {
		cmd, ok := commands[kind]
		if !ok {
			continue
		}
		for _, n := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/servers=%d", kind, n), func(b *testing.B) {
				servers := make([]any, n)
				for i := range servers {
					servers[i] = map[string]any{"name": "s" + strconv.Itoa(i), "command": cmd[0], "args": cmd[1:], "env": []any{}}
				}
				benchSessionNew(b, servers)
			})
		}
	}
}

func benchSessionNew(b *testing.B, servers []any) {
	st, err := store.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	cwd := b.TempDir()
	c := newBenchClient(b, st)
	c.call("initialize", map[string]any{"protocolVersion": 1})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res := c.call("session/new", map[string]any{"cwd": cwd, "mcpServers": servers})
		b.StopTimer()
		meta, _ := res["_meta"].(map[string]any)
		states, _ := meta[mcpMetaKey].([]any)
		for _, s := range states {
			if s.(map[string]any)["status"] != "connected" {
				b.Fatalf("a server did not connect: %v", s)
			}
		}
		if len(states) != len(servers) {
			b.Fatalf("answer %v", res)
		}
		c.call("session/close", map[string]any{"sessionId": res["sessionId"]})
		b.StartTimer()
	}
}
