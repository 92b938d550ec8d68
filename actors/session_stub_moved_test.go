package actors

import (
	"context"
	"path/filepath"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// A connection moved to the pod that holds its session gets a stub made
// beside the session (connection_move.go, `~moved~`), its leg served by
// the proxy there. When the session leaves that pod and comes back to it
// (adopted there), the stub follows it home: it rejoins the session actor
// of its own pod as it rejoins another pod's. Two servers over one
// PostgreSQL, the real bash tool, the scripted model server.
var _ = Describe("a moved-in stub beside its session (PostgreSQL)", func() {
	It("follows the session adopted back by its own pod: its prompt is answered there, every step once", func() {
		stores, model, a, b, net := twoDurablePods()
		h, g := connectTo(a), connectTo(b)
		DeferCleanup(func() { h.conn.Close(2 * time.Second); g.conn.Close(2 * time.Second) })
		steps := filepath.Join(GinkgoT().TempDir(), "steps")
		cwd := GinkgoT().TempDir()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))["sessionId"].(string)
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))
		g.result(g.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))

		By("b drains: g moves to a, which holds the session: its stub there is made beside the session")
		m := moveConn(g, b, a, net)
		DeferCleanup(func() { m.conn.Close(2 * time.Second) })
		_, beside := a.sys.ProcessRegistry.GetLocal(sessionActorName(sid) + "~moved~" + g.conn.ID)
		Expect(beside).To(BeTrue())

		model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{bashStep(steps, "c1", "one", 0.5)}},
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{bashStep(steps, "c2", "two", 1)}},
			llmtest.Reply{Text: "all done", Split: 3, Delay: 50 * time.Millisecond})
		prompt := m.call("session/prompt", textPrompt(sid, "run the steps"))
		Eventually(toolRunning(m, "c1"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())

		pause := func(from, to *Server) { GinkgoHelper(); handTurn(from, to, sid) }
		By("a hands the session to b: the stub follows it there")
		pause(a, b)
		Eventually(toolRunning(m, "c2"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())

		By("b hands it back to a: the stub finds its own pod holding the session and rejoins it")
		pause(b, a)
		Eventually(func() map[string]any { return m.out.response(prompt) }, 15*time.Second, 10*time.Millisecond).Should(
			HaveKeyWithValue("result", HaveKeyWithValue("stopReason", "end_turn")), "answered by the turn a resumed, not cancelled")
		Expect(fileLines(steps)).To(Equal([]string{"one", "two"}), "each step ran once")
		Expect(chatOf(m, 0, "agent_message_chunk")).To(Equal("all done"))
		Expect(toolUpdates(m, "tool_call", "c2")).To(Equal(1), "b's step reached the moved connection once")
		Consistently(func() int { return answersTo(m, prompt) }, 200*time.Millisecond).Should(Equal(1))
		Expect(model.MaxConcurrent()).To(Equal(int64(1)))
		holder, err := stores[0].Holder(context.Background(), sid)
		Expect(err).NotTo(HaveOccurred())
		Expect(holder.Owner).To(Equal(stores[0].Incarnation()))

		By("its next prompt runs on a, through the stub")
		model.Script(llmtest.Reply{Text: "again"})
		from := len(m.out.all())
		Expect(m.result(m.call("session/prompt", textPrompt(sid, "once more")))["stopReason"]).To(Equal("end_turn"))
		Expect(chatOf(m, from, "agent_message_chunk")).To(Equal("again"))
	})

	It("answers its prompt once when the turn its own pod adopted back ends before the stub follows it home", func() {
		_, model, a, b, net := twoDurablePods()
		h, g := connectTo(a), connectTo(b)
		DeferCleanup(func() { g.conn.Close(2 * time.Second) })
		steps := filepath.Join(GinkgoT().TempDir(), "steps")
		cwd := GinkgoT().TempDir()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))["sessionId"].(string)
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))
		g.result(g.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
		m := moveConn(g, b, a, net)
		DeferCleanup(func() { m.conn.Close(2 * time.Second) })
		// the session's one client is the moved connection, through its stub beside the session
		h.conn.Close(2 * time.Second)

		model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{bashStep(steps, "c1", "one", 0.3)}},
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{bashStep(steps, "c2", "two", 0.5)}},
			llmtest.Reply{Text: "all done"})
		prompt := m.call("session/prompt", textPrompt(sid, "run the steps"))
		Eventually(toolRunning(m, "c1"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())
		pause := func(from, to *Server) { GinkgoHelper(); handTurn(from, to, sid) }
		pause(a, b)
		Eventually(toolRunning(m, "c2"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())

		By("b hands the session back to a; b's word that it left is on its way to the stub (a slow link)")
		_, release := net.holdBack(a)
		DeferCleanup(release)
		pause(b, a)
		Eventually(func() int64 { return a.Metrics().TurnsResumed.Load() }, 5*time.Second).Should(Equal(int64(1)))
		Eventually(func() int64 { return a.Metrics().RunningTurns.Load() }, 5*time.Second).Should(BeZero(), "the turn a resumed ended")
		Consistently(func() int { return answersTo(m, prompt) }, 200*time.Millisecond).Should(BeZero(),
			"the moved connection reaches the session through its stub, which has not followed it yet")

		By("the stub follows the session home and is owed the turn's answer")
		release()
		Eventually(func() map[string]any { return m.out.response(prompt) }, 10*time.Second, 10*time.Millisecond).Should(
			HaveKeyWithValue("result", HaveKeyWithValue("stopReason", "end_turn")))
		Consistently(func() int { return answersTo(m, prompt) }, defaultFollowTimeout+500*time.Millisecond).Should(Equal(1),
			"answered once: not cancelled by the stub, which waits up to the follow timeout before it settles a prompt not owed")
		Expect(fileLines(steps)).To(Equal([]string{"one", "two"}), "each step ran once")
		Eventually(func() string { return chatOf(m, 0, "agent_message_chunk") }, 5*time.Second).Should(Equal("all done"))
	})
})

// handTurn drains pod from, which hands the paused turn of session sid,
// its only one, to pod to, and waits for to to adopt it.
func handTurn(from, to *Server, sid string) {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adopted := make(chan error, 1)
	Expect(from.PauseTurns(ctx, func(id string, servers []byte) { go func() { adopted <- to.AdoptHanded(id, servers) }() })).To(Equal([]string{sid}))
	Expect(<-adopted).To(Succeed())
}

// moveConn moves x's connection from pod from to pod to as a drain does
// (StartMove, MoveIn, Repoint, Finish, Restore; the transport's outbox is
// not moved) and returns its harness there, with the ids x used.
func moveConn(x *harness, from, to *Server, net *podNet) *harness {
	GinkgoHelper()
	mv, err := x.conn.StartMove(5 * time.Second)
	Expect(err).NotTo(HaveOccurred())
	state := mv.State
	for i := range state.Sessions {
		// Pods name each other's actors; the test pods reach them
		// through forwarders, so the move names the proxy behind one.
		if ms := &state.Sessions[i]; ms.ProxyID != "" {
			proxy := net.proxyOf(from, actor.NewPID(ms.ProxyAddress, ms.ProxyID))
			ms.ProxyAddress, ms.ProxyID = proxy.Address, proxy.Id
		}
	}
	out := &recorder{}
	conn, legs := to.MoveIn(x.conn.ID, &state, out)
	pending := mv.Repoint(legs, 5*time.Second)
	asked, err := mv.Finish(5 * time.Second)
	Expect(err).NotTo(HaveOccurred())
	conn.Restore(asked, pending)
	mv.Stop()
	return &harness{srv: to, conn: conn, out: out, nextID: x.nextID}
}
