package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
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
		a := startAgent(agentEnv(fake, append([]string{"IAC_CODE_HOME=" + home}, extra...)...))
		a.initialize()
		return a
	}

	It("titles a session from the first text block only (Goose sends a second one with every prompt)", func() {
		a := start()
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
})
