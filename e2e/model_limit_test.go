package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// waitNotices counts the thought chunks that told a client its request
// waits for the shared model limit.
func waitNotices(ups []map[string]any, about string) int {
	n := 0
	for _, u := range ups {
		if u["sessionUpdate"] != "agent_thought_chunk" {
			continue
		}
		if text, _ := u["content"].(map[string]any)["text"].(string); strings.Contains(text, about) {
			n++
		}
	}
	return n
}

var _ = Describe("one limit on the model for all pods", Label("e2e", "model-limit", "http", "cluster", "postgres"), func() {
	var fake *llmtest.Server
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
	})

	It("lets at most IAC_CODE_MODEL_CONCURRENCY requests reach the model over 3 pods, takes people in turn, and tells waiting turns", func() {
		t := newTenancy()
		cl := newCluster(fake, 3, append(t.env, "IACCODE_ACP_HTTP_TOKEN="+sharedToken, "IAC_CODE_MODEL_CONCURRENCY=2")...)
		fake.SetDefault(llmtest.Reply{TextChunks: []string{"one ", "two ", "three"}, Delay: 80 * time.Millisecond})
		tokens := map[string]string{"alice": t.aliceToken, "bob": t.bobToken, "carol": "carol-token-1"}
		type job struct {
			who string
			c   *acpConn
			sid string
			id  float64
		}
		var jobs []job
		for i, who := range []string{"alice", "alice", "alice", "alice", "bob", "bob", "bob", "bob", "carol", "carol", "carol", "carol"} {
			c := t.open(cl.pods[i%3].as(tokens[who]))
			jobs = append(jobs, job{who: who, c: c, sid: c.newSession(t.ws(who))})
		}
		By("12 prompts of 3 people at once")
		for i := range jobs {
			jobs[i].id = jobs[i].c.prompt(jobs[i].sid, fmt.Sprintf("PROMPT-%s-%d", jobs[i].who, i))
		}
		notices := 0
		for _, j := range jobs {
			m := j.c.wait(j.id)
			Expect(m).To(HaveKey("result"), jsonText(m))
			Expect(m["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
			notices += waitNotices(j.c.updatesOf(j.sid, 0), "Waiting for the model")
		}
		Expect(fake.MaxConcurrent()).To(BeEquivalentTo(2), "never more than 2 requests at the model at once")

		By("nobody waits for all of another's requests")
		reqs := fake.Requests()
		Expect(reqs).To(HaveLen(12))
		first, last := map[string]int{}, map[string]int{}
		for i, r := range reqs {
			for who := range tokens {
				if strings.Contains(string(r.Body), "PROMPT-"+who) {
					if _, ok := first[who]; !ok {
						first[who] = i
					}
					last[who] = i
				}
			}
		}
		Expect(first).To(HaveLen(3))
		for p := range tokens {
			Expect(first[p]).To(BeNumerically("<=", 4), "%s's first request came %d-th: %v", p, first[p], first)
			for q := range tokens {
				if p != q {
					Expect(first[p]).To(BeNumerically("<", last[q]), "%s waited for all of %s's requests", p, q)
				}
			}
		}
		Expect(notices).To(BeNumerically(">=", 5), "waiting turns tell their clients")
		m := cl.pods[0].as(sharedToken).rawMetrics() + cl.pods[1].as(sharedToken).rawMetrics() + cl.pods[2].as(sharedToken).rawMetrics()
		Expect(m).To(ContainSubstring(`iaccode_model_wait_seconds_count{reason="busy"}`))
		By("every metric of the starter Grafana dashboard is exported")
		for _, name := range regexp.MustCompile(`iaccode_[a-z_]+`).FindAllString(repoFile("deploy/grafana-dashboard.json"), -1) {
			Expect(m).To(MatchRegexp(`(?m)^`+name+`[{ ]`), "deploy/grafana-dashboard.json names %s", name)
		}
		t.expectCleanWire()
	})

	It("pauses the provider key on every pod when the model answers 429 with Retry-After, instead of each turn retrying on its own", func() {
		cl := newCluster(fake, 2, "IAC_CODE_MODEL_CONCURRENCY=4")
		fake.Script(llmtest.Reply{Status: 429, RetryAfter: "2"})
		fake.SetDefault(llmtest.Reply{Text: "Done."})
		dir := GinkgoT().TempDir()
		a, b := openConn(cl.pods[0]), openConn(cl.pods[1])
		sa, sb := a.newSession(dir), b.newSession(dir)
		first := a.prompt(sa, "A")
		Eventually(func() int { return len(fake.Requests()) }, 20*time.Second).Should(Equal(1))
		limited := fake.Requests()[0].At
		time.Sleep(200 * time.Millisecond) // the pause is recorded before the 429 is retried
		second := b.prompt(sb, "B")
		Expect(a.wait(first)).To(HaveKey("result"))
		Expect(b.wait(second)).To(HaveKey("result"))
		reqs := fake.Requests()
		Expect(reqs).To(HaveLen(3))
		for _, r := range reqs[1:] {
			Expect(r.At.Sub(limited)).To(BeNumerically(">=", 1900*time.Millisecond), "a request went during the pause")
		}
		Expect(waitNotices(b.updatesOf(sb, 0), "the provider asked to wait until")).To(Equal(1))
		Expect(cl.pods[0].metric("iaccode_model_pauses_total")).To(BeEquivalentTo(1))
		Expect(a.via.check.Violations()).To(BeEmpty())
		Expect(b.via.check.Violations()).To(BeEmpty())
	})
})
