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

// A turn handed over at a drain keeps its session's MCP servers (issue 29):
// the draining pod carries their configuration to the adopter, which starts
// them before the turn's next model request. The server is slow to start
// (-delay): a turn that did not wait for it would ask without its tools.

// toolRunning matches the update that shows call id running.
func toolRunning(id string) func(map[string]any) bool {
	return func(m map[string]any) bool {
		if m["method"] != "session/update" {
			return false
		}
		u, _ := m["params"].(map[string]any)["update"].(map[string]any)
		return u["toolCallId"] == id && u["status"] == "in_progress"
	}
}

var _ = Describe("a turn of a session with MCP servers at SIGTERM", Label("e2e", "cluster", "postgres", "survive"), func() {
	It("goes on at the adopter with the servers handed over: its next model request offers their tools", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd := GinkgoT().TempDir()
		fake.Script(toolCallReply("c1", "bash", map[string]any{"command": "sleep 1; echo ran >> once.txt"}),
			llmtest.Reply{Text: "Ran it."})
		// Pod 0 holds the session, pod 1 has its client (through a stub,
		// which takes the session if asked to adopt it), pod 2 has none:
		// either may adopt the turn.
		cl := newCluster(fake, 3, "IAC_CODE_DRAIN_TIMEOUT=10s")
		holder := cl.pods[0]
		server := testServer("srv", "-delay", "700ms")
		creator := openConn(holder)
		sid := creator.result("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{server}})["sessionId"].(string)
		creator.result("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"})
		b := openConn(cl.pods[1])
		b.result("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{server}})
		// Only pod 1's client stays: the holder's own connection moves at
		// its drain, and is not this spec's.
		Expect(creator.result("session/close", map[string]any{"sessionId": sid})).To(BeEmpty())

		turn := b.prompt(sid, "run it once")
		b.until("the call running", toolRunning("c1"))
		Expect(toolNamesOf(fake.Requests()[0])).To(ContainElement("mcp__srv__echo_env"))

		By("SIGTERM of the holder: the turn pauses after the call and goes on at the adopter")
		sigterm(holder)
		Expect(b.wait(turn)["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		reqs := fake.Requests()
		Expect(reqs).To(HaveLen(2), "the model asked once for the call and once after it")
		Expect(toolNamesOf(reqs[1])).To(ContainElement("mcp__srv__echo_env"), "the MCP tools did not vanish mid-turn")
		Expect(cl.pods[1].metric("iaccode_turns_resumed_total") + cl.pods[2].metric("iaccode_turns_resumed_total")).To(Equal(1.0))
		out, err := os.ReadFile(filepath.Join(cwd, "once.txt"))
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.Fields(string(out))).To(Equal([]string{"ran"}), "the call ran once")
		Eventually(holder.exited, 30*time.Second).Should(Receive(BeNil()))
		for _, p := range cl.pods {
			Expect(p.check.Violations()).To(BeEmpty())
		}
	})
})
