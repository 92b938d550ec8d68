package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// One session, several clients: two stdio processes on one home, and
// (shared_tsclient_test.go) two TypeScript SDK clients on one session.
var _ = Describe("one session, several clients", Label("e2e", "shared"), func() {
	var (
		fake *llmtest.Server
		cwd  string
		home string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
		home = GinkgoT().TempDir()
	})
	env := func(extra ...string) []string {
		return agentEnv(fake, append([]string{"IAC_CODE_HOME=" + home}, extra...)...)
	}

	It("two stdio processes on one home: a turn running in A refuses B at once naming A; idle, B gets it within 1 s; A's next prompt sees B's turn", func() {
		fake.Script(llmtest.Reply{Text: "A one"}, llmtest.Reply{Text: "counting 1 2 3", Hang: true, AfterChunks: 3},
			llmtest.Reply{Text: "B one"}, llmtest.Reply{Text: "A two"})
		a := startAgent(env())
		b := startAgent(env())
		a.initialize()
		b.initialize()
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "a1"))["stopReason"]).To(Equal("end_turn"))

		By("a turn runs in A: B's load fails at once, naming A's pid and the turn")
		from := a.mark()
		running := a.prompt(sid, "count")
		a.waitUpdate("agent_message_chunk", from)
		began := time.Now()
		e := b.errorOf(b.request("session/load", loadParams(sid, cwd)))
		took := time.Since(began)
		Expect(took).To(BeNumerically("<", 500*time.Millisecond), "at once, not after a wait")
		Expect(e["code"]).To(Equal(-32010.0))
		Expect(e["message"]).To(And(ContainSubstring("another iac-code process"), ContainSubstring("a turn is running there")))
		Expect(e["data"]).To(And(HaveKeyWithValue("pid", float64(a.cmd.Process.Pid)), HaveKeyWithValue("reason", "session_turn_running")))
		GinkgoWriter.Printf("B refused in %v while A runs a turn\n", took)

		By("A's turn ends: B loads the session within 1 s and prompts")
		a.notify("session/cancel", map[string]any{"sessionId": sid})
		Expect(a.result(running)["stopReason"]).To(Equal("cancelled"))
		began = time.Now()
		Expect(b.result(b.request("session/load", loadParams(sid, cwd)))).To(HaveKey("modes"))
		took = time.Since(began)
		Expect(took).To(BeNumerically("<", time.Second))
		GinkgoWriter.Printf("B loaded the session idle in A in %v\n", took)
		Expect(b.result(b.prompt(sid, "b1"))["stopReason"]).To(Equal("end_turn"))

		By("A's next prompt takes it back with B's turn in its model request")
		Expect(a.result(a.prompt(sid, "a2"))["stopReason"]).To(Equal("end_turn"))
		texts := chatTexts(lastRequest(fake))
		Expect(texts[:2]).To(Equal([]string{"a1", "A one"}))
		Expect(texts[len(texts)-3:]).To(Equal([]string{"b1", "B one", "a2"}))
		a.finish()
		b.finish()
		expectConsecutive(historySeqs(historyPath(home, sid)))
	})

	It("acp-factory: loadSession in a second agent process while the first still runs, then both go on", Label("node"), func() {
		fake.Script(llmtest.Reply{Text: "A one"}, llmtest.Reply{Text: "B one"}, llmtest.Reply{Text: "A two"})
		cmd := exec.Command("node", filepath.Join(nodeDir, "acp-factory-load.mjs"), "--bin", binPath, "--cwd", cwd)
		cmd.Env = env()
		var stdout bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, GinkgoWriter
		_ = cmd.Run() // a failed flow exits 1; its JSON line says why
		var run struct {
			OK     bool     `json:"ok"`
			Error  string   `json:"error"`
			LoadMs float64  `json:"loadMs"`
			Texts  []string `json:"texts"`
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		Expect(json.Unmarshal([]byte(lines[len(lines)-1]), &run)).To(Succeed(), "output: %s", stdout.String())
		Expect(run.OK).To(BeTrue(), "acp-factory flow failed: %s", run.Error)
		GinkgoWriter.Printf("acp-factory: loadSession in the second process took %v ms\n", run.LoadMs)
		Expect(run.LoadMs).To(BeNumerically("<", 1000))
		// acp-factory hands B's first prompt the load's replay too: A's answer, then B's
		Expect(run.Texts).To(Equal([]string{"A one", "A one" + "B one", "A two"}))
		Expect(chatTexts(lastRequest(fake))).To(Equal([]string{"first from A", "A one", "then B", "B one", "back to A"}))
	})
})

var _ = Describe("one session shared across pods", Label("e2e", "shared", "cluster"), func() {
	It("kill -9 of the pod holding it: the other pod's client prompts on, with everything completed before", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd := GinkgoT().TempDir()
		fake.Script(llmtest.Reply{Text: "Noted: 42."}, llmtest.Reply{Text: "Seen from B."}, llmtest.Reply{Text: "Still 42."})
		cl := newCluster(fake, 2)
		a, b := openConn(cl.pods[0]), openConn(cl.pods[1])
		sid := a.newSession(cwd)
		Expect(a.wait(a.prompt(sid, "Remember 42"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		b.result("session/load", loadParams(sid, cwd))
		Expect(b.wait(b.prompt(sid, "what do you see?"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		// A's stream has B's turn: shared, not moved
		from := len(a.events)
		a.events = append(a.events, a.s.until("B's turn on A's stream", func(m map[string]any) bool {
			u := updateOf(m)
			return u != nil && u["sessionUpdate"] == "usage_update"
		})...)
		Expect(chatText(a.updatesOf(sid, from), "user_message_chunk")).To(Equal("what do you see?"))
		Expect(chatText(a.updatesOf(sid, from), "agent_message_chunk")).To(Equal("Seen from B."))

		Expect(cl.pods[0].check.Violations()).To(BeEmpty(), "schema violations on the holder's wire before the kill")
		Expect(cl.pods[0].check.Passed).To(BeNumerically(">", 0))
		killed := time.Now()
		Expect(cl.pods[0].cmd.Process.Kill()).To(Succeed())
		<-cl.pods[0].exited
		var r map[string]any
		Eventually(func() map[string]any {
			r = b.wait(b.prompt(sid, "and now?"))
			return r
		}, 20*time.Second, 200*time.Millisecond).Should(HaveKeyWithValue("result", HaveKeyWithValue("stopReason", "end_turn")))
		GinkgoWriter.Printf("kill -9 of the holder → B's next prompt served on B after %v\n", time.Since(killed))
		Expect(chatTexts(lastRequest(fake))).To(Equal([]string{"Remember 42", "Noted: 42.", "what do you see?", "Seen from B.", "and now?"}))
		Expect(cl.pods[1].check.Violations()).To(BeEmpty(), "schema violations on the other pod's wire")
		Expect(cl.pods[1].check.Passed).To(BeNumerically(">", 0))
	})
})
