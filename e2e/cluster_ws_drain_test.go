package e2e

import (
	"errors"
	"syscall"
	"time"

	"github.com/fasthttp/websocket"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// A WebSocket cannot move off a draining pod (issue 29): it closes with
// 1001, and its client loads the session on another pod, where the turn
// handed over goes on.

var _ = Describe("a WebSocket of a draining pod", Label("e2e", "cluster", "postgres", "survive"), func() {
	DescribeTable("closes 1001 mid-turn; a new connection's load on another pod shows the turn running and streams the rest; once the pod is gone an HTTP connection's load replays the whole turn",
		func(pods int) {
			const steps = 8
			fake := llmtest.NewServer()
			DeferCleanup(fake.Close)
			stepsModel(fake, steps, "0.5")
			cl := newCluster(fake, pods, "IAC_CODE_DRAIN_TIMEOUT=10s")
			cwd := GinkgoT().TempDir()

			p := openWS(cl.pods[0].base, nil, nil)
			sid := p.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})["sessionId"].(string)
			p.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"})
			p.prompt(sid, "run turn-90")
			Eventually(func() int { return len(stepLines(cwd, "turn-90")) }, 20*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 2))

			By("SIGTERM of its pod: the socket closes with 1001 (going away)")
			Expect(cl.pods[0].cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
			Eventually(p.closed, 20*time.Second).Should(BeClosed())
			var ce *websocket.CloseError
			Expect(errors.As(p.err, &ce)).To(BeTrue(), "a close frame: %v", p.err)
			Expect(ce.Code).To(Equal(websocket.CloseGoingAway))
			Expect(len(stepLines(cwd, "turn-90"))).To(BeNumerically("<", steps), "the turn still runs")

			By("a new connection on another pod loads the session: the turn runs (activeTurn), its updates stream to the end")
			q := openWS(cl.pods[1].base, nil, nil)
			res := q.call("session/load", loadParams(sid, cwd))
			Expect(activeTurnOf(res)).To(HaveKeyWithValue("state", "running"))
			q.until("the turn's end", isTurnEnd)
			Expect(q.text(0)).To(HaveSuffix("turn-90 done."))
			Expect(expectStepsOnce(fake, cwd, "turn-90", steps)).To(BeEmpty(), "paused at a step boundary: nothing cut, every step once: the turn was not cancelled with the socket")

			By("the drained pod exits; an HTTP connection's load on the last pod replays the whole turn, ended")
			Eventually(cl.pods[0].exited, 15*time.Second).Should(Receive())
			last := cl.pods[pods-1]
			c := openConn(last)
			res = c.result("session/load", loadParams(sid, cwd))
			Expect(activeTurnOf(res)).To(BeNil())
			Expect(chatText(c.updatesOf(sid, 0), "agent_message_chunk")).To(HaveSuffix("turn-90 done."))
			Expect(p.check.Violations()).To(BeEmpty())
			Expect(q.check.Violations()).To(BeEmpty())
			Expect(last.check.Violations()).To(BeEmpty())
		},
		Entry("three pods: the turn's adopter may be another pod than the one loading it", 3),
		Entry("two pods: the only other pod adopts the turn and serves both loads", 2),
	)
})
