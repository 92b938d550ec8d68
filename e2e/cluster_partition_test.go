package e2e

import (
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/store"
)

var _ = Describe("a partitioned pod coming back", Label("e2e", "cluster", "postgres", "survive"), func() {
	It("never runs a turn at once with the pod that took it over: its late writes are refused, its prompt answered taken over, the turn ends once at the new holder, each step once", func() {
		const key, steps = "turn-50", 8
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd := GinkgoT().TempDir()
		// Long enough steps that the freeze lands in one, and the new
		// holder is still running the turn when the old one wakes up.
		stepsModel(fake, steps, "0.5")
		cl := newCluster(fake, 2, "IAC_CODE_LEASE_TTL=1s", "IAC_CODE_LEASE_RENEW=200ms")
		old, next := cl.pods[0], cl.pods[1]
		a := openConn(old)
		sid := a.newSession(cwd)
		a.bypass(sid)
		turn := a.prompt(sid, "run "+key)
		Eventually(func() int { return len(stepLines(cwd, key)) }, 20*time.Second, 10*time.Millisecond).Should(Equal(2))

		By("the holder stops mid-step (a partition: not dead, unreachable); past its lease TTL a load on the other pod takes the session and resumes the turn")
		DeferCleanup(func() { _ = old.cmd.Process.Signal(syscall.SIGCONT) })
		old.freeze()
		frozen := time.Now()
		b := openConn(next)
		var loaded map[string]any
		Eventually(func() map[string]any {
			loaded = b.call("session/load", loadParams(sid, cwd))
			return loaded
		}, 10*time.Second, 200*time.Millisecond).Should(HaveKey("result"), "loaded once the frozen pod's lease expired")
		Expect(activeTurnOf(loaded["result"].(map[string]any))).To(HaveKeyWithValue("state", "running"), "the load resumed the turn")
		requests := func() int {
			n := 0
			for _, r := range fake.Requests() {
				if r.Key == key {
					n++
				}
			}
			return n
		}
		before := requests()
		Eventually(requests, 10*time.Second, 10*time.Millisecond).Should(BeNumerically(">", before), "the new holder asked the model")

		By("the old holder wakes up while the new one runs the turn")
		Expect(old.cmd.Process.Signal(syscall.SIGCONT)).To(Succeed())
		GinkgoWriter.Printf("frozen for %v\n", time.Since(frozen))
		late := a.wait(turn)
		Expect(late["error"]).To(HaveKeyWithValue("code", -32010.0), "the old holder's prompt: %v", late)
		Expect(late["error"]).To(HaveKeyWithValue("data", HaveKeyWithValue("reason", "session_taken_over")))
		Expect(len(stepLines(cwd, key))).To(BeNumerically("<", steps), "the new holder was still running the turn")
		// Read from the new holder's history by a fresh load: b may have
		// lost the session meanwhile to the woken pod's client, which
		// follows the session here (attach moves a session).
		c := openConn(next)
		Eventually(func(g Gomega) {
			from := len(c.events)
			res := c.call("session/load", loadParams(sid, cwd))
			g.Expect(res).To(HaveKey("result"))
			g.Expect(activeTurnOf(res["result"].(map[string]any))).To(BeNil(), "the turn ended")
			g.Expect(chatText(c.updatesOf(sid, from), "agent_message_chunk")).To(HaveSuffix(key+" done."), "its last reply")
		}, 30*time.Second, 500*time.Millisecond).Should(Succeed(), "the turn ends once at the new holder")

		By("each step once, the cut one reported so and only by the new holder: the old one's result was refused")
		cut := expectStepsOnce(fake, cwd, key, steps)
		Expect(cut).To(HaveLen(1), "the step the freeze cut")
		reqs := fake.Requests()
		last := reqs[len(reqs)-1]
		Expect(last.Key).To(Equal(key))
		results := map[string][]string{}
		for _, m := range last.Chat.Messages {
			if m.Role == "tool" {
				results[m.ToolCallID] = append(results[m.ToolCallID], m.Text())
			}
		}
		Expect(results).To(HaveLen(steps), "one result per step in the history")
		for id, rs := range results {
			Expect(rs).To(HaveLen(1), "%s: one result", id)
		}
		cutID := key + "-s" + itoa(cut[0])
		Expect(strings.Join(results[cutID], "")).To(ContainSubstring(store.ToolCutText), "the new holder's record of the cut step, not the old one's late result")
		Expect(requests()).To(Equal(steps+1), "one model request per step and one for the last reply: the old holder asked nothing after it woke")

		By("a later load shows the turn ended once")
		d := openConn(next)
		res := d.result("session/load", loadParams(sid, cwd))
		Expect(activeTurnOf(res)).To(BeNil())
		Expect(strings.Count(chatText(d.updatesOf(sid, 0), "agent_message_chunk"), key+" done.")).To(Equal(1))
		for _, p := range cl.pods {
			Expect(p.check.Violations()).To(BeEmpty())
		}
	})
})
