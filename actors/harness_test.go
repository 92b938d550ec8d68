package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
)

// scriptedProvider plays one func per model call. The actor tests use it to
// drive the tree without a network; wire-level behaviour is covered by the
// e2e suite against the fake HTTP model server.
type scriptedProvider struct {
	mu    sync.Mutex
	calls []func(ctx context.Context, emit func(llm.Event)) error
	seen  []*llm.Request
	// warms counts Warm: a session told the provider a call may come.
	warms atomic.Int32
}

func (p *scriptedProvider) Warm() { p.warms.Add(1) }

func (p *scriptedProvider) Stream(ctx context.Context, req *llm.Request, emit func(llm.Event)) error {
	p.mu.Lock()
	p.seen = append(p.seen, req)
	var f func(ctx context.Context, emit func(llm.Event)) error
	if len(p.calls) > 0 {
		f, p.calls = p.calls[0], p.calls[1:]
	}
	p.mu.Unlock()
	if f == nil {
		emit(llm.Event{Type: llm.EventTextDelta, Text: "ok"})
		emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopEndTurn})
		return nil
	}
	return f(ctx, emit)
}

func (p *scriptedProvider) then(f func(ctx context.Context, emit func(llm.Event)) error) *scriptedProvider {
	p.mu.Lock()
	p.calls = append(p.calls, f)
	p.mu.Unlock()
	return p
}

func (p *scriptedProvider) requests() []*llm.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*llm.Request(nil), p.seen...)
}

func say(texts ...string) func(context.Context, func(llm.Event)) error {
	return func(_ context.Context, emit func(llm.Event)) error {
		for _, t := range texts {
			emit(llm.Event{Type: llm.EventTextDelta, Text: t})
		}
		emit(llm.Event{Type: llm.EventUsage, Usage: llm.Usage{InputTokens: 10, OutputTokens: 5}})
		emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopEndTurn})
		return nil
	}
}

// recorder is an Outlet that keeps every frame for assertions.
type recorder struct {
	mu     sync.Mutex
	frames []map[string]any
	// chunks and givable count the agent_message_chunk frames, and those
	// of them that could be given back once written (Frame.Written).
	chunks, givable int
}

func (r *recorder) Send(f Frame) {
	var m map[string]any
	Expect(json.Unmarshal(f.Data, &m)).To(Succeed())
	r.mu.Lock()
	r.frames = append(r.frames, m)
	if bytes.Contains(f.Data, []byte(`"sessionUpdate":"agent_message_chunk"`)) {
		r.chunks++
		if f.pool != nil {
			r.givable++
		}
	}
	r.mu.Unlock()
}

// chunkFrames are the counts above.
func (r *recorder) chunkFrames() (chunks, givable int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.chunks, r.givable
}

func (r *recorder) all() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.frames...)
}

// response returns the answer to request id, or nil.
func (r *recorder) response(id float64) map[string]any {
	for _, f := range r.all() {
		if f["id"] == id && f["method"] == nil {
			return f
		}
	}
	return nil
}

// requests returns the server-to-client requests with the given method.
func (r *recorder) requests(method string) []map[string]any {
	var out []map[string]any
	for _, f := range r.all() {
		if f["method"] == method && f["id"] != nil {
			out = append(out, f)
		}
	}
	return out
}

// updates returns the streamed content and tool updates, leaving out the
// bookkeeping ones (commands, session info, usage).
func (r *recorder) updates() []map[string]any {
	var out []map[string]any
	for _, u := range r.allUpdates() {
		switch u["sessionUpdate"] {
		case "available_commands_update", "session_info_update", "usage_update":
		default:
			out = append(out, u)
		}
	}
	return out
}

func (r *recorder) allUpdates() []map[string]any {
	var out []map[string]any
	for _, f := range r.all() {
		if f["method"] == "session/update" {
			out = append(out, f["params"].(map[string]any)["update"].(map[string]any))
		}
	}
	return out
}

type harness struct {
	srv      *Server
	conn     *Conn
	out      *recorder
	provider *scriptedProvider
	nextID   int
}

func newHarness(provider *scriptedProvider, extra ...tools.Tool) *harness {
	return newHarnessWith(Config{}, provider, extra...)
}

func newHarnessWith(cfg Config, provider *scriptedProvider, extra ...tools.Tool) *harness {
	st, err := store.New(GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	return newHarnessOn(st, cfg, provider, extra...)
}

func newHarnessOn(st store.Store, cfg Config, provider *scriptedProvider, extra ...tools.Tool) *harness {
	cfg.Version, cfg.LLM = "test", llm.Config{APIKey: "k", Model: "m"}
	srv := NewServer(Deps{
		Store:    st,
		Config:   cfg,
		Provider: provider,
		Tools:    tools.NewRegistry(extra...),
		Log:      zerolog.New(io.Discard),
	})
	out := &recorder{}
	h := &harness{srv: srv, conn: srv.Connect(out), out: out, provider: provider}
	return h
}

// call sends a request and returns its id.
func (h *harness) call(method string, params any) float64 {
	h.nextID++
	raw, _ := json.Marshal(params)
	h.conn.Deliver(&protocol.Message{JSONRPC: "2.0", ID: protocol.RawMessage(itoa(h.nextID)), Method: method, Params: raw})
	return float64(h.nextID)
}

func (h *harness) notify(method string, params any) {
	raw, _ := json.Marshal(params)
	h.conn.Deliver(&protocol.Message{JSONRPC: "2.0", Method: method, Params: raw})
}

func (h *harness) answer(id any, result any) {
	raw, _ := json.Marshal(result)
	idRaw, _ := json.Marshal(id)
	h.conn.Deliver(&protocol.Message{JSONRPC: "2.0", ID: idRaw, Result: raw})
}

func (h *harness) answerError(id any, code int, message string) {
	idRaw, _ := json.Marshal(id)
	h.conn.Deliver(&protocol.Message{JSONRPC: "2.0", ID: idRaw, Error: &protocol.Error{Code: code, Message: message}})
}

func (h *harness) await(id float64) map[string]any {
	var resp map[string]any
	Eventually(func() map[string]any { resp = h.out.response(id); return resp }, 5*time.Second, 2*time.Millisecond).ShouldNot(BeNil())
	return resp
}

func (h *harness) result(id float64) map[string]any {
	resp := h.await(id)
	ExpectWithOffset(1, resp).To(HaveKey("result"), "response %v", resp)
	r, _ := resp["result"].(map[string]any)
	return r
}

func (h *harness) errorOf(id float64) map[string]any {
	resp := h.await(id)
	ExpectWithOffset(1, resp).To(HaveKey("error"), "response %v", resp)
	return resp["error"].(map[string]any)
}

func (h *harness) newSession(cwd string) string {
	h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))
	res := h.result(h.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))
	return res["sessionId"].(string)
}

func (h *harness) close() {
	h.conn.Close(2 * time.Second)
	h.srv.Shutdown()
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
