package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/transport/auth/authtest"
)

// costs is a reply of the fake model that reports in+out tokens.
func costs(in, out int64) llmtest.Reply {
	return llmtest.Reply{Text: "Done.", Usage: &llmtest.Usage{PromptTokens: in, CompletionTokens: out}}
}

// nextUTCMidnight is when a daily budget counted now resets.
func nextUTCMidnight() string {
	y, m, d := time.Now().UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)
}

// budgetError expects m to be the refusal of a prompt over budget.
func budgetError(m map[string]any, period string, limit int) {
	GinkgoHelper()
	e, _ := m["error"].(map[string]any)
	Expect(e).NotTo(BeNil(), jsonText(m))
	Expect(e["code"]).To(BeEquivalentTo(-32011))
	Expect(e["message"]).To(ContainSubstring("Token budget exceeded"))
	data := e["data"].(map[string]any)
	Expect(data).To(HaveKeyWithValue("reason", "token_budget_exceeded"))
	Expect(data).To(HaveKeyWithValue("period", period))
	Expect(data).To(HaveKeyWithValue("limit", BeEquivalentTo(limit)))
	if period == "day" {
		Expect(data).To(HaveKeyWithValue("resetAt", nextUTCMidnight()))
	}
}

// rawMetrics is the pod's /metrics text.
func (a *httpAgent) rawMetrics() string {
	req, err := http.NewRequest(http.MethodGet, a.base+"/metrics", nil)
	Expect(err).NotTo(HaveOccurred())
	a.auth(req)
	resp, err := a.client.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

var _ = Describe("token budgets per person", Label("e2e", "budgets"), func() {
	var fake *llmtest.Server
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		fake.SetDefault(costs(1, 1))
	})

	It("counts one person's tokens across two pods, refuses them over budget before any model request with the reset time, and leaves others alone",
		Label("http", "cluster", "postgres"), func() {
			t := newTenancy()
			// carol (tokens file): no daily cap of her own; bob (JWT claim): 10 a day.
			Expect(os.WriteFile(t.usersFile, []byte("users:\n  - name: carol\n    token_sha256: \""+
				authtest.SHA256("carol-token-1")+"\"\n    tokens_per_day: 0\n"), 0o600)).To(Succeed())
			bobClaims := t.iss.Claims("bob", time.Hour)
			bobClaims["iac_code_tokens_per_day"] = 10
			bobToken := t.iss.Token("ES256", bobClaims)
			cl := newCluster(fake, 2, append(t.env, "IACCODE_ACP_HTTP_TOKEN="+sharedToken, "IAC_CODE_USER_TOKENS_PER_DAY=100")...)
			a0, a1 := cl.pods[0], cl.pods[1]

			By("alice spends 70 tokens on one pod and 35 on the other: both under 100 when they start")
			c0 := t.open(a0.as(t.aliceToken))
			s0 := c0.newSession(t.ws("alice"))
			fake.Script(costs(60, 10))
			Expect(c0.wait(c0.prompt(s0, "one"))).To(HaveKey("result"))
			c1 := t.open(a1.as(t.aliceToken))
			s1 := c1.newSession(t.ws("alice"))
			fake.Script(costs(30, 5))
			Expect(c1.wait(c1.prompt(s1, "two"))).To(HaveKey("result"))

			By("her next prompt, on either pod, is refused before the model sees it")
			before := len(fake.Requests())
			budgetError(c0.wait(c0.prompt(s0, "three")), "day", 100)
			budgetError(c1.wait(c1.prompt(s1, "four")), "day", 100)
			Expect(fake.Requests()).To(HaveLen(before))

			By("carol, without a daily cap of her own, and bob, under his, are served meanwhile")
			cc := t.open(a1.as("carol-token-1"))
			sc := cc.newSession(t.ws("carol"))
			fake.Script(costs(150, 10))
			Expect(cc.wait(cc.prompt(sc, "big"))).To(HaveKey("result"))
			Expect(cc.wait(cc.prompt(sc, "again"))).To(HaveKey("result"))
			cb := t.open(a0.as(bobToken))
			sb := cb.newSession(t.ws("bob"))
			fake.Script(costs(8, 4))
			Expect(cb.wait(cb.prompt(sb, "hi"))).To(HaveKey("result"))
			n := len(fake.Requests())
			budgetError(cb.wait(cb.prompt(sb, "more")), "day", 10)
			Expect(fake.Requests()).To(HaveLen(n))

			By("iac-code usage reads the shared count; /metrics counts per person and model")
			cmd := serverCmd(0, "usage", "--json")
			cmd.Env = agentEnv(fake, "IAC_CODE_STORE_URL="+cl.dbURL)
			out, err := cmd.Output()
			Expect(err).NotTo(HaveOccurred(), string(out))
			var rep struct {
				Usage []map[string]any `json:"usage"`
			}
			Expect(json.Unmarshal(out, &rep)).To(Succeed(), string(out))
			byWho := map[string]map[string]any{}
			for _, r := range rep.Usage {
				Expect(r["model"]).To(Equal("test-model"))
				byWho[r["principal"].(string)] = r
			}
			Expect(byWho["alice"]).To(HaveKeyWithValue("calls", BeEquivalentTo(2)))
			Expect(byWho["alice"]).To(HaveKeyWithValue("inputTokens", BeEquivalentTo(90)))
			Expect(byWho["alice"]).To(HaveKeyWithValue("outputTokens", BeEquivalentTo(15)))
			Expect(byWho["bob"]).To(HaveKeyWithValue("inputTokens", BeEquivalentTo(8)))
			Expect(byWho["carol"]).To(HaveKeyWithValue("calls", BeEquivalentTo(2)))
			table := serverCmd(0, "usage", "--since", "24h")
			table.Env = agentEnv(fake, "IAC_CODE_STORE_URL="+cl.dbURL)
			text, err := table.Output()
			Expect(err).NotTo(HaveOccurred())
			Expect(string(text)).To(MatchRegexp(`alice\s+test-model\s+2\s+90\s+15\s+\d+\s+105`))
			m := a0.as(sharedToken).rawMetrics() + a1.as(sharedToken).rawMetrics()
			Expect(m).To(ContainSubstring(`iaccode_model_tokens_total{model="test-model",principal="alice",type="input"} 60`))
			Expect(m).To(ContainSubstring(`iaccode_model_tokens_total{model="test-model",principal="alice",type="input"} 30`))
			for _, p := range cl.pods {
				Expect(p.stderr.String()).NotTo(ContainSubstring(t.aliceToken))
			}
			t.expectCleanWire()
		})

	It("caps the one local principal in stdio mode", Label("stdio"), func() {
		a := startAgent(agentEnv(fake, "IAC_CODE_USER_TOKENS_PER_MONTH=50"))
		defer a.finish()
		a.initialize()
		sid := a.newSession(GinkgoT().TempDir())
		fake.Script(costs(45, 10))
		Expect(a.result(a.prompt(sid, "one"))).To(HaveKeyWithValue("stopReason", "end_turn"))
		n := len(fake.Requests())
		e := a.errorOf(a.prompt(sid, "two"))
		Expect(e["code"]).To(BeEquivalentTo(-32011))
		Expect(e["data"]).To(HaveKeyWithValue("period", "month"))
		y, mo, _ := time.Now().UTC().Date()
		Expect(e["data"]).To(HaveKeyWithValue("resetAt", time.Date(y, mo+1, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)))
		Expect(fake.Requests()).To(HaveLen(n))
		Expect(strings.Count(a.stderr.String(), "token budget")).To(BeZero(), "a refusal is no server error")
		a.expectCleanWire()
	})
})
