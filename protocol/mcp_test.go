package protocol

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseMcpServersAccepts(t *testing.T) {
	for _, raw := range []string{``, `null`, `[]`} {
		got, _, e := ParseMcpServers(RawMessage(raw))
		if e != nil || len(got) != 0 {
			t.Errorf("%q: got %v, %v; want an empty list", raw, got, e)
		}
	}
	got, warn, e := ParseMcpServers(RawMessage(`[
		{"name":"db","command":"/usr/bin/db-mcp","args":["--stdio"],"env":[{"name":"DB_URL","value":"postgres://x"}]},
		{"type":"stdio","name":"bare","command":"npx","args":null,"env":null},
		{"name":"noargs","command":"srv"},
		{"type":"http","name":"docs","url":"https://mcp.example.org/mcp","headers":[{"name":"Authorization","value":"Bearer t"}]},
		{"type":"sse","name":"old","url":"http://127.0.0.1:9/sse","headers":null,"_meta":{"x":1}}
	]`))
	if e != nil || len(warn) != 0 {
		t.Fatalf("unexpected error %v / warnings %v", e, warn)
	}
	want := []McpServerConfig{
		{Type: "stdio", Name: "db", Command: "/usr/bin/db-mcp", Args: []string{"--stdio"}, Env: []NameValue{{"DB_URL", "postgres://x"}}},
		{Type: "stdio", Name: "bare", Command: "npx"},
		{Type: "stdio", Name: "noargs", Command: "srv"},
		{Type: "http", Name: "docs", URL: "https://mcp.example.org/mcp", Headers: []NameValue{{"Authorization", "Bearer t"}}},
		{Type: "sse", Name: "old", URL: "http://127.0.0.1:9/sse"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if !got[i].Equal(&want[i]) {
			t.Errorf("entry %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseMcpServersDuplicateNameLaterWins(t *testing.T) {
	got, warn, e := ParseMcpServers(RawMessage(`[{"name":"a","command":"one"},{"name":"b","command":"two"},{"name":"a","command":"three"}]`))
	if e != nil {
		t.Fatal(e)
	}
	if len(got) != 2 || got[0].Command != "three" || got[1].Command != "two" {
		t.Errorf("got %+v", got)
	}
	if len(warn) != 1 || !strings.Contains(warn[0], `mcpServers[2] ("a")`) {
		t.Errorf("warnings %v", warn)
	}
}

func TestParseMcpServersRejectsNamingTheEntry(t *testing.T) {
	cases := []struct{ raw, want string }{
		{`{}`, "mcpServers must be an array"},
		{`"x"`, "mcpServers must be an array"},
		{`[1]`, "mcpServers[0]: an entry must be a JSON object"},
		{`[{"command":"x"}]`, "mcpServers[0]: name is required"},
		{`[{"name":5,"command":"x"}]`, "mcpServers[0]: name must be a string"},
		{`[{"name":"ok","command":"x"},{"name":"db"}]`, `mcpServers[1] ("db"): command is required`},
		{`[{"name":"db","command":"x","args":"-v"}]`, `mcpServers[0] ("db"): args must be an array of strings`},
		{`[{"name":"db","command":"x","args":[1]}]`, `args must be an array of strings`},
		{`[{"name":"db","command":"x","env":{"A":"b"}}]`, `env must be an array of {name, value} objects`},
		{`[{"name":"db","command":"x","env":[{"name":"A"}]}]`, `env: each item needs a string name and a string value`},
		{`[{"name":"db","command":"x","env":[{"name":"A=B","value":"c"}]}]`, `env: invalid variable "A=B"`},
		{`[{"type":"http","name":"docs"}]`, `mcpServers[0] ("docs"): url is required`},
		{`[{"type":"http","name":"docs","url":"file:///etc/passwd"}]`, `url must be an absolute http or https URL`},
		{`[{"type":"sse","name":"docs","url":"/relative"}]`, `url must be an absolute http or https URL`},
		{`[{"type":"http","name":"docs","url":"http://h/","headers":[{"name":"Bad Name","value":"v"}]}]`, `invalid header name "Bad Name"`},
		{`[{"type":"http","name":"docs","url":"http://h/","headers":[{"name":"X","value":"a\r\nInjected: 1"}]}]`, `the value of "X" has characters a header cannot carry`},
		{`[{"type":"acp","name":"x","serverId":"s"}]`, `mcpServers[0] ("x"): unknown type "acp" (supported: stdio, http, sse)`},
		{`[{"type":7,"name":"x"}]`, `type must be a string`},
	}
	for _, c := range cases {
		_, _, e := ParseMcpServers(RawMessage(c.raw))
		if e == nil {
			t.Errorf("%s: accepted", c.raw)
			continue
		}
		if e.Code != CodeInvalidParams {
			t.Errorf("%s: code %d", c.raw, e.Code)
		}
		msg := e.Data.(map[string]string)["mcpServers"]
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: message %q does not contain %q", c.raw, msg, c.want)
		}
	}
}

func TestParseMcpServersBoundsTheList(t *testing.T) {
	entry := func(i int) string {
		return fmt.Sprintf(`{"name":"s%d","command":"true","args":[],"env":[]}`, i)
	}
	list := func(n int) RawMessage {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = entry(i)
		}
		return RawMessage("[" + strings.Join(parts, ",") + "]")
	}
	if servers, _, err := ParseMcpServers(list(MaxMcpServers)); err != nil || len(servers) != MaxMcpServers {
		t.Fatalf("%d servers: got %d, %v", MaxMcpServers, len(servers), err)
	}
	_, _, err := ParseMcpServers(list(MaxMcpServers + 1))
	if err == nil || err.Code != CodeInvalidParams || !strings.Contains(fmt.Sprint(err.Data), "at most 64 MCP servers") {
		t.Fatalf("%d servers: want -32602 naming the bound, got %+v", MaxMcpServers+1, err)
	}
}
