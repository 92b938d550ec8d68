package actors

import (
	"context"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// A client of a third pod follows the session to the stub that takes it
// (session_stub_adopt.go) while that stub holds the lease but still waits
// for its own legs to let go of the old holder: the follow waits with the
// take and is served once the stub holds the session. Three servers over
// one PostgreSQL, the real bash tool, the scripted model server.
var _ = Describe("a follow reaching a stub that is taking its session (PostgreSQL)", func() {
	It("is kept while the take waits and served after: the follower's prompt is answered end_turn once, no reload", func() {
		stores, model, a, b, net := twoDurablePods()
		c := durableServer(stores[2], model)
		net.mu.Lock()
		net.pods[stores[2].Incarnation()] = c
		net.mu.Unlock()
		c.SetHandover(podOf{net: net, here: c})

		h, g, k := connectTo(a), connectTo(b), connectTo(c)
		DeferCleanup(func() {
			for _, x := range []*harness{h, g, k} {
				x.conn.Close(2 * time.Second)
			}
		})
		steps := filepath.Join(GinkgoT().TempDir(), "steps")
		cwd := GinkgoT().TempDir()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))["sessionId"].(string)
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))
		for _, x := range []*harness{g, k} {
			x.result(x.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
		}

		model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{bashStep(steps, "c1", "one", 0.5)}},
			llmtest.Reply{Text: "done"})
		prompt := k.call("session/prompt", textPrompt(sid, "run"))
		Eventually(toolRunning(k, "c1"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())

		By("a pauses the turn and hands it to b; a's word that it left waits on its way to b's stub, so b's take waits")
		_, release := net.holdBack(b)
		DeferCleanup(release)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		adopted := make(chan error, 1)
		Expect(a.PauseTurns(ctx, func(id string, servers []byte) { go func() { adopted <- b.AdoptHanded(id, servers) }() })).To(Equal([]string{sid}))

		By("k's stub on c follows the session to b, whose stub holds the lease and has not taken the session yet")
		Eventually(func() int {
			net.mu.Lock()
			defer net.mu.Unlock()
			return net.served[stores[1].Incarnation()]
		}, 5*time.Second, 5*time.Millisecond).Should(BeNumerically(">=", 1), "c shares the session from b")
		Consistently(func() map[string]any { return k.out.response(prompt) }, 500*time.Millisecond, 5*time.Millisecond).Should(BeNil(),
			"k's prompt is owed by the turn b goes on with")
		release()
		Expect(<-adopted).To(Succeed())

		Eventually(func() map[string]any { return k.out.response(prompt) }, 10*time.Second, 10*time.Millisecond).Should(
			HaveKeyWithValue("result", HaveKeyWithValue("stopReason", "end_turn")), "answered by the turn resumed at b, to its follower")
		Consistently(func() int { return answersTo(k, prompt) }, 300*time.Millisecond).Should(Equal(1), "answered once")
		Expect(fileLines(steps)).To(Equal([]string{"one"}), "the step ran once")
		Expect(b.Metrics().TurnsResumed.Load()).To(Equal(int64(1)))

		By("k's session goes on through b, with no load")
		model.Script(llmtest.Reply{Text: "again"})
		from := len(k.out.all())
		Expect(k.result(k.call("session/prompt", textPrompt(sid, "once more")))["stopReason"]).To(Equal("end_turn"))
		Expect(chatOf(k, from, "agent_message_chunk")).To(Equal("again"))
	})
})
