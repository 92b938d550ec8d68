package e2e

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// stepTurn is one turn of the crash specs: its session, the pod holding it
// (where its session/new landed), and the connection that prompted it.
type stepTurn struct {
	key, sid, cwd string
	holder, via   int // pod indexes
	creator       *acpConn
	prompter      *acpConn
	prompt        float64
	ended         time.Duration // from the kill to the end the client saw
}

var _ = Describe("running turns survive a crash", Label("e2e", "cluster", "postgres", "survive"), func() {
	var fake *llmtest.Server
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
	})

	It("kill -9 of the pod holding the most of 20 running turns: each ends end_turn within the lease TTL + 30 s, every step's side effect once and in order, at most the cut step reported interrupted, never two model requests of one turn at once", func() {
		const turns, steps, ttl = 20, 10, 5 * time.Second
		stepsModel(fake, steps, "0.2")
		cl := newCluster(fake, 3, fmt.Sprintf("IAC_CODE_LEASE_TTL=%v", ttl), "IAC_CODE_LEASE_RENEW=1s")

		By("20 sessions held round robin by the 3 pods; every other one prompted through a connection on the next pod")
		ts := make([]*stepTurn, turns)
		held := make([]int, len(cl.pods))
		for i := range ts {
			t := &stepTurn{key: fmt.Sprintf("turn-%02d", i), cwd: GinkgoT().TempDir(), holder: i % len(cl.pods)}
			t.creator = openConn(cl.pods[t.holder])
			t.sid = t.creator.newSession(t.cwd)
			t.creator.bypass(t.sid)
			t.prompter, t.via = t.creator, t.holder
			if i%2 == 1 {
				// Shared through a stub on that pod: the holder stays.
				t.via = (t.holder + 1) % len(cl.pods)
				t.prompter = openConn(cl.pods[t.via])
				t.prompter.result("session/load", loadParams(t.sid, t.cwd))
			}
			held[t.holder]++
			ts[i] = t
		}
		for _, t := range ts {
			t.prompt = t.prompter.prompt(t.sid, "run "+t.key)
		}
		Eventually(func() int {
			least := steps
			for _, t := range ts {
				least = min(least, len(stepLines(t.cwd, t.key)))
			}
			return least
		}, 60*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 2), "every turn ran two steps")
		victim := 0
		for p := range held {
			if held[p] > held[victim] {
				victim = p
			}
		}

		killed := time.Now()
		Expect(cl.pods[victim].cmd.Process.Kill()).To(Succeed())
		Eventually(cl.pods[victim].exited, 10*time.Second).Should(Receive())
		for _, t := range ts {
			Expect(len(stepLines(t.cwd, t.key))).To(BeNumerically("<", steps), "%s was still running at the kill", t.key)
		}
		deadline := killed.Add(ttl + 30*time.Second)
		survivors := []int{}
		for p := range cl.pods {
			if p != victim {
				survivors = append(survivors, p)
			}
		}

		By("the turns whose prompt's connection was on the killed pod: a load on a survivor (not their holder) shows them running")
		loaded := map[*stepTurn]*acpConn{}
		running := 0
		for _, t := range ts {
			if t.via != victim {
				continue
			}
			on := survivors[0]
			if on == t.holder {
				on = survivors[1]
			}
			n := openConn(cl.pods[on])
			res := n.result("session/load", loadParams(t.sid, t.cwd))
			GinkgoWriter.Printf("%s (held by pod %d): loaded on pod %d, activeTurn %v\n", t.key, t.holder, on, activeTurnOf(res))
			if active := activeTurnOf(res); active != nil {
				Expect(active).To(HaveKeyWithValue("state", "running"), "%s", t.key)
				running++
			} else {
				// Ended already: its last reply is in the history.
				Expect(chatText(n.updatesOf(t.sid, 0), "agent_message_chunk")).To(HaveSuffix(t.key+" done."), "%s", t.key)
				t.ended = time.Since(killed)
			}
			loaded[t] = n
		}
		Expect(running).To(BeNumerically(">", 0), "some of them still ran when loaded")

		By("a prompt sent through a surviving pod is answered there; the loaded turns end on their loader's connection")
		for _, t := range ts {
			if n := loaded[t]; n != nil {
				if t.ended == 0 {
					_, ok := n.waitFor(deadline, turnEndOf(t.sid))
					Expect(ok).To(BeTrue(), "%s (held by pod %d): its end within the lease TTL + 30 s", t.key, t.holder)
					t.ended = time.Since(killed)
					Expect(chatText(n.updatesOf(t.sid, 0), "agent_message_chunk")).To(HaveSuffix(t.key+" done."), "%s: its last reply", t.key)
				}
				continue
			}
			ans, ok := t.prompter.waitFor(deadline, respTo(t.prompt))
			Expect(ok).To(BeTrue(), "%s (held by pod %d, prompted through pod %d): answered within the lease TTL + 30 s", t.key, t.holder, t.via)
			Expect(ans["result"]).To(HaveKeyWithValue("stopReason", "end_turn"), "%s: %v", t.key, ans)
			t.ended = time.Since(killed)
		}

		By("each step's side effect once and in order; at most the cut step told to the model as interrupted")
		var worst time.Duration
		cut := 0
		for _, t := range ts {
			if len(expectStepsOnce(fake, t.cwd, t.key, steps)) > 0 {
				cut++
			}
			worst = max(worst, t.ended)
		}
		GinkgoWriter.Printf("kill -9 of pod %d (holding %d turns): every turn ended within %v; %d steps reported cut\n", victim, held[victim], worst, cut)
		AddReportEntry("kill -9 to the last turn's end (20 turns)", worst.String())
		Expect(fake.MaxConcurrent()).To(BeNumerically(">", 1), "the turns ran at once")
		resumed := 0.0
		for _, p := range survivors {
			resumed += cl.pods[p].metric("iaccode_turns_resumed_total")
		}
		Expect(resumed).To(Equal(float64(held[victim])), "each turn of the killed pod resumed once, on a survivor")
		for _, p := range cl.pods {
			Expect(p.check.Violations()).To(BeEmpty())
		}
	})
})
