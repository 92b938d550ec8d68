package actors

import (
	"context"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

func hangAfter(text string) func(context.Context, func(llm.Event)) error {
	return func(ctx context.Context, emit func(llm.Event)) error {
		emit(llm.Event{Type: llm.EventTextDelta, Text: text})
		<-ctx.Done()
		return ctx.Err()
	}
}

var _ = Describe("sessions shared with another process", func() {
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
	AfterEach(func() { s.close() })

	// other is a second store on the same root: another server process.
	other := func() *store.FileStore {
		st, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		return st
	}

	It("lets go of an idle session's store handle and reloads what another process wrote meanwhile", func() {
		s = newSessionHarness(p, root, func(c *Config) { c.SessionRelease = 50 * time.Millisecond })
		h := s.connect()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "one")))["stopReason"]).To(Equal("end_turn"))

		var o store.Session
		Eventually(func() error {
			var err error
			o, _, err = other().Open(sid)
			return err
		}, 5*time.Second, 10*time.Millisecond).Should(Succeed(), "the idle session is released")
		Expect(o.Append(store.MessageEntry(llm.Message{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "from the other window"}}}),
			store.MessageEntry(llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockText, Text: "other answer"}}}))).To(Succeed())
		Expect(o.Close()).To(Succeed())

		Expect(h.result(h.call("session/prompt", textPrompt(sid, "two")))["stopReason"]).To(Equal("end_turn"))
		var texts []string
		for _, m := range p.requests()[1].Messages {
			texts = append(texts, m.TextOf())
		}
		Expect(texts).To(Equal([]string{"one", "ok", "from the other window", "other answer", "two"}))

		h.result(h.call("session/close", map[string]any{"sessionId": sid}))
		_, es, err := other().Open(sid)
		Expect(err).NotTo(HaveOccurred())
		var seq []int64
		for _, e := range es {
			seq = append(seq, e.Seq)
		}
		Expect(seq).To(Equal([]int64{1, 2, 3, 4, 5, 6}))
	})

	It("answers requests for a session another process holds with -32010 naming it, and serves them once it is free", func() {
		s = newSessionHarness(p, root, func(c *Config) { c.SessionRelease = 50 * time.Millisecond })
		h := s.connect()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		var o store.Session
		Eventually(func() error {
			var err error
			o, _, err = other().Open(sid)
			return err
		}, 5*time.Second, 10*time.Millisecond).Should(Succeed())

		e := h.errorOf(h.call("session/prompt", textPrompt(sid, "mine?")))
		Expect(e["code"]).To(Equal(float64(protocol.CodeSessionInUse)))
		Expect(e["message"]).To(ContainSubstring("another iac-code process"))
		Expect(e["data"]).To(HaveKeyWithValue("pid", float64(os.Getpid())))
		Expect(e["data"]).To(HaveKeyWithValue("sessionId", sid))
		// a load on another connection of this process attaches to the live
		// session and meets the same lock
		h2 := s.connect()
		Expect(h2.errorOf(h2.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))["code"]).
			To(Equal(float64(protocol.CodeSessionInUse)))
		Expect(p.requests()).To(BeEmpty())

		Expect(o.Close()).To(Succeed())
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "now")))["stopReason"]).To(Equal("end_turn"))
	})

	It("refuses to load a session held by another server, and the holder keeps it", func() {
		s = newSessionHarness(p, root, nil)
		h := s.connect()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)

		b := newSessionHarness(p, root, nil)
		defer b.close()
		hb := b.connect()
		for _, method := range []string{"session/load", "session/resume"} {
			e := hb.errorOf(hb.call(method, map[string]any{"sessionId": sid, "cwd": cwd}))
			Expect(e["code"]).To(Equal(float64(protocol.CodeSessionInUse)), method)
		}
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "still mine")))["stopReason"]).To(Equal("end_turn"))
	})
})

var _ = Describe("connection limits and cancellation", func() {
	var (
		p   *scriptedProvider
		h   *harness
		cwd string
	)
	BeforeEach(func() {
		p = &scriptedProvider{}
		cwd = GinkgoT().TempDir()
	})
	AfterEach(func() { h.close() })

	It("caps live sessions per connection with -32011 until one is closed", func() {
		h = newHarnessWith(Config{MaxSessions: 2}, p)
		first := h.newSession(cwd)
		h.result(h.call("session/new", map[string]any{"cwd": cwd}))
		e := h.errorOf(h.call("session/new", map[string]any{"cwd": cwd}))
		Expect(e["code"]).To(Equal(float64(protocol.CodeLimit)))
		Expect(e["data"]).To(Equal(map[string]any{"reason": "too_many_sessions", "limit": 2.0}))
		Expect(h.errorOf(h.call("session/fork", map[string]any{"sessionId": first, "cwd": cwd}))["code"]).
			To(Equal(float64(protocol.CodeLimit)))
		// loading a session that is live here does not count twice
		h.result(h.call("session/load", map[string]any{"sessionId": first, "cwd": cwd}))
		h.result(h.call("session/close", map[string]any{"sessionId": first}))
		h.result(h.call("session/new", map[string]any{"cwd": cwd}))
	})

	It("cancels the prompt named by $/cancel_request; the prompt answers cancelled and an id form gets {}", func() {
		p.then(hangAfter("partial"))
		h = newHarness(p)
		sid := h.newSession(cwd)
		prompt := h.call("session/prompt", textPrompt(sid, "long"))
		Eventually(h.out.updates, 5*time.Second).ShouldNot(BeEmpty())
		// another id cancels nothing
		Expect(h.result(h.call("$/cancel_request", map[string]any{"requestId": 999}))).To(BeEmpty())
		Consistently(func() map[string]any { return h.out.response(prompt) }, 100*time.Millisecond).Should(BeNil())
		h.notify("$/cancel_request", map[string]any{"requestId": prompt})
		Expect(h.result(prompt)["stopReason"]).To(Equal("cancelled"))
		Expect(h.errorOf(h.call("$/cancel_request", map[string]any{}))["code"]).To(Equal(-32602.0))
		// the partial answer is kept
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "next")))["stopReason"]).To(Equal("end_turn"))
		var texts []string
		for _, m := range p.requests()[1].Messages {
			texts = append(texts, m.TextOf())
		}
		Expect(texts).To(Equal([]string{"long", "partial", "next"}))
	})

	It("cancels the connection's running turns on CancelTurns and keeps serving", func() {
		p.then(hangAfter("x"))
		h = newHarness(p)
		sid := h.newSession(cwd)
		prompt := h.call("session/prompt", textPrompt(sid, "long"))
		Eventually(h.out.updates, 5*time.Second).ShouldNot(BeEmpty())
		h.conn.CancelTurns()
		Expect(h.result(prompt)["stopReason"]).To(Equal("cancelled"))
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "again")))["stopReason"]).To(Equal("end_turn"))
	})
})
