package actors

import (
	"context"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/store"
)

// A stub that ends "holder gone" answers what its legs relayed: a prompt
// cancelled. The prompt's turn may still be recorded, paused by its holder
// and not adopted yet (here the stub's pod cannot read the store for
// longer than its follow timeout, so it stops following). When that turn
// is resumed later on the stub's own pod — its connection loads the
// session again, or the pod adopts the session — the prompt was answered
// already: the resumed turn answers it to nobody. Two servers over one
// PostgreSQL (b's link to it one the spec cuts), the real bash tool, the
// scripted model server.
var _ = Describe("a prompt whose stub ended before its paused turn was resumed on the stub's pod (PostgreSQL)", func() {
	DescribeTable("is answered once, cancelled by the stub's end; the turn goes on there, every step once",
		func(resume func(b *Server, g *harness, sid, cwd string)) {
			pods := newLinkedPods()
			a, b, stB, model, link := pods.a, pods.b, pods.stB, pods.model, pods.link
			b.deps.Config.FollowTimeout = time.Second

			_, g, sid, cwd := sharedSession(a, b)
			steps := filepath.Join(GinkgoT().TempDir(), "steps")
			model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{bashStep(steps, "c1", "one", 0.5)}},
				llmtest.Reply{ToolCalls: []llmtest.ToolCall{bashStep(steps, "c2", "two", 0.3)}},
				llmtest.Reply{Text: "all done"})
			prompt := g.call("session/prompt", textPrompt(sid, "run the steps"))
			Eventually(toolRunning(g, "c1"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())

			By("b loses its database; a pauses the turn, which no pod adopts yet")
			link.Cut()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			Expect(a.PauseTurns(ctx, nil)).To(Equal([]string{sid}))

			By("b's stub finds no next holder within its follow timeout: it ends, answering the prompt cancelled")
			Eventually(func() map[string]any { return g.out.response(prompt) }, 10*time.Second, 10*time.Millisecond).Should(
				HaveKeyWithValue("result", HaveKeyWithValue("stopReason", "cancelled")))
			link.Heal()
			Eventually(func() error { _, err := stB.Holder(context.Background(), sid); return err }, 5*time.Second, 50*time.Millisecond).Should(Succeed())

			By("the paused turn is resumed on b, where the prompt's connection is")
			resume(b, g, sid, cwd)
			Eventually(func() int64 { return b.Metrics().TurnsResumed.Load() }, 10*time.Second).Should(Equal(int64(1)))
			Eventually(func() int64 { return b.Metrics().RunningTurns.Load() }, 10*time.Second).Should(BeZero(), "the resumed turn ended")
			Expect(fileLines(steps)).To(Equal([]string{"one", "two"}), "each step ran once")
			Consistently(func() int { return answersTo(g, prompt) }, 300*time.Millisecond).Should(Equal(1),
				"answered once: the stub's end answered it, the resumed turn owes it nobody")
			Expect(g.out.response(prompt)).To(HaveKeyWithValue("result", HaveKeyWithValue("stopReason", "cancelled")))
		},
		Entry("its connection loads the session again", func(_ *Server, g *harness, sid, cwd string) {
			GinkgoHelper()
			from := len(g.out.all())
			g.result(g.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
			Eventually(func() string { return chatOf(g, from, "agent_message_chunk") }, 10*time.Second).Should(HaveSuffix("all done"),
				"the resumed turn's updates reach the client that loaded it")
		}),
		Entry("the pod adopts the session (a hand-over, a recovery scan)", func(b *Server, _ *harness, sid, _ string) {
			GinkgoHelper()
			Expect(b.Adopt(sid)).To(Succeed())
		}),
	)
})

// The turn a stub takes (session_stub_adopt.go) may have only its end
// left: its holder recorded its last reply and stopped before it recorded
// the end (a pod dying between the two writes; here another holder leaves
// the history so while the turn is paused). The take resumes the turn,
// which ends at once, before the stub's legs are settled: the prompt a
// leg relayed is answered once, by the turn.
var _ = Describe("a stub taking a turn whose last reply is recorded (PostgreSQL)", func() {
	It("answers the prompt its leg relayed once, end_turn", func() {
		stores, model, a, b, _ := twoDurablePods()
		_, g, sid, cwd := sharedSession(a, b)
		model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{bashStep(filepath.Join(cwd, "steps"), "c1", "one", 0.3)}})
		prompt := g.call("session/prompt", textPrompt(sid, "run"))
		Eventually(toolRunning(g, "c1"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())

		By("a pauses the turn; another holder records its last reply, keeping the turn recorded; b's stub takes it")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		adopted := make(chan error, 1)
		Expect(a.PauseTurns(ctx, func(id string, servers []byte) {
			defer GinkgoRecover()
			s, _, err := stores[2].Open(id)
			Expect(err).NotTo(HaveOccurred())
			Expect(s.Append(store.Entry{Kind: store.KindMessage, Message: llm.Message{Role: llm.RoleAssistant,
				Content: []llm.Block{{Type: llm.BlockText, Text: "all done"}}}})).To(Succeed())
			Expect(s.(store.TurnKeeper).Pause()).To(Succeed())
			go func() { adopted <- b.AdoptHanded(id, servers) }()
		})).To(Equal([]string{sid}))
		Expect(<-adopted).To(Succeed())
		Eventually(func() map[string]any { return g.out.response(prompt) }, 10*time.Second, 10*time.Millisecond).Should(
			HaveKeyWithValue("result", HaveKeyWithValue("stopReason", "end_turn")))
		Consistently(func() int { return answersTo(g, prompt) }, 300*time.Millisecond).Should(Equal(1), "answered once, not cancelled too")
		Expect(b.Metrics().TurnsResumed.Load()).To(Equal(int64(1)))
		Expect(model.Requests()).To(HaveLen(1), "only the turn's end was left: the model is not asked again")
	})
})
