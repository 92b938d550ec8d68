package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// reconnect opens the connection's stream through via with Last-Event-ID,
// retrying while pods answer 503 (draining), the balancer 502 (the pod
// that left), or the stream ends at once.
func reconnect(via *httpAgent, conn, last string) *sseStream {
	GinkgoHelper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, via.base+"/acp", nil)
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Acp-Connection-Id", conn)
		req.Header.Set("Last-Event-ID", last)
		resp, err := via.client.Do(req)
		status, body := 0, ""
		if err == nil {
			status = resp.StatusCode
			if status != http.StatusOK {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				body = string(b)
			}
			resp.Body.Close()
		}
		cancel()
		// 503: a draining pod; 502: the balancer reached the pod that left
		if status == http.StatusOK || status == http.StatusServiceUnavailable || status == http.StatusBadGateway || err != nil {
			if status == http.StatusOK {
				// The stream is another request: the balancer may send it
				// to a pod still draining (503); then try again.
				var s *sseStream
				if InterceptGomegaFailure(func() { s = via.stream(conn, "Last-Event-ID", last) }) == nil {
					return s
				}
			}
		} else {
			Fail(fmt.Sprintf("reconnect of %s answered %s: %s", conn, http.StatusText(status), body))
		}
		Expect(time.Now().Before(deadline)).To(BeTrue(), "no pod served the reconnect")
		time.Sleep(100 * time.Millisecond)
	}
}

var _ = Describe("an HTTP connection survives its pod's drain", Label("e2e", "cluster", "postgres", "connmove"), func() {
	DescribeTable("SIGTERM of the connection's pod while a prompt streams on a session another pod holds: the client reconnects with Last-Event-ID and gets every update once and the answer, never initializing again", func(pods int) {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd := GinkgoT().TempDir()
		words := make([]string, 60)
		for i := range words {
			words[i] = "w" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		}
		full := strings.Join(words, " ")
		fake.Script(llmtest.Reply{Text: "Noted."}, llmtest.Reply{Text: full, Delay: 60 * time.Millisecond})
		cl := newCluster(fake, pods)
		rr := newRoundRobin(cl.pods)

		holder := openConn(cl.pods[1])
		sid := holder.newSession(cwd)
		Expect(holder.wait(holder.prompt(sid, "hello"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))

		c := openConn(cl.pods[0]) // initialize landed on pod 0: its id names pod 0
		c.result("session/load", loadParams(sid, cwd))
		from := len(c.events)
		turn := c.prompt(sid, "count")
		c.until("the first chunks", isAgentChunk)

		Expect(cl.pods[0].cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
		rest := c.s.rest() // the stream ends
		c.events = append(c.events, rest...)
		last := c.events[len(c.events)-1].id
		Expect(last).NotTo(BeEmpty())

		By("the client reconnects through the load balancer with Last-Event-ID")
		c.s = reconnect(rr.httpAgent, c.id, last)
		c.via = rr.httpAgent
		answer := c.wait(turn)
		Expect(answer["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(chatText(c.updatesOf(sid, from), "agent_message_chunk")).To(Equal(full), "every chunk once, in order")
		seen := map[string]bool{}
		for _, ev := range c.events {
			if ev.id == "" {
				continue
			}
			Expect(seen).NotTo(HaveKey(ev.id), "event %s delivered twice", ev.id)
			seen[ev.id] = true
		}

		By("the connection goes on without initialize, through any pod")
		Eventually(cl.pods[0].exited, 15*time.Second).Should(Receive())
		for range 3 {
			Expect(c.call("session/list", map[string]any{})).To(HaveKey("result"))
		}
		for _, p := range cl.pods[1:] {
			Expect(p.check.Violations()).To(BeEmpty())
		}
	},
		Entry("three pods: it moves to a pod other than the holder", 3),
		Entry("two pods: the only pod to move to holds the session", 2),
	)
})
