package actors

import (
	"context"
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
)

// sessionHarness is a server with a configurable store and config, and any
// number of connections on it (the HTTP edge gives each client its own).
type sessionHarness struct {
	srv      *Server
	provider *scriptedProvider
	conns    []*harness
}

// newSessionHarness is a server on the file store under root.
func newSessionHarness(p *scriptedProvider, root string, cfg func(*Config), extra ...tools.Tool) *sessionHarness {
	st, err := store.New(root)
	Expect(err).NotTo(HaveOccurred())
	return newSessionHarnessOn(p, st, cfg, extra...)
}

func newSessionHarnessOn(p *scriptedProvider, st store.Store, cfg func(*Config), extra ...tools.Tool) *sessionHarness {
	c := Config{Version: "test", LLM: llm.Config{APIKey: "k", Model: "m"}}
	if cfg != nil {
		cfg(&c)
	}
	srv := NewServer(Deps{
		Store:    st,
		Config:   c,
		Provider: p,
		Tools:    tools.NewRegistry(extra...),
		Log:      zerolog.New(GinkgoWriter).Level(zerolog.WarnLevel),
	})
	return &sessionHarness{srv: srv, provider: p}
}

// connect opens one more connection and initializes it.
func (s *sessionHarness) connect() *harness {
	out := &recorder{}
	h := &harness{srv: s.srv, conn: s.srv.Connect(out), out: out, provider: s.provider}
	h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))
	s.conns = append(s.conns, h)
	return h
}

func (s *sessionHarness) close() {
	for _, h := range s.conns {
		h.conn.Close(2 * time.Second)
	}
	s.srv.Shutdown()
}

func textPrompt(sid, text string) map[string]any {
	return map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": text}}}
}

// sleepTool is a read-only tool that takes a while.
type sleepTool struct{ d time.Duration }

func (sleepTool) Name() string            { return "sleep" }
func (sleepTool) Description() string     { return "sleeps" }
func (sleepTool) Schema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (sleepTool) Kind() tools.Kind        { return tools.KindOther }
func (sleepTool) ReadOnly() bool          { return true }
func (t sleepTool) Prepare(*tools.Env, json.RawMessage) (tools.Call, error) {
	return &tools.FuncCall{TitleText: "Sleep", RunFunc: func(ctx context.Context, _ func(string)) tools.Result {
		select {
		case <-time.After(t.d):
			return tools.Result{Output: "slept"}
		case <-ctx.Done():
			return tools.Errorf("cancelled")
		}
	}}, nil
}

// framesAfter returns the frames recorded after the first n.
func framesAfter(h *harness, n int) []map[string]any {
	return h.out.all()[n:]
}

var _ = Describe("session persistence in the actor tree", func() {
	var (
		p    *scriptedProvider
		s    *sessionHarness
		root string
		cwd  string
	)
	BeforeEach(func() {
		p = &scriptedProvider{}
		root = GinkgoT().TempDir()
		cwd = GinkgoT().TempDir()
	})
	AfterEach(func() {
		if s != nil {
			s.close()
		}
		s = nil
	})

	It("still evicts an idle session after it was loaded again on the same connection", func() {
		s = newSessionHarness(p, root, func(c *Config) { c.SessionIdle = 150 * time.Millisecond })
		h := s.connect()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		h.result(h.call("session/prompt", textPrompt(sid, "one")))
		h.result(h.call("session/prompt", textPrompt(sid, "two")))
		// the session is live: load attaches to it (no new actor)
		h.result(h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))
		// idle: evicted from memory
		Eventually(s.srv.Metrics().Sessions.Load, 5*time.Second, 20*time.Millisecond).Should(BeZero())
		// and transparently restored with its whole context
		h.result(h.call("session/prompt", textPrompt(sid, "three")))
		reqs := p.requests()
		Expect(reqs[len(reqs)-1].Messages).To(HaveLen(5))
	})

	It("still evicts an idle session after a tool ran longer than the idle time", func() {
		p.then(callTool("s1", "sleep", `{}`))
		s = newSessionHarness(p, root, func(c *Config) { c.SessionIdle = 100 * time.Millisecond }, sleepTool{d: 600 * time.Millisecond})
		h := s.connect()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "sleep")))["stopReason"]).To(Equal("end_turn"))
		Eventually(s.srv.Metrics().Sessions.Load, 5*time.Second, 20*time.Millisecond).Should(BeZero())
	})

	It("closes a tool call cut by cancel for the client as the history has it, before the prompt's answer", func() {
		p.then(callTool("s1", "sleep", `{}`))
		s = newSessionHarness(p, root, nil, sleepTool{d: time.Minute})
		h := s.connect()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		id := h.call("session/prompt", textPrompt(sid, "sleep"))
		Eventually(func() []map[string]any { return h.out.updates() }, 5*time.Second).Should(
			ContainElement(HaveKeyWithValue("status", "in_progress")))
		h.notify("session/cancel", map[string]any{"sessionId": sid})
		Expect(h.result(id)["stopReason"]).To(Equal("cancelled"))
		ups := h.out.updates()
		final := ups[len(ups)-1]
		Expect(final).To(And(HaveKeyWithValue("toolCallId", "s1"), HaveKeyWithValue("status", "failed")))
		Expect(final["content"]).To(ContainElement(HaveKeyWithValue("content",
			map[string]any{"type": "text", "text": store.InterruptedText})))
		// a load replays exactly that
		n := len(h.out.all())
		load := h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd})
		h.result(load)
		var replay []map[string]any
		for _, f := range framesAfter(h, n) {
			if f["method"] == "session/update" {
				replay = append(replay, f["params"].(map[string]any)["update"].(map[string]any))
			}
		}
		Expect(replay).To(ContainElement(final))
		// and the model is told on the next prompt
		h.result(h.call("session/prompt", textPrompt(sid, "next")))
		reqs := p.requests()
		msgs := reqs[len(reqs)-1].Messages
		Expect(msgs[len(msgs)-2].Content[0].Text).To(Equal(store.InterruptedText))
	})

	It("moves (IAC_CODE_SESSION_ATTACH=move) a session with a running turn to the resuming connection: the old prompt ends cancelled where it was asked", func() {
		started := make(chan struct{})
		p.then(func(ctx context.Context, emit func(llm.Event)) error {
			emit(llm.Event{Type: llm.EventTextDelta, Text: "partial"})
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		s = newSessionHarness(p, root, func(c *Config) { c.SessionAttach = AttachMove })
		a := s.connect()
		sid := a.result(a.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		pid := a.call("session/prompt", textPrompt(sid, "long"))
		Eventually(started, 5*time.Second).Should(BeClosed())

		b := s.connect()
		before := len(b.out.all())
		res := b.result(b.call("session/resume", map[string]any{"sessionId": sid, "cwd": cwd}))
		Expect(res).NotTo(HaveKey("sessionId"))
		Expect(a.result(pid)["stopReason"]).To(Equal("cancelled"))
		// b got nothing that answers a's request
		Consistently(func() []map[string]any {
			var stray []map[string]any
			for _, f := range framesAfter(b, before) {
				if f["method"] == nil && f["id"] != 2.0 { // 2: b's resume (1 is initialize)
					stray = append(stray, f)
				}
			}
			return stray
		}, 300*time.Millisecond, 20*time.Millisecond).Should(BeEmpty())
		// the session works on b, and a is told it moved
		Expect(b.result(b.call("session/prompt", textPrompt(sid, "on b")))["stopReason"]).To(Equal("end_turn"))
		e := a.errorOf(a.call("session/prompt", textPrompt(sid, "on a")))
		Expect(e["code"]).To(Equal(-32602.0))
	})

	It("does not make a closing connection wait for a session that moved away", func() {
		s = newSessionHarness(p, root, nil)
		a := s.connect()
		sid := a.result(a.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		b := s.connect()
		b.result(b.call("session/resume", map[string]any{"sessionId": sid, "cwd": cwd}))
		start := time.Now()
		a.conn.Close(3 * time.Second)
		Expect(time.Since(start)).To(BeNumerically("<", 2*time.Second))
		// the session stays with b
		Expect(b.result(b.call("session/prompt", textPrompt(sid, "still here")))["stopReason"]).To(Equal("end_turn"))
	})

	It("loads a session right after closing it", func() {
		s = newSessionHarness(p, root, nil)
		h := s.connect()
		for i := 0; i < 30; i++ {
			sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
			h.result(h.call("session/prompt", textPrompt(sid, "hi")))
			h.call("session/close", map[string]any{"sessionId": sid})
			res := h.result(h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))
			Expect(res).To(HaveKey("modes"))
		}
	})

	It("answers every request around idle eviction", func() {
		s = newSessionHarness(p, root, func(c *Config) { c.SessionIdle = 2 * time.Millisecond })
		h := s.connect()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		for i := 0; i < 100; i++ {
			time.Sleep(time.Duration(i%5) * time.Millisecond)
			id := h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": []string{"default", "plan"}[i%2]})
			h.result(id)
		}
	})
})

var _ = Describe("session actors over time", func() {
	It("leave no registered process behind once closed", func() {
		h := newHarness(&scriptedProvider{})
		defer h.close()
		registered := func() int {
			n := 0
			for _, m := range h.srv.sys.ProcessRegistry.LocalPIDs.LocalPIDs {
				n += m.Count()
			}
			return n
		}
		sid := h.newSession(GinkgoT().TempDir())
		h.result(h.call("session/close", map[string]any{"sessionId": sid}))
		Eventually(registered).Should(BeNumerically(">", 0))
		base := registered()
		for range 50 {
			sid := h.newSession(GinkgoT().TempDir())
			h.result(h.call("session/close", map[string]any{"sessionId": sid}))
		}
		// (futures of requests may linger a moment; a guardian per session
		// did not go at all)
		Eventually(registered).Should(BeNumerically("<=", base+5))
	})
})
