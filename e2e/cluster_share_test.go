package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// until reads c's stream up to the first message matching, keeps what it
// read, and returns that message.
func (c *acpConn) until(what string, match func(map[string]any) bool) map[string]any {
	GinkgoHelper()
	evs := c.s.until(what, match)
	c.events = append(c.events, evs...)
	return evs[len(evs)-1].msg
}

// turnContent are the updates that carry a turn's content (not the
// bookkeeping ones: commands, usage, session info).
func turnContent(ups []map[string]any) []map[string]any {
	var out []map[string]any
	for _, u := range ups {
		switch u["sessionUpdate"] {
		case "user_message_chunk", "agent_message_chunk", "tool_call", "tool_call_update":
			out = append(out, u)
		}
	}
	return out
}

func sigterm(a *httpAgent) { Expect(a.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed()) }

var _ = Describe("one session, several connections of one pod, held by another pod", Label("e2e", "cluster", "postgres", "shared"), func() {
	var (
		fake *llmtest.Server
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
	})

	DescribeTable("each connection gets the replay, every update of a third client's turn, the permission request (first answer wins) and its own prompt's answer",
		func(n int) {
			replies := []llmtest.Reply{{Text: "Noted: 42."},
				toolCallReply("w1", "write_file", map[string]any{"path": "shared.txt", "content": "from the team"}),
				{Text: "Written."}}
			for i := range n {
				replies = append(replies, llmtest.Reply{Text: fmt.Sprintf("Answer %d.", i)})
			}
			fake.Script(replies...)
			cl := newCluster(fake, 2)
			owner := openConn(cl.pods[0])
			sid := owner.newSession(cwd)
			Expect(owner.wait(owner.prompt(sid, "Remember 42"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))

			By(fmt.Sprintf("%d connections on the other pod load it", n))
			bs := make([]*acpConn, n)
			for i := range bs {
				bs[i] = openConn(cl.pods[1])
				bs[i].result("session/load", loadParams(sid, cwd))
				Expect(chatText(bs[i].updatesOf(sid, 0), "user_message_chunk")).To(Equal("Remember 42"), "connection %d's replay", i)
				Expect(chatText(bs[i].updatesOf(sid, 0), "agent_message_chunk")).To(Equal("Noted: 42."), "connection %d's replay", i)
			}

			By("the owner's turn asks every client for permission; each answers, the first answer wins")
			ownerFrom := len(owner.events)
			turn := owner.prompt(sid, "write shared.txt")
			owner.until("permission request", methodIs("session/request_permission"))
			froms := make([]int, n)
			reqs := make([]map[string]any, n)
			for i, b := range bs {
				froms[i] = len(b.events)
				reqs[i] = b.until("permission request", methodIs("session/request_permission"))
			}
			answer := func(b *acpConn, req map[string]any, option string) {
				b.via.accepted(b.id, map[string]any{"jsonrpc": "2.0", "id": req["id"],
					"result": map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": option}}})
			}
			answer(bs[0], reqs[0], "allow_once")
			for i, b := range bs[1:] {
				// withdrawn once the first answer won; a late answer changes nothing
				b.until("the withdrawal of the permission request", methodIs("$/cancel_request"))
				answer(b, reqs[i+1], "reject_once")
			}
			Expect(owner.wait(turn)["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
			content, err := os.ReadFile(filepath.Join(cwd, "shared.txt"))
			Expect(err).NotTo(HaveOccurred(), "the first answer, allow, won")
			Expect(string(content)).To(Equal("from the team"))
			want := turnContent(owner.updatesOf(sid, ownerFrom))
			Expect(chatText(want, "agent_message_chunk")).To(Equal("Written."))
			for i, b := range bs {
				for len(turnContent(b.updatesOf(sid, froms[i]))) < len(want) {
					b.until("an update of the turn", methodIs("session/update"))
				}
				Expect(turnContent(b.updatesOf(sid, froms[i]))).To(Equal(want), "connection %d saw every update of the turn", i)
			}

			By("each connection's own prompt is answered to it")
			for i, b := range bs {
				b.nextID = 100 * (i + 1) // ids no other connection sent
				from := len(b.events)
				Expect(b.wait(b.prompt(sid, fmt.Sprintf("question %d", i)))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
				// (the turns of the connections before it may be read first)
				Expect(chatText(b.updatesOf(sid, from), "agent_message_chunk")).To(HaveSuffix(fmt.Sprintf("Answer %d.", i)))
			}
			for _, p := range cl.pods {
				Expect(p.check.Violations()).To(BeEmpty())
			}
		},
		Entry("two connections", 2),
		Entry("five connections", 5),
	)

	DescribeTable("the holding pod goes with a prompt in flight from another pod: the prompt is answered within seconds",
		func(stop func(a *httpAgent), pods int, want string) {
			fake.Script(llmtest.Reply{Text: "Noted: 42."}, llmtest.Reply{Text: "a b c d e f", Hang: true, AfterChunks: 3},
				llmtest.Reply{Text: "Resumed.", Split: 4, Delay: 100 * time.Millisecond})
			// The hanging reply never reaches a step boundary: a SIGTERM's
			// drain cuts it after 2 s and hands the turn over.
			cl := newCluster(fake, pods, "IAC_CODE_DRAIN_TIMEOUT=2s")
			owner := openConn(cl.pods[0])
			sid := owner.newSession(cwd)
			Expect(owner.wait(owner.prompt(sid, "Remember 42"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
			b := openConn(cl.pods[1])
			b.result("session/load", loadParams(sid, cwd))
			from := len(b.events)
			turn := b.prompt(sid, "count slowly")
			b.until("first chunk", isAgentChunk)

			stopped := time.Now()
			stop(cl.pods[0])
			Expect(b.wait(turn)["result"]).To(HaveKeyWithValue("stopReason", want))
			if want == "end_turn" {
				Expect(chatText(b.updatesOf(sid, from), "agent_message_chunk")).To(HaveSuffix("Resumed."), "the adopter's resumed turn")
			}
			GinkgoWriter.Printf("the holder stopped → the prompt on the other pod answered after %v\n", time.Since(stopped))
			Expect(time.Since(stopped)).To(BeNumerically("<", 8*time.Second))
			Eventually(cl.pods[0].exited, 15*time.Second).Should(Receive())

			By("the session loads on the surviving pod")
			Eventually(func() map[string]any {
				return b.call("session/load", loadParams(sid, cwd))
			}, 30*time.Second, 500*time.Millisecond).Should(HaveKey("result"))
			Expect(cl.pods[1].check.Violations()).To(BeEmpty())
		},
		// SIGTERM: the holder's drain pauses the turn (cut at its 2 s) and
		// hands it over to the third pod; the adopter's resumed turn
		// answers the prompt to the stub's leg that followed the session
		// there.
		Entry("SIGTERM, a third pod adopts the turn", sigterm, 3, "end_turn"),
		// The only other pod holds the stub: asked to adopt the session,
		// the stub takes it, and its leg's prompt is answered by the
		// turn resumed there.
		Entry("SIGTERM, no pod but the stub's to adopt the turn", sigterm, 2, "end_turn"),
		// The survivor's recovery scan adopts the turn once the dead pod's
		// lease lapsed; the stub's leg waits for that (the store shows the
		// turn recorded).
		Entry("kill -9", func(a *httpAgent) { Expect(a.cmd.Process.Kill()).To(Succeed()) }, 2, "end_turn"),
	)
})
