package actors

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
)

var _ = Describe("a sub-agent's turn", func() {
	It("runs with the session's thought level, as its parent turn does", func() {
		p := &scriptedProvider{}
		s := newSessionHarness(p, GinkgoT().TempDir(), func(c *Config) { c.LLM.Provider, c.LLM.Model = "openai", "o4-mini" }, tools.Agent{})
		defer s.close()
		h := s.connect()
		sid := h.result(h.call("session/new", map[string]any{"cwd": GinkgoT().TempDir()}))["sessionId"].(string)
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"})) // the agent tool asks otherwise
		h.result(h.call("session/set_config_option", map[string]any{"sessionId": sid, "configId": "thought_level", "value": "high"}))
		p.then(callTool("a1", "agent", `{"prompt":"look","description":"look","subagent_type":"general-purpose"}`)).
			then(say("sub done")).then(say("all done"))
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "go")))["stopReason"]).To(Equal("end_turn"))
		reqs := p.requests()
		Expect(reqs).To(HaveLen(3))
		Expect(reqs[0].ThinkingBudget).To(BeNumerically(">", 0), "the parent's request has the level")
		Expect(reqs[1].ThinkingBudget).To(Equal(reqs[0].ThinkingBudget), "the sub-agent's request lost the session's thought level (budgets %d, %d, %d)",
			reqs[0].ThinkingBudget, reqs[1].ThinkingBudget, reqs[2].ThinkingBudget)
	})
})
