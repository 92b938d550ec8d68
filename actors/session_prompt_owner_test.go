package actors

import (
	"context"
	"path/filepath"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// Every client numbers its requests on its own, so two clients of one
// session often send prompts with the same JSON-RPC id. A prompt owed
// across pods (a paused turn's, resumed elsewhere; one a follow claims)
// is its client's connection's and its id's, never its id's alone. Two
// servers over one PostgreSQL, the real bash tool, the scripted model
// server.
var _ = Describe("two clients' prompts of one id, the session moving between pods (PostgreSQL)", func() {
	It("answers each client its own prompt, once, when the stub serving both adopts the paused turn of one", func() {
		stores, model, a, b, net := twoDurablePods()
		h := connectTo(a)
		steps := filepath.Join(GinkgoT().TempDir(), "steps")
		cwd := GinkgoT().TempDir()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))["sessionId"].(string)
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))
		load := func(x *harness) {
			GinkgoHelper()
			x.result(x.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
		}
		// y first: its leg comes first in the stub b makes
		y, x := connectTo(b), connectTo(b)
		DeferCleanup(func() {
			for _, c := range []*harness{x, y} {
				c.conn.Close(2 * time.Second)
			}
		})
		load(y)
		load(x)
		// the session's clients are b's alone: a's drain hands it to b
		h.conn.Close(2 * time.Second)

		model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{bashStep(steps, "c1", "one", 0.5)}},
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{bashStep(steps, "c2", "two", 1)}},
			llmtest.Reply{Text: "x's answer"},
			llmtest.Reply{Text: "y's answer"})
		xPrompt := x.call("session/prompt", textPrompt(sid, "x's prompt"))
		Eventually(toolRunning(x, "c1"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())

		By("y's prompt, of the same id, is on its way to a (a slow link) when a pauses x's turn")
		yPrompt, release := promptHeld(net, stores[0].Incarnation(), y, sid, xPrompt)

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		adopted := make(chan error, 1)
		Expect(a.PauseTurns(ctx, func(id string, servers []byte) { go func() { adopted <- b.AdoptHanded(id, servers) }() })).To(Equal([]string{sid}))

		By("b's stub adopts x's turn; y's prompt reaches a only now, after the session left it")
		Consistently(func() map[string]any { return x.out.response(xPrompt) }, 500*time.Millisecond, 5*time.Millisecond).Should(BeNil(),
			"x's turn goes on at b: its prompt is not answered (cancelled) meanwhile")
		release()
		Expect(<-adopted).To(Succeed())

		Expect(x.result(xPrompt)["stopReason"]).To(Equal("end_turn"))
		Expect(y.result(yPrompt)["stopReason"]).To(Equal("end_turn"))
		Consistently(func() []int { return []int{answersTo(x, xPrompt), answersTo(y, yPrompt)} }, 300*time.Millisecond).Should(
			Equal([]int{1, 1}), "each prompt answered once")
		Expect(fileLines(steps)).To(Equal([]string{"one", "two"}), "each step of x's turn ran once")
		Expect(model.Requests()).To(HaveLen(4), "x's turn (three replies), then y's prompt, at b")
		Expect(model.MaxConcurrent()).To(Equal(int64(1)))
		Expect(b.Metrics().TurnsResumed.Load()).To(Equal(int64(1)))
		for _, c := range []*harness{x, y} {
			Eventually(func() string { return chatOf(c, 0, "agent_message_chunk") }, 5*time.Second).Should(
				Equal("x's answery's answer"), "every client sees both answers, each once, in order")
		}
	})
})

var _ = Describe("two clients' prompts of one id, following the session to another pod (PostgreSQL)", func() {
	It("answers each client its own prompt, once, when both follow the session to the pod that resumed the turn of one", func() {
		st := pgPods(4)
		pa, pc := &scriptedProvider{}, &scriptedProvider{}
		oneSecond := func(c *Config) { c.FollowTimeout = time.Second }
		// a holds the session, c adopts its turn; x is a client of b, y of d
		a, b, c, d := newSessionHarnessOn(pa, st[0], nil), newSessionHarnessOn(&scriptedProvider{}, st[1], oneSecond),
			newSessionHarnessOn(pc, st[2], nil), newSessionHarnessOn(&scriptedProvider{}, st[3], oneSecond)
		net := &podNet{pods: map[string]*Server{}, gate: map[string]chan struct{}{}, gateFrom: map[*Server]chan struct{}{}}
		for i, p := range []*sessionHarness{a, b, c, d} {
			DeferCleanup(p.close)
			net.pods[st[i].Incarnation()] = p.srv
			p.srv.SetHandover(podOf{net: net, here: p.srv})
		}
		cwd := GinkgoT().TempDir()
		owner := a.connect()
		sid := owner.result(owner.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		x, y := b.connect(), d.connect()
		for _, h := range []*harness{x, y} {
			h.result(h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))
		}
		owner.conn.Close(2 * time.Second) // the session's clients are b's and d's
		agentText := func(h *harness) string { return chatOf(h, 0, "agent_message_chunk") }
		// gate sets a gate of net's, closed by the func it returns
		gate := func(set func(chan struct{})) func() {
			g := make(chan struct{})
			net.mu.Lock()
			set(g)
			net.mu.Unlock()
			return sync.OnceFunc(func() { close(g) })
		}

		pa.then(hangAfter("cut "))
		xPrompt := x.call("session/prompt", textPrompt(sid, "x's prompt"))
		Eventually(func() string { return agentText(x) }, 5*time.Second).Should(Equal("cut "), "x's turn runs on a")

		By("y's prompt, of the same id, is on its way to a (a slow link) when a pauses x's turn")
		yPrompt, release := promptHeld(net, st[0].Incarnation(), y, sid, xPrompt)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		toC, fromB := gate(func(g chan struct{}) { net.gate[st[2].Incarnation()] = g }), gate(func(g chan struct{}) { net.gateFrom[b.srv] = g })
		DeferCleanup(toC)
		DeferCleanup(fromB)
		Expect(a.srv.PauseTurns(ctx, nil)).To(Equal([]string{sid}))

		By("c adopts x's turn, which ends before either client follows: its answer is kept")
		pc.then(say("x's answer")).then(say("y's answer"))
		Expect(c.srv.Adopt(sid)).To(Succeed())
		Eventually(func() int64 { return c.srv.Metrics().RunningTurns.Load() }, 5*time.Second).Should(BeZero())

		By("y follows first; then x; y's prompt reaches a only now, after the session left it")
		toC()
		Eventually(func() string { return agentText(y) }, 5*time.Second).Should(ContainSubstring("x's answer"), "y followed the session to c")
		fromB()
		release()

		Expect(x.result(xPrompt)["stopReason"]).To(Equal("end_turn"), "x's turn ended on c")
		Expect(y.result(yPrompt)["stopReason"]).To(Equal("end_turn"), "y's prompt was served on c")
		Consistently(func() []int { return []int{answersTo(x, xPrompt), answersTo(y, yPrompt)} }, 300*time.Millisecond).Should(
			Equal([]int{1, 1}), "each prompt answered once")
		Expect(pc.requests()).To(HaveLen(2), "x's turn went on at c, then y's prompt ran there")
		Expect(pa.requests()).To(HaveLen(1), "y's prompt did not run on a")
		for _, h := range []*harness{x, y} {
			Eventually(func() string { return agentText(h) }, 5*time.Second).Should(Equal("cut x's answery's answer"),
				"every client sees both answers, each once, in order")
		}
	})
})

// promptHeld is y's prompt of the session sid, held on its way to pod inc
// (a slow link) until release is called; its id is sameAs, the id of the
// other client's prompt.
func promptHeld(net *podNet, inc string, y *harness, sid string, sameAs float64) (prompt float64, release func()) {
	GinkgoHelper()
	caught, release := net.holdRelays(inc)
	DeferCleanup(release)
	prompt = y.call("session/prompt", textPrompt(sid, "y's prompt"))
	Expect(prompt).To(Equal(sameAs), "both clients number their requests alike")
	Eventually(caught, 5*time.Second).Should(Receive())
	return prompt, release
}
