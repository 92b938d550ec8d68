package tools_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/tools"
)

var _ = Describe("the environment of tools", Label("security"), func() {
	It("lists the server's secrets and every preset's key variables", func() {
		secrets := tools.SecretEnv()
		Expect(secrets).To(ContainElements("IAC_CODE_API_KEY", "IACCODE_ACP_HTTP_TOKEN", "IAC_CODE_STORE_URL", "IAC_CODE_CLUSTER_SECRET"))
		for _, p := range llm.Presets {
			Expect(secrets).To(ContainElements(p.KeyEnv), p.Key)
		}
		Expect(tools.IsSecretEnv("OPENAI_API_KEY")).To(BeTrue())
		Expect(tools.IsSecretEnv("PATH")).To(BeFalse())
	})
	It("drops them and keeps everything else", func() {
		Expect(tools.FilterEnv([]string{"PATH=/bin", "IAC_CODE_API_KEY=sk-1", "ANTHROPIC_API_KEY=x", "HOME=/h",
			"IACCODE_ACP_HTTP_TOKEN=t", "IAC_CODE_MODEL=m", "MY_IAC_CODE_API_KEY=kept"})).
			To(Equal([]string{"PATH=/bin", "HOME=/h", "IAC_CODE_MODEL=m", "MY_IAC_CODE_API_KEY=kept"}))
	})
	It("is what bash gets", func() {
		GinkgoT().Setenv("IAC_CODE_API_KEY", "sk-should-not-leak")
		GinkgoT().Setenv("DEEPSEEK_API_KEY", "sk-deepseek-should-not-leak")
		GinkgoT().Setenv("IAC_CODE_VISIBLE", "visible")
		res := run(tools.Bash{}, tempEnv(), map[string]any{"command": "env"})
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).NotTo(ContainSubstring("should-not-leak"))
		Expect(res.Output).To(ContainSubstring("IAC_CODE_VISIBLE=visible"))
	})
})
