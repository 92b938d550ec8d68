package e2e

import (
	"fmt"
	"net/http"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// A rolling update (issue 29's acceptance): every pod of the cluster is
// sent SIGTERM in turn, its replacement started and waited for (ready)
// before the next, while turns of many steps run on all of them, each
// prompted by an SSE client through the load balancer.

// rollingClient is one SSE client of the rolling restart: one session, one
// turn, its stream reconnected through the balancer with Last-Event-ID
// whenever it ends.
type rollingClient struct {
	key, sid, cwd string
	c             *acpConn
	prompt        float64
	answer        map[string]any
	reconnects    int
	// cuts are the event counts at each reconnect (for a failure's report).
	cuts []int
}

// idTrail is c's event ids in order, | where a stream ended and the next
// began (a failure's report).
func (k *rollingClient) idTrail() string {
	var b []byte
	next := 0
	for i, ev := range k.c.events {
		for next < len(k.cuts) && k.cuts[next] == i {
			b = append(b, " |"...)
			next++
		}
		b = append(b, ' ')
		b = append(b, ev.id...)
	}
	return string(b)
}

// readAvailable takes what c's stream has now, without waiting: false once
// the stream ended and all of it was read.
func (c *acpConn) readAvailable() bool {
	for {
		select {
		case ev, ok := <-c.s.events:
			if !ok {
				return false
			}
			c.events = append(c.events, ev)
		default:
			return true
		}
	}
}

// lastEventID is the id of the last event c read.
func (c *acpConn) lastEventID() string {
	for i := len(c.events) - 1; i >= 0; i-- {
		if c.events[i].id != "" {
			return c.events[i].id
		}
	}
	return ""
}

// ready reports whether the pod answers GET /ready with 200.
func (a *httpAgent) ready() bool {
	resp, err := a.client.Get(a.base + "/ready")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// countUpdates counts the session/update payloads of sid in events whose
// sessionUpdate is kind and whose toolCallId is id ("" for any).
func countUpdates(events []sseEvent, sid, kind, id string) int {
	n := 0
	for _, ev := range events {
		if ev.msg["method"] != "session/update" {
			continue
		}
		p := ev.msg["params"].(map[string]any)
		u := p["update"].(map[string]any)
		if p["sessionId"] == sid && u["sessionUpdate"] == kind && (id == "" || u["toolCallId"] == id) {
			n++
		}
	}
	return n
}

var _ = Describe("running turns survive a rolling restart", Label("e2e", "cluster", "postgres", "survive"), func() {
	It("50 turns of 12 steps through SIGTERM of each of 3 pods in turn: every turn ends end_turn on its connection, every step once and in order, every SSE client gets every update once and never initializes again", func() {
		// Steps long enough that turns still run at the third pod's SIGTERM.
		const turns, steps = 50, 12
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		stepsModel(fake, steps, "1.2")
		cl := newCluster(fake, 3, "IAC_CODE_DRAIN_TIMEOUT=10s")
		rr := newRoundRobin(cl.pods)

		By("50 SSE clients through the balancer, each with a session and a turn (clients and sessions spread over the pods)")
		cs := make([]*rollingClient, turns)
		for i := range cs {
			k := &rollingClient{key: fmt.Sprintf("turn-%02d", i), cwd: GinkgoT().TempDir()}
			k.c = openConn(rr.httpAgent)
			k.sid = k.c.newSession(k.cwd)
			k.c.bypass(k.sid)
			cs[i] = k
		}
		for _, k := range cs {
			k.prompt = k.c.prompt(k.sid, "run "+k.key)
		}
		Eventually(func() int {
			least := steps
			for _, k := range cs {
				least = min(least, len(stepLines(k.cwd, k.key)))
			}
			return least
		}, 60*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 1), "every turn ran a step")

		By("SIGTERM each pod in turn; its replacement started and ready before the next; the clients read and reconnect meanwhile")
		deadline := time.Now().Add(3 * time.Minute)
		// poll reads every client's stream, reconnecting an ended one with
		// Last-Event-ID through the balancer; true once all are answered.
		poll := func() bool {
			all := true
			for _, k := range cs {
				if k.answer != nil {
					continue
				}
				live := k.c.readAvailable()
				if ans, ok := k.c.waitFor(time.Now(), respTo(k.prompt)); ok {
					k.answer = ans
					continue
				}
				all = false
				if !live {
					k.cuts = append(k.cuts, len(k.c.events))
					k.c.s = reconnect(rr.httpAgent, k.c.id, k.c.lastEventID())
					k.c.via = rr.httpAgent
					k.reconnects++
				}
			}
			return all
		}
		for p := range cl.pods {
			old := cl.pods[p]
			running := 0
			for _, k := range cs {
				if len(stepLines(k.cwd, k.key)) < steps {
					running++
				}
			}
			GinkgoWriter.Printf("SIGTERM pod %d: %d turns not done\n", p, running)
			Expect(old.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
			exited := false
			for !exited {
				Expect(time.Now().Before(deadline)).To(BeTrue(), "pod %d did not exit", p)
				select {
				case <-old.exited:
					exited = true
				case <-time.After(20 * time.Millisecond):
					poll()
				}
			}
			fresh := cl.start(clusterSecret)
			cl.pods[p] = fresh
			rr.replace(p, fresh.base)
			for !fresh.ready() {
				Expect(time.Now().Before(deadline)).To(BeTrue(), "pod %d's replacement never ready", p)
				poll()
				time.Sleep(20 * time.Millisecond)
			}
		}

		By("every prompt answered end_turn on the connection that sent it")
		for !poll() {
			Expect(time.Now().Before(deadline)).To(BeTrue(), "turns still unanswered")
			time.Sleep(20 * time.Millisecond)
		}
		reconnects := 0
		for _, k := range cs {
			Expect(k.answer["result"]).To(HaveKeyWithValue("stopReason", "end_turn"), "%s: %v", k.key, k.answer)
			reconnects += k.reconnects
		}
		Expect(reconnects).To(BeNumerically(">", 0), "streams ended and came back")

		By("each step's side effect exactly once and in order, none cut; each update once; the connection still serves without initialize")
		for _, k := range cs {
			// A stream whose pod went after the answer came is reconnected
			// too: the connection lives on elsewhere.
			if !k.c.readAvailable() {
				k.cuts = append(k.cuts, len(k.c.events))
				k.c.s = reconnect(rr.httpAgent, k.c.id, k.c.lastEventID())
				k.c.via = rr.httpAgent
			}
			Expect(k.c.call("session/list", map[string]any{})).To(HaveKey("result"), "%s: the same connection id, no initialize", k.key)
			Expect(expectStepsOnce(fake, k.cwd, k.key, steps)).To(BeEmpty(), "%s: a drain pauses at a step boundary: nothing cut", k.key)
			seen := map[string]bool{}
			for _, ev := range k.c.events {
				if ev.id == "" {
					continue
				}
				Expect(seen).NotTo(HaveKey(ev.id), "%s: event %s delivered twice: %s", k.key, ev.id, k.idTrail())
				seen[ev.id] = true
			}
			for n := 1; n <= steps; n++ {
				id := fmt.Sprintf("%s-s%d", k.key, n)
				Expect(countUpdates(k.c.events, k.sid, "tool_call", id)).To(Equal(1), "%s: step %d's tool_call shown once", k.key, n)
			}
			Expect(chatText(k.c.updatesOf(k.sid, 0), "agent_message_chunk")).To(Equal(k.key+" done."), "%s: the last reply once", k.key)
		}
		AddReportEntry("rolling restart: stream reconnects", reconnects)
		Expect(rr.check.Violations()).To(BeEmpty())
		for _, p := range cl.pods {
			Expect(p.check.Violations()).To(BeEmpty())
		}
	})
})
