package e2e

import (
	"encoding/json"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/store/pgtest"
)

var _ = Describe("the shared PostgreSQL store", Label("e2e", "sessions", "postgres"), func() {
	It("serves the sessions of one process to another with another home; after a kill -9 the lease expires and another process takes over", func() {
		srv, err := pgtest.SharedOrSkip(Skip)
		Expect(err).NotTo(HaveOccurred())
		schema, dbURL, err := srv.NewSchema()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(srv.DropSchema, schema)
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		fake.Script(llmtest.Reply{Text: "Noted: 42."}, llmtest.Reply{Text: "It was 42."}, llmtest.Reply{Text: "Still 42."})
		cwd := GinkgoT().TempDir()
		// Each process has its own IAC_CODE_HOME: only the database is shared.
		start := func() *agent {
			a := startAgent(agentEnv(fake, "IAC_CODE_STORE_URL="+dbURL, "IAC_CODE_LEASE_TTL=1s", "IAC_CODE_LEASE_RENEW=250ms"))
			a.initialize()
			return a
		}

		a := start()
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "Remember 42"))["stopReason"]).To(Equal("end_turn"))
		a.finish() // closing the session releases its lease
		Expect(a.stderr.String()).To(ContainSubstring("session store: PostgreSQL"))
		Expect(a.stderr.String()).NotTo(ContainSubstring(srv.Password()))

		b := start()
		res := b.result(b.request("session/list", map[string]any{"cwd": cwd}))
		Expect(res["sessions"]).To(ConsistOf(And(HaveKeyWithValue("sessionId", sid), HaveKeyWithValue("title", "Remember 42"))))
		from := b.mark()
		load := b.request("session/load", loadParams(sid, cwd))
		Expect(b.result(load)).To(HaveKey("modes"))
		Expect(chatText(b.sessionUpdates(sid, from, load), "agent_message_chunk")).To(Equal("Noted: 42."))
		Expect(b.result(b.prompt(sid, "what was it?"))["stopReason"]).To(Equal("end_turn"))
		Expect(chatTexts(lastRequest(fake))).To(Equal([]string{"Remember 42", "Noted: 42.", "what was it?"}))
		Expect(b.stderr.String()).NotTo(ContainSubstring(srv.Password()))
		Expect(b.cmd.Process.Kill()).To(Succeed()) // b still holds the session's lease
		_ = b.cmd.Wait()

		c := start()
		e := c.errorOf(c.request("session/load", loadParams(sid, cwd)))
		Expect(e["code"]).To(Equal(-32010.0), "b's lease still runs")
		Expect(e["data"]).To(HaveKeyWithValue("incarnation", incarnationOf(b)), "naming b")
		Expect(e["message"]).To(ContainSubstring("Session is open in another iac-code process (incarnation "))
		Eventually(func() map[string]any {
			return c.response(c.request("session/load", loadParams(sid, cwd)))
		}, 5*time.Second, 100*time.Millisecond).Should(HaveKey("result"), "loaded once b's lease expired")
		Expect(c.result(c.prompt(sid, "and now?"))["stopReason"]).To(Equal("end_turn"))
		Expect(chatTexts(lastRequest(fake))).To(Equal([]string{"Remember 42", "Noted: 42.", "what was it?", "It was 42.", "and now?"}))
		c.finish()
	})
})

// incarnationOf is the owner id of a's leases, from its start log line.
func incarnationOf(a *agent) string {
	for _, line := range strings.Split(a.stderr.String(), "\n") {
		var rec struct{ Message, Incarnation string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "session store: PostgreSQL" {
			return rec.Incarnation
		}
	}
	Fail("no incarnation in the log:\n" + a.stderr.String())
	return ""
}
