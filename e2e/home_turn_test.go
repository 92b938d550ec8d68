package e2e

import (
	"os"
	"path/filepath"
	"syscall"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

var _ = Describe("session/list across processes on one IAC_CODE_HOME", Label("e2e", "sessions"), func() {
	It("shows the turn another process runs as _meta.activeTurn; not once it ended, nor once that process was killed mid-turn", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		home, cwd := GinkgoT().TempDir(), GinkgoT().TempDir()
		write := func(id string) llmtest.Reply {
			return toolCallReply(id, "write_file", map[string]any{"path": id + ".txt", "content": "from A"})
		}
		fake.Script(write("w1"), llmtest.Reply{Text: "Written."}, write("w2"))
		env := agentEnv(fake, "IAC_CODE_HOME="+home)
		a, b := startAgent(env), startAgent(env)
		a.initialize()
		b.initialize()
		sid := a.newSession(cwd)
		turnIn := func() any {
			GinkgoHelper()
			for _, s := range b.result(b.request("session/list", map[string]any{}))["sessions"].([]any) {
				if s := s.(map[string]any); s["sessionId"] == sid {
					meta, _ := s["_meta"].(map[string]any)
					return meta["activeTurn"]
				}
			}
			Fail("session not listed by the other process")
			return nil
		}
		Expect(turnIn()).To(BeNil())

		By("a turn in process A waits for its permission answer; process B lists it")
		first := a.prompt(sid, "write w1")
		perm := a.serverRequest("session/request_permission", 0)
		active, ok := turnIn().(map[string]any)
		Expect(ok).To(BeTrue(), "activeTurn in B's list")
		Expect(active).To(HaveKeyWithValue("promptRequest", first))
		Expect(active).To(HaveKey("startedAt"))

		By("the turn ends: gone from B's list")
		a.answer(perm["id"], map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}})
		Expect(a.result(first)["stopReason"]).To(Equal("end_turn"))
		Expect(turnIn()).To(BeNil())

		By("A is killed with -9 during its next turn: its lock file still says so, B's list does not")
		second := a.prompt(sid, "write w2")
		a.serverRequest("session/request_permission", 1)
		Expect(turnIn()).To(HaveKeyWithValue("promptRequest", second))
		Expect(a.cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
		_ = a.cmd.Wait()
		<-a.eof
		lock, err := os.ReadFile(filepath.Join(home, "sessions", sid, "lock"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(lock)).To(MatchRegexp(`^\d+ turn +\n\S+ \d+\n`), "the turn a dead process left behind")
		Expect(turnIn()).To(BeNil())
		Expect(a.check.Violations()).To(BeEmpty())

		By("B loads it: recorded once, shown until B's next turn starts; the model is told")
		fake.Script(llmtest.Reply{Text: "Noted."})
		load := b.request("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
		meta, _ := b.result(load)["_meta"].(map[string]any)
		Expect(meta["activeTurn"]).To(And(HaveKeyWithValue("state", "interrupted"), HaveKeyWithValue("promptRequest", second),
			HaveKey("startedAt")))
		Expect(turnIn()).To(HaveKeyWithValue("state", "interrupted"))
		lock, err = os.ReadFile(filepath.Join(home, "sessions", sid, "lock"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(lock)).To(MatchRegexp(`^\d+ +\n$`), "the mark is cleared once recorded")
		Expect(b.result(b.prompt(sid, "what happened?"))["stopReason"]).To(Equal("end_turn"))
		Expect(turnIn()).To(BeNil())
		texts := chatTexts(lastRequest(fake))
		Expect(texts[len(texts)-2]).To(ContainSubstring("The previous turn was interrupted"))
		Expect(texts[len(texts)-2]).To(ContainSubstring("write_file (w2)"))
		b.finish()
	})
})
