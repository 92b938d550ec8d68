package e2e

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// updateShape is what a replay must reproduce of an update, in a form both
// the raw client and the SDK (which re-parses updates) agree on.
func updateShape(ups []map[string]any) []map[string]any {
	var out []map[string]any
	for _, u := range mergeUpdates(ups) {
		s := map[string]any{"sessionUpdate": u["sessionUpdate"]}
		for _, k := range []string{"text", "toolCallId", "status", "title", "kind"} {
			if v, ok := u[k]; ok {
				s[k] = v
			}
		}
		if c, ok := u["content"].([]any); ok {
			s["contentItems"] = len(c)
		}
		out = append(out, s)
	}
	return out
}

var _ = Describe("sessions on disk with the TypeScript SDK client", Label("e2e", "node", "sessions"), func() {
	var (
		fake *llmtest.Server
		home string
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		home = GinkgoT().TempDir()
		cwd = GinkgoT().TempDir()
	})

	It("prompt, restart, list shows it with its title, load replays before answering, the prompt continues the context", func() {
		Expect(os.WriteFile(filepath.Join(cwd, "todo.txt"), []byte("buy milk\n"), 0o600)).To(Succeed())
		read := sessToolReply("r1", "read_file", map[string]any{"path": "todo.txt"})
		read.Thinking, read.Text = "I should read the list.", "Let me look."
		fake.Script(read,
			llmtest.Reply{Text: "The list says: buy milk."},
			llmtest.Reply{Text: "You are welcome."},
			llmtest.Reply{Text: "Milk, as before."},
		)
		env := agentEnv(fake, "IAC_CODE_HOME="+home)
		a := startAgent(env)
		a.initialize()
		sid := a.newSession(cwd)
		from := a.mark()
		p := a.prompt(sid, "What is on my todo list?")
		Expect(a.result(p)["stopReason"]).To(Equal("end_turn"))
		p2 := a.prompt(sid, "Thanks")
		Expect(a.result(p2)["stopReason"]).To(Equal("end_turn"))
		live := append([]map[string]any{userChunk("What is on my todo list?")}, a.sessionUpdates(sid, from, p)...)
		live = append(live, userChunk("Thanks"))
		live = append(live, a.sessionUpdates(sid, a.responseIndex(p), p2)...)
		a.finish()

		run := runTSClient(env, stdioArgs("load", cwd, "--session-id", sid, "--text", "What did I need again?")...)
		for _, key := range []string{"list", "aliasList"} {
			list := run.Result[key].(map[string]any)["sessions"].([]any)
			Expect(list).To(HaveLen(1), key)
			Expect(list[0]).To(And(HaveKeyWithValue("sessionId", sid), HaveKeyWithValue("cwd", cwd),
				HaveKeyWithValue("title", "What is on my todo list?"), HaveKey("updatedAt")), key)
		}
		Expect(run.Result["load"]).To(HaveKeyWithValue("modes", HaveKeyWithValue("currentModeId", "default")))
		var replayed []map[string]any
		for _, u := range run.Result["replayed"].([]any) {
			replayed = append(replayed, u.(map[string]any))
		}
		Expect(updateShape(replayed)).To(Equal(updateShape(live)))
		Expect(run.Result["prompt"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		req := lastRequest(fake)
		Expect(chatRoles(req)).To(Equal([]string{"user", "assistant", "tool", "assistant", "user", "assistant", "user"}))
		texts := chatTexts(req)
		Expect(texts[0]).To(Equal("What is on my todo list?"))
		Expect(texts[1]).To(Equal("Let me look."))
		Expect(texts[2]).To(ContainSubstring("buy milk"))
		Expect(texts[3:]).To(Equal([]string{"The list says: buy milk.", "Thanks", "You are welcome.", "What did I need again?"}))
	})
})
