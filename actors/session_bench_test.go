package actors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
)

// replayMessages makes n messages shaped like real turns, with the display
// blocks live turns store: a user prompt; an assistant message with
// thinking, text and a write_file call; its result with a diff (~1 KB); and
// the assistant's closing text.
func replayMessages(n int) []llm.Message {
	body := strings.Repeat("func main() { fmt.Println(\"hello\") }\n", 28)
	msgs := make([]llm.Message, 0, n)
	for i := 0; len(msgs) < n; i++ {
		id := fmt.Sprintf("call_%d", i)
		input := protocol.RawMessage(protocol.MustMarshal(map[string]string{"path": "main.go", "content": body}))
		start := protocol.MustMarshal(protocol.ToolCallUpdate{SessionUpdate: protocol.UpdateToolCall, ToolCallID: id,
			Title: "Write main.go", Kind: string(tools.KindEdit), Status: protocol.ToolPending,
			Locations: []protocol.ToolCallLocation{{Path: "/p/main.go"}}, RawInput: input})
		text := protocol.Text("Wrote main.go")
		final := protocol.MustMarshal(protocol.ToolCallUpdate{SessionUpdate: protocol.UpdateToolCallUpdate, ToolCallID: id,
			Status: protocol.ToolCompleted, Content: []protocol.ToolCallContent{{Type: "content", Content: &text},
				{Type: "diff", Path: "/p/main.go", NewText: &body}}, RawOutput: map[string]any{"isError": false}})
		for _, m := range []llm.Message{
			{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "Please rewrite main.go so that it prints hello, and explain the change."}}},
			{Role: llm.RoleAssistant, Content: []llm.Block{
				{Type: llm.BlockThinking, Text: "The user wants main.go rewritten. I will write the whole file."},
				{Type: llm.BlockText, Text: "Let me write the file."},
				{Type: llm.BlockToolUse, ToolCallID: id, Name: "write_file", Input: input, Display: start},
			}},
			{Role: llm.RoleTool, Content: []llm.Block{{Type: llm.BlockToolResult, ToolCallID: id, Name: "write_file",
				Text: "Wrote main.go", Display: final}}},
			{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockText, Text: "Done: main.go now prints hello."}}},
		} {
			if len(msgs) < n {
				msgs = append(msgs, m)
			}
		}
	}
	return msgs
}

// responseOutlet signals when the response to the awaited request id is
// sent, and keeps that response.
type responseOutlet struct {
	prefix atomic.Pointer[[]byte]
	done   chan struct{}
	frames atomic.Int64
	bytes  atomic.Int64
	answer atomic.Pointer[[]byte]
}

func (o *responseOutlet) Send(f Frame) {
	o.frames.Add(1)
	o.bytes.Add(int64(len(f.Data)))
	if p := o.prefix.Load(); p != nil && bytes.HasPrefix(f.Data, *p) {
		o.answer.Store(&f.Data)
		o.done <- struct{}{}
	}
}

// benchClient drives a server's connection actor with requests, one at a
// time, for benchmarks.
type benchClient struct {
	b    *testing.B
	conn *Conn
	out  *responseOutlet
	next int
}

// newBenchClient starts a server on st with a scripted model and no tools,
// and connects to it; both end with the benchmark.
func newBenchClient(b *testing.B, st store.Store) *benchClient {
	return newBenchClientWith(b, st, &scriptedProvider{})
}

// newBenchClientWith is newBenchClient with provider and tools.
func newBenchClientWith(b *testing.B, st store.Store, provider *scriptedProvider, ts ...tools.Tool) *benchClient {
	srv := NewServer(Deps{Store: st, Config: Config{Version: "bench", LLM: llm.Config{APIKey: "k", Model: "m"}},
		Provider: provider, Tools: tools.NewRegistry(ts...), Log: zerolog.New(io.Discard)})
	out := &responseOutlet{done: make(chan struct{}, 1)}
	conn := srv.Connect(out)
	b.Cleanup(func() {
		conn.Close(5 * time.Second)
		srv.Shutdown()
	})
	return &benchClient{b: b, conn: conn, out: out}
}

// call sends a request and returns its result once it is answered.
func (c *benchClient) call(method string, params any) map[string]any {
	c.next++
	raw, _ := json.Marshal(params)
	c.out.await(c.next)
	c.conn.Deliver(&protocol.Message{JSONRPC: "2.0", ID: protocol.RawMessage(strconv.Itoa(c.next)), Method: method, Params: raw})
	select {
	case <-c.out.done:
	case <-time.After(time.Minute):
		c.b.Fatalf("no answer to %s", method)
	}
	var m struct {
		Result map[string]any `json:"result"`
	}
	_ = json.Unmarshal(*c.out.answer.Load(), &m)
	return m.Result
}

// await makes the next frame answering id signal done.
func (o *responseOutlet) await(id int) {
	p := []byte(`{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,`)
	o.prefix.Store(&p)
}

// BenchmarkLoadReplay5000 measures session/load of a 5,000-message session
// from disk: open and parse the history, repair check, replay of every
// update through the connection actor, until the load response is handed to
// the transport. Between iterations (timer stopped) the session is closed,
// so each load reads the disk again.
func BenchmarkLoadReplay5000(b *testing.B) {
	root, cwd := b.TempDir(), b.TempDir()
	st, err := store.New(root)
	if err != nil {
		b.Fatal(err)
	}
	const id = "bench-5000"
	s, err := st.Create(store.Meta{ID: id, Cwd: cwd, Mode: "default", Model: "m"})
	if err != nil {
		b.Fatal(err)
	}
	msgs := replayMessages(5000)
	for i := 0; i < len(msgs); i += 100 {
		batch := make([]store.Entry, 0, 100)
		for _, m := range msgs[i:min(i+100, len(msgs))] {
			batch = append(batch, store.MessageEntry(m))
		}
		if err := s.Append(batch...); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	c := newBenchClient(b, st)
	call := func(method string, params any) { c.call(method, params) }
	out := c.out
	call("initialize", map[string]any{"protocolVersion": 1})
	load := map[string]any{"sessionId": id, "cwd": cwd, "mcpServers": []any{}}
	closeReq := map[string]any{"sessionId": id}

	call("session/load", load) // warm up: checks the session loads
	call("session/close", closeReq)
	frames0 := out.frames.Load()
	call("session/load", load)
	perLoad := out.frames.Load() - frames0
	call("session/close", closeReq)
	if perLoad < 5000 {
		b.Fatalf("a load sent %d frames, want at least one update per message", perLoad)
	}

	b.ReportAllocs()
	b.ResetTimer()
	var frames, sent int64
	for i := 0; i < b.N; i++ {
		f0, b0 := out.frames.Load(), out.bytes.Load()
		call("session/load", load)
		b.StopTimer()
		frames += out.frames.Load() - f0
		sent += out.bytes.Load() - b0
		call("session/close", closeReq)
		b.StartTimer()
	}
	b.ReportMetric(float64(frames)/float64(b.N), "frames/op")
	b.ReportMetric(float64(sent)/float64(b.N)/(1<<20), "MiB/op")
}

// heldStore hides store.TurnMarker from the file store's sessions: they keep
// their lock between turns, as before sessions let go of it when idle.
type heldStore struct{ store.Store }

type heldSession struct{ store.Session }

func (h heldStore) Create(m store.Meta) (store.Session, error) {
	s, err := h.Store.Create(m)
	if err != nil {
		return nil, err
	}
	return heldSession{s}, nil
}

// BenchmarkPromptCycle measures one session/prompt round trip (a one-chunk
// answer, no tool) on a file store session: "between-turns" lets go of the
// session's lock after every turn and takes it back at the next prompt (what
// the session actor does, see releaseBetweenTurns), "held" keeps it.
func BenchmarkPromptCycle(b *testing.B) {
	for _, mode := range []string{"between-turns", "held"} {
		b.Run(mode, func(b *testing.B) {
			st, err := store.New(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			var s store.Store = st
			if mode == "held" {
				s = heldStore{st}
			}
			c := newBenchClient(b, s)
			c.call("initialize", map[string]any{"protocolVersion": 1})
			sid := c.call("session/new", map[string]any{"cwd": b.TempDir(), "mcpServers": []any{}})["sessionId"]
			prompt := map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "hi"}}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.call("session/prompt", prompt)
			}
		})
	}
}

// BenchmarkAllowedEdit measures one session/prompt whose model edits a
// 1 MiB file in bypass mode (no permission request): the model call, the
// edit (read, replace, write) and its diff update, then the closing answer.
func BenchmarkAllowedEdit(b *testing.B) {
	st, err := store.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	cwd := b.TempDir()
	body := strings.Repeat("0123456789abcdef", 1<<16)
	if err := os.WriteFile(filepath.Join(cwd, "big.txt"), []byte(body+"marker-a\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	p := &scriptedProvider{}
	c := newBenchClientWith(b, st, p, tools.EditFile{})
	c.call("initialize", map[string]any{"protocolVersion": 1})
	sid := c.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})["sessionId"]
	c.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"})
	prompt := map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "edit"}}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		from, to := "marker-a", "marker-b"
		if i%2 == 1 {
			from, to = to, from
		}
		args, _ := json.Marshal(map[string]any{"path": "big.txt", "old_string": from, "new_string": to})
		p.then(callTool("e", "edit_file", string(args))).then(say("done"))
		c.call("session/prompt", prompt)
	}
	b.StopTimer()
	want := "marker-a\n"
	if b.N%2 == 1 {
		want = "marker-b\n"
	}
	if data, _ := os.ReadFile(filepath.Join(cwd, "big.txt")); !strings.HasSuffix(string(data), want) {
		b.Fatal("the edits did not run")
	}
}
