package e2e

import (
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/store/pgtest"
)

// The stable ACP parts added in 0.2 (issue 24), over raw JSON-RPC on stdio.
var _ = Describe("stable ACP parts over stdio", Label("e2e", "acp-stable"), func() {
	var (
		fake *llmtest.Server
		home string
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		home, cwd = GinkgoT().TempDir(), GinkgoT().TempDir()
	})
	start := func(extra ...string) *agent {
		return startAgent(agentEnv(fake, append([]string{"IAC_CODE_HOME=" + home}, extra...)...))
	}

	It("titles a session from the first text block only (Goose sends a second one with every prompt)", func() {
		a := start()
		a.initialize()
		sid := a.newSession(cwd)
		from := a.mark()
		id := a.request("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{
			map[string]any{"type": "text", "text": "  "},
			map[string]any{"type": "text", "text": "Fix the login bug"},
			map[string]any{"type": "text", "text": "<context>goose: the current time is 12:00</context>"},
		}})
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		_, info := a.waitUpdate("session_info_update", from)
		Expect(info).To(HaveKeyWithValue("title", "Fix the login bug"))
		list := a.result(a.request("session/list", map[string]any{}))["sessions"].([]any)
		Expect(list[0]).To(HaveKeyWithValue("title", "Fix the login bug"))
		Expect(readMeta(home, sid)).To(HaveKeyWithValue("title", "Fix the login bug"))
		a.finish()
	})

	It("deletes a session: files and tool outputs gone, not listed, load and prompt -32002; a live one is closed first", func() {
		big := strings.Repeat(strings.Repeat("x", 99)+"\n", 800) // 80,000 characters: spilled
		Expect(os.WriteFile(filepath.Join(cwd, "big.txt"), []byte(big), 0o600)).To(Succeed())
		fake.Script(sessToolReply("r1", "read_file", map[string]any{"path": "big.txt"}), llmtest.Reply{Text: "read it"},
			llmtest.Reply{Text: "kept"})
		a := start()
		init := a.initialize()
		Expect(init["agentCapabilities"].(map[string]any)["sessionCapabilities"]).To(HaveKeyWithValue("delete", map[string]any{}))
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "read big.txt"))["stopReason"]).To(Equal("end_turn"))
		spilled, _ := filepath.Glob(filepath.Join(home, "tool-outputs", "*.txt"))
		Expect(spilled).To(HaveLen(1), "the large output was saved")
		other := a.newSession(cwd)
		Expect(a.result(a.prompt(other, "hello"))["stopReason"]).To(Equal("end_turn"))

		Expect(a.result(a.request("session/delete", map[string]any{"sessionId": sid}))).To(BeEmpty())
		Expect(filepath.Join(home, "sessions", sid)).NotTo(BeADirectory())
		Expect(spilled[0]).NotTo(BeAnExistingFile())
		var listed []string
		for _, s := range a.result(a.request("session/list", map[string]any{}))["sessions"].([]any) {
			listed = append(listed, s.(map[string]any)["sessionId"].(string))
		}
		Expect(listed).To(ConsistOf(other))
		notFound := map[string]any{"sessionId": sid, "session_id": "Session not found"}
		for _, id := range []float64{
			a.request("session/load", loadParams(sid, cwd)),
			a.prompt(sid, "still there?"),
			a.request("session/delete", map[string]any{"sessionId": sid}),
		} {
			e := a.errorOf(id)
			Expect(e["code"]).To(Equal(-32002.0))
			Expect(e["data"]).To(Equal(notFound))
		}
		Expect(a.result(a.prompt(other, "and you?"))["stopReason"]).To(Equal("end_turn"))
		a.finish()
	})

	DescribeTable("deletes a session with the TypeScript SDK client", Label("node"),
		func(postgres bool) {
			env := agentEnv(fake, "IAC_CODE_HOME="+home)
			if postgres {
				srv, err := pgtest.SharedOrSkip(Skip)
				Expect(err).NotTo(HaveOccurred())
				schema, dbURL, err := srv.NewSchema()
				Expect(err).NotTo(HaveOccurred())
				DeferCleanup(srv.DropSchema, schema)
				env = append(env, "IAC_CODE_STORE_URL="+dbURL)
			}
			run := runTSClient(env, stdioArgs("delete", cwd)...)
			Expect(run.Result["deleted"]).To(BeEmpty())
			Expect(run.Result["again"]).To(BeEmpty())
			sid := run.Result["sessionId"]
			for _, k := range []string{"rejectedLoad", "rejectedPrompt"} {
				Expect(run.Result[k]).To(HaveKeyWithValue("code", -32002.0), k)
				Expect(run.Result[k]).To(HaveKeyWithValue("data", HaveKeyWithValue("sessionId", sid)), k)
			}
			if !postgres {
				Expect(filepath.Join(home, "sessions", sid.(string))).NotTo(BeADirectory())
			}
		},
		Entry("file store", false),
		Entry("PostgreSQL store", Label("postgres"), true),
	)
})
