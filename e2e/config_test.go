package e2e

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

var _ = Describe("configuration files and authenticate", Label("e2e"), func() {
	var (
		fake *llmtest.Server
		home string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		home = GinkgoT().TempDir()
	})

	It("offers one agent-handled auth method without a key, and picks up .credentials.yml on authenticate", func() {
		a := startAgent(agentEnv(fake, "IAC_CODE_HOME="+home, "IAC_CODE_API_KEY=", "IAC_CODE_PROVIDER=openai_compatible"))
		res := a.initialize()
		methods := res["authMethods"].([]any)
		Expect(methods).To(HaveLen(1))
		m := methods[0].(map[string]any)
		Expect(m).NotTo(HaveKey("type"))
		Expect(m).To(HaveKeyWithValue("id", "api-key"))
		Expect(m["description"]).To(ContainSubstring("IAC_CODE_API_KEY"))

		e := a.errorOf(a.request("authenticate", map[string]any{"methodId": "api-key"}))
		Expect(e["code"]).To(Equal(-32000.0))
		Expect(e["data"].(map[string]any)["hint"]).To(ContainSubstring("IAC_CODE_API_KEY"))

		Expect(os.WriteFile(filepath.Join(home, ".credentials.yml"), []byte("openai_compatible: "+testAPIKey+"\n"), 0o600)).To(Succeed())
		Expect(a.result(a.request("authenticate", map[string]any{"methodId": "api-key"}))).To(BeEmpty())
		sid := a.newSession(GinkgoT().TempDir())
		Expect(a.result(a.prompt(sid, "hi"))["stopReason"]).To(Equal("end_turn"))
		Expect(fake.Requests()[0].Header.Get("Authorization")).To(Equal("Bearer " + testAPIKey))
		a.finish()
	})

	It("reads the model and base URL from settings.yml under the environment", func() {
		settings := "activeProvider: openai_compatible\nproviders:\n  openai_compatible:\n    model: from-settings\n    apiBase: " + fake.URL() + "\n"
		Expect(os.WriteFile(filepath.Join(home, "settings.yml"), []byte(settings), 0o600)).To(Succeed())
		a := startAgent(agentEnv(fake, "IAC_CODE_HOME="+home, "IAC_CODE_PROVIDER=", "IAC_CODE_MODEL=", "IAC_CODE_BASE_URL="))
		a.initialize()
		sid := a.newSession(GinkgoT().TempDir())
		Expect(a.result(a.prompt(sid, "hi"))["stopReason"]).To(Equal("end_turn"))
		Expect(fake.Requests()[0].Model()).To(Equal("from-settings"))
		a.finish()
	})

	It("refuses to start on a malformed settings file, naming file and line", func() {
		Expect(os.WriteFile(filepath.Join(home, "settings.yml"), []byte("activeProvider: openai\nproviders:\n  openai:\n    model: [a, b]\n"), 0o600)).To(Succeed())
		a := startAgent(agentEnv(fake, "IAC_CODE_HOME="+home))
		Eventually(a.eof, "10s").Should(BeClosed())
		Expect(a.cmd.Wait()).To(HaveOccurred())
		Expect(a.stderr.String()).To(ContainSubstring(filepath.Join(home, "settings.yml") + ":4"))
		Expect(a.messages()).To(BeEmpty(), "nothing on stdout")
	})
})
