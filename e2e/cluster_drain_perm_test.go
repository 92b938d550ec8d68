package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// answerPermission answers the permission request req on c with option.
func (c *acpConn) answerPermission(req map[string]any, option string) {
	c.via.accepted(c.id, map[string]any{"jsonrpc": "2.0", "id": req["id"],
		"result": map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": option}}})
}

// withdrawalOf matches the $/cancel_request withdrawing the request req.
func withdrawalOf(req map[string]any) func(map[string]any) bool {
	return func(m map[string]any) bool {
		p, _ := m["params"].(map[string]any)
		return m["method"] == "$/cancel_request" && p["requestId"] == req["id"]
	}
}

var _ = Describe("a turn waiting on a permission at SIGTERM", Label("e2e", "cluster", "postgres", "survive"), func() {
	It("is asked again by the new holder of each client on the other pods; the first answer applies, the other request is withdrawn, the tool runs once, the prompt ends end_turn on its connection", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd := GinkgoT().TempDir()
		fake.Script(toolCallReply("p1", "bash", map[string]any{"command": "echo ran >> once.txt"}),
			llmtest.Reply{Text: "Ran it."})
		// Pod 0 holds the session, pods 1 and 2 have a client each (a
		// stub, which takes the session when it is the one asked to
		// adopt it), pod 3 has none: any of the three may adopt the turn.
		cl := newCluster(fake, 4, "IAC_CODE_DRAIN_TIMEOUT=5s")
		holder := cl.pods[0]
		creator := openConn(holder)
		sid := creator.newSession(cwd)
		b, c := openConn(cl.pods[1]), openConn(cl.pods[2])
		b.result("session/load", loadParams(sid, cwd))
		c.result("session/load", loadParams(sid, cwd))
		// Only the other pods' clients stay: the holder's own connection
		// moves at its drain, and is not this spec's.
		Expect(creator.result("session/close", map[string]any{"sessionId": sid})).To(BeEmpty())

		By("a prompt from pod 1 asks both clients for permission")
		turn := b.prompt(sid, "run it once")
		first := b.until("permission request", methodIs("session/request_permission"))
		firstC := c.until("permission request", methodIs("session/request_permission"))

		By("SIGTERM of the holder: the request is withdrawn, then asked again by the adopter")
		stopped := time.Now()
		sigterm(holder)
		b.until("the withdrawal of the first request", withdrawalOf(first))
		c.until("the withdrawal of the first request", withdrawalOf(firstC))
		again := b.until("the request asked again", methodIs("session/request_permission"))
		againC := c.until("the request asked again", methodIs("session/request_permission"))
		GinkgoWriter.Printf("SIGTERM → asked again after %v\n", time.Since(stopped))
		Expect(again["id"]).NotTo(Equal(first["id"]), "a new request")
		Expect(again["params"]).To(HaveKeyWithValue("toolCall", HaveKeyWithValue("toolCallId", "p1")), "the same call")
		resumed := 0.0
		for _, p := range cl.pods[1:] {
			resumed += p.metric("iaccode_turns_resumed_total")
		}
		Expect(resumed).To(Equal(1.0), "one pod adopted the turn")
		Expect(filepath.Join(cwd, "once.txt")).NotTo(BeAnExistingFile(), "not run before the answer")

		By("pod 1's client answers allow first; pod 2's request is withdrawn and its late reject changes nothing")
		b.answerPermission(again, "allow_once")
		c.until("the withdrawal of the request asked again", withdrawalOf(againC))
		c.answerPermission(againC, "reject_once")
		Expect(b.wait(turn)["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(chatText(b.updatesOf(sid, 0), "agent_message_chunk")).To(HaveSuffix("Ran it."))
		out, err := os.ReadFile(filepath.Join(cwd, "once.txt"))
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.Fields(string(out))).To(Equal([]string{"ran"}), "the tool ran once")
		Expect(fake.Requests()).To(HaveLen(2), "the model asked once for the call and once after it")
		Expect(fake.MaxConcurrent()).To(BeEquivalentTo(1))
		Eventually(holder.exited, 30*time.Second).Should(Receive(BeNil()))
		for _, p := range cl.pods {
			Expect(p.check.Violations()).To(BeEmpty())
		}
	})
})
