package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/transport/auth/authtest"
)

// sharedToken is the deployment's static token (principal "default").
const sharedToken = "shared-token-e2e-5c2f"

// as is a view of the agent that sends every request with token.
func (a *httpAgent) as(token string) *httpAgent {
	b := *a
	b.token = token
	return &b
}

// tenancy is a deployment for several people: JWTs of a test identity
// provider served on loopback, a tokens file, a workspace root per user.
type tenancy struct {
	iss        *authtest.Issuer
	usersFile  string
	wsRoot     string
	env        []string
	aliceToken string
	bobToken   string
	checks     []*wireChecker
}

// open is openConn with a wire checker of the connection's own: request ids
// restart at 1 on every connection, so one checker shared by several would
// check an answer against another connection's request. session/fork is
// unstable (not in the v1 schema); its answer is checked as session/new's
// here, and against the unstable schema by checkFork.
func (t *tenancy) open(via *httpAgent) *acpConn {
	v := *via
	v.check = newWireChecker(schemaV1)
	v.check.checkAs("session/fork", "session/new")
	t.checks = append(t.checks, v.check)
	return openConn(&v)
}

// expectCleanWire asserts that every frame the connections opened by open
// received was valid ACP v1.
func (t *tenancy) expectCleanWire() {
	for _, c := range t.checks {
		ExpectWithOffset(1, c.Violations()).To(BeEmpty(), "schema violations")
		ExpectWithOffset(1, c.Passed).To(BeNumerically(">", 0))
	}
}

// checkFork asserts that the answer to the session/fork request id on c is
// valid as the unstable schema's ForkSessionResponse.
func checkFork(c *acpConn, id float64) {
	unstable := newWireChecker(loadSchema(filepath.Join(nodeDir, "node_modules", "@agentclientprotocol", "sdk", "schema", "v1", "schema.unstable.json")))
	unstable.ClientSent([]byte(`{"jsonrpc":"2.0","id":` + jsonText(id) + `,"method":"session/fork"}`))
	for _, ev := range c.events {
		if ev.msg["id"] == id && ev.msg["method"] == nil {
			for _, l := range ev.lines {
				if v, ok := strings.CutPrefix(l, "data: "); ok {
					unstable.ServerSent([]byte(v))
				}
			}
		}
	}
	ExpectWithOffset(1, unstable.Violations()).To(BeEmpty())
	ExpectWithOffset(1, unstable.Passed).To(Equal(1))
}

func newTenancy() *tenancy {
	t := &tenancy{iss: authtest.NewIssuer("https://idp.e2e.test", "iac-code-e2e")}
	url := t.iss.Serve()
	DeferCleanup(t.iss.Close)
	dir := GinkgoT().TempDir()
	t.usersFile = filepath.Join(dir, "users.yaml")
	writeUsersFile(t.usersFile, "carol", "carol-token-1")
	t.wsRoot = filepath.Join(dir, "ws")
	for _, u := range []string{"alice", "bob", "default", "carol"} {
		Expect(os.MkdirAll(filepath.Join(t.wsRoot, u, "proj"), 0o755)).To(Succeed())
	}
	t.env = []string{"IAC_CODE_JWT_JWKS_URL=" + url, "IAC_CODE_JWT_ISSUER=" + t.iss.Name,
		"IAC_CODE_JWT_AUDIENCE=" + t.iss.Audience, "IAC_CODE_AUTH_TOKENS_FILE=" + t.usersFile,
		"IAC_CODE_WORKSPACE_ROOT=" + filepath.Join(t.wsRoot, "{user}")}
	t.aliceToken = t.iss.Token("ES256", t.iss.Claims("alice", time.Hour))
	t.bobToken = t.iss.Token("EdDSA", t.iss.Claims("bob", time.Hour))
	return t
}

func (t *tenancy) ws(user string) string { return filepath.Join(t.wsRoot, user, "proj") }

func writeUsersFile(path string, kv ...string) {
	var b strings.Builder
	b.WriteString("users:\n")
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString("  - name: " + kv[i] + "\n    token_sha256: \"" + authtest.SHA256(kv[i+1]) + "\"\n")
	}
	Expect(os.WriteFile(path+".tmp", []byte(b.String()), 0o600)).To(Succeed())
	Expect(os.Rename(path+".tmp", path)).To(Succeed())
}

var answerID = regexp.MustCompile(`"id":[0-9]+`)

// rawAnswer is the data line of the answer to id, with its id blanked: two
// answers that differ only by id compare equal.
func (c *acpConn) rawAnswer(id float64) string {
	evs := c.s.until("answer "+jsonText(id), respTo(id))
	c.events = append(c.events, evs...)
	for _, l := range evs[len(evs)-1].lines {
		if v, ok := strings.CutPrefix(l, "data: "); ok {
			return answerID.ReplaceAllString(v, `"id":_`)
		}
	}
	Fail("answer without data")
	return ""
}

// refusals sends every session request B may try on sid, and returns the
// HTTP status and answer of each, by method.
func refusals(c *acpConn, sid, cwd string) map[string]string {
	out := map[string]string{}
	for _, r := range []struct {
		method string
		params map[string]any
	}{
		{"session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}},
		{"session/resume", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}},
		{"session/fork", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}},
		{"session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "hi"}}}},
		{"session/cancel", map[string]any{"sessionId": sid}},
		{"session/close", map[string]any{"sessionId": sid}},
		{"session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}},
		{"session/set_config_option", map[string]any{"sessionId": sid, "configId": "mode", "value": "plan"}},
		{"session/delete", map[string]any{"sessionId": sid}},
	} {
		c.nextID++
		resp := c.via.post(c.id, jrpc(c.nextID, r.method, r.params))
		out[r.method] = http.StatusText(resp.status) + " " + string(resp.body) + " " + c.rawAnswer(float64(c.nextID))
	}
	return out
}

// tenancySpecs are the two-principal checks, on one pod or behind the
// round-robin proxy of two.
func tenancySpecs(t *tenancy, front func() *httpAgent) {
	alice, bob := front().as(t.aliceToken), front().as(t.bobToken)
	ca := t.open(alice)
	sid := ca.newSession(t.ws("alice"))
	ExpectWithOffset(1, ca.wait(ca.prompt(sid, "hello"))).To(HaveKey("result"))

	cb := t.open(bob)
	By("B's list does not show A's session; A's does")
	Expect(jsonText(cb.result("session/list", map[string]any{}))).NotTo(ContainSubstring(sid))
	Expect(jsonText(ca.result("session/list", map[string]any{}))).To(ContainSubstring(sid))

	By("every request of B on A's session is answered as for a session that does not exist")
	const unknown = "0b0b0b0b-0000-4000-8000-000000000000"
	got := refusals(cb, sid, t.ws("bob"))
	want := refusals(cb, unknown, t.ws("bob"))
	Expect(got).To(HaveLen(9))
	for m, w := range want {
		// the same answer, naming the id asked for (data.sessionId)
		Expect(strings.ReplaceAll(got[m], sid, unknown)).To(Equal(w), m)
		Expect(w).To(ContainSubstring(`"error"`), m)
	}

	By("B cannot use A's connection id: 403, not executed")
	for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
		var body []byte
		if method == http.MethodPost {
			body, _ = json.Marshal(jrpc(99, "session/close", map[string]any{"sessionId": sid}))
		}
		r := bob.do(method, body, "Acp-Connection-Id", ca.id, "Accept", "text/event-stream")
		Expect(r.status).To(Equal(http.StatusForbidden), method+" "+string(r.body))
	}

	By("B cannot open a session in A's workspace, outside its own, or through a symlink into A's")
	link := filepath.Join(t.ws("bob"), "to-alice")
	_ = os.Symlink(t.ws("alice"), link)
	for _, cwd := range []string{t.ws("alice"), GinkgoT().TempDir(), link, t.ws("bob") + "/../../alice/proj"} {
		m := cb.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})
		e, _ := m["error"].(map[string]any)
		Expect(e).NotTo(BeNil(), cwd)
		Expect(e["code"]).To(BeEquivalentTo(-32602))
		Expect(e["message"]).To(ContainSubstring("workspace root"))
	}
	Expect(cb.newSession(t.ws("bob"))).NotTo(BeEmpty())

	By("A's own flows all work: prompt, set mode, fork, list, close, load, resume")
	Expect(ca.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"})).To(HaveKey("result"))
	forkID := ca.send("session/fork", map[string]any{"sessionId": sid, "cwd": t.ws("alice"), "mcpServers": []any{}})
	forkAnswer := ca.wait(forkID)
	Expect(forkAnswer).To(HaveKey("result"))
	checkFork(ca, forkID)
	fork := forkAnswer["result"].(map[string]any)["sessionId"].(string)
	Expect(jsonText(ca.result("session/list", map[string]any{}))).To(ContainSubstring(fork))
	Expect(ca.call("session/close", map[string]any{"sessionId": sid})).To(HaveKey("result"))
	Expect(ca.call("session/load", map[string]any{"sessionId": sid, "cwd": t.ws("alice"), "mcpServers": []any{}})).To(HaveKey("result"))
	Expect(ca.wait(ca.prompt(sid, "again"))).To(HaveKey("result"))
	ca2 := t.open(alice)
	Expect(ca2.call("session/resume", map[string]any{"sessionId": fork, "cwd": t.ws("alice"), "mcpServers": []any{}})).To(HaveKey("result"))
	t.expectCleanWire()
	Expect(front().check.Violations()).To(BeEmpty())
}

var _ = Describe("tenancy: identities, owned sessions, workspaces", Label("e2e", "tenancy", "http"), func() {
	var (
		fake *llmtest.Server
		t    *tenancy
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		fake.SetDefault(llmtest.Reply{Text: "Done."})
		t = newTenancy()
	})

	It("keeps two principals apart on one pod; bad JWTs get 401; tokens rotate and are revoked without a restart", func() {
		a := startHTTPAgent(agentEnv(fake, t.env...), sharedToken)
		tenancySpecs(t, func() *httpAgent { return a })

		By("each bad JWT gets 401")
		cl := func(user string) jwt.MapClaims { return t.iss.Claims(user, time.Hour) }
		expired, early, noUser := cl("mallory"), cl("mallory"), cl("mallory")
		expired["exp"] = time.Now().Add(-time.Hour).Unix()
		early["nbf"] = time.Now().Add(time.Hour).Unix()
		delete(noUser, "sub")
		bad := map[string]string{
			"alg none":                 t.iss.None(cl("alice")),
			"HMAC with the public key": t.iss.HMACWithPublicKey(cl("alice")),
			"unknown kid":              t.iss.WithKid("nobody", cl("alice")),
			"foreign key":              authtest.Stranger(cl("alice")),
			"expired":                  t.iss.Token("RS256", expired),
			"not yet valid":            t.iss.Token("RS256", early),
			"no user claim":            t.iss.Token("RS256", noUser),
			"garbage":                  "not-a-token",
		}
		for what, tok := range bad {
			r := a.as(tok).post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1}))
			Expect(r.status).To(Equal(http.StatusUnauthorized), what)
			Expect(r.header.Get("WWW-Authenticate")).To(HavePrefix("Bearer"))
		}

		By("a tokens-file user; rotation and revocation take effect within 10 s")
		carol := a.as("carol-token-1")
		cc := openConn(carol)
		Expect(cc.newSession(t.ws("carol"))).NotTo(BeEmpty())
		writeUsersFile(t.usersFile, "carol", "carol-token-2")
		Eventually(func() int {
			return carol.post(cc.id, jrpc(50, "session/list", map[string]any{})).status
		}, 10*time.Second, 200*time.Millisecond).Should(Equal(http.StatusUnauthorized), "revoked token refused on its open connection")
		rotated := a.as("carol-token-2")
		Expect(rotated.post(cc.id, jrpc(51, "session/list", map[string]any{})).status).To(Equal(http.StatusAccepted))
		cc.wait(51)
		Expect(openConn(rotated).id).NotTo(BeEmpty())

		By("a malformed reload keeps the previous users")
		Expect(os.WriteFile(t.usersFile, []byte("users: [\n"), 0o600)).To(Succeed())
		Eventually(a.stderr.String, 10*time.Second, 100*time.Millisecond).Should(ContainSubstring("tokens file not reloaded"))
		Expect(rotated.post(cc.id, jrpc(52, "session/list", map[string]any{})).status).To(Equal(http.StatusAccepted))

		By("the audit log has the refusals, and no credential appears in any output")
		logs := a.stderr.String()
		Expect(logs).To(ContainSubstring(`"audit":true`))
		Expect(logs).To(MatchRegexp(`"audit":true[^\n]*"outcome":"unauthenticated"`))
		Expect(logs).To(MatchRegexp(`"audit":true[^\n]*"outcome":"not_owner"`))
		Expect(logs).To(MatchRegexp(`"audit":true[^\n]*"outcome":"forbidden"`))
		for _, event := range []string{"session new", "session fork", "session load", "session resume", "session close"} {
			Expect(logs).To(MatchRegexp(`"audit":true[^\n]*"principal":"alice"[^\n]*"message":"`+event+`"`), event)
		}
		for _, secret := range append([]string{sharedToken, t.aliceToken, t.bobToken, "carol-token-1", "carol-token-2"}, values(bad)...) {
			if len(secret) > 8 {
				Expect(logs).NotTo(ContainSubstring(secret))
			}
		}
	})

	It("keeps two principals apart on two pods sharing PostgreSQL behind the round-robin proxy", Label("cluster", "postgres"), func() {
		cl := newCluster(fake, 2, append(t.env, "IACCODE_ACP_HTTP_TOKEN="+sharedToken)...)
		lb := newRoundRobin(cl.pods)
		tenancySpecs(t, func() *httpAgent { return lb.httpAgent })
		for _, p := range cl.pods {
			Expect(p.stderr.String()).NotTo(ContainSubstring(t.aliceToken))
			Expect(p.stderr.String()).NotTo(ContainSubstring(t.bobToken))
		}
	})

	It("holds each user to its quotas without starving another: connections (429) and running prompts (-32011)", func() {
		a := startHTTPAgent(agentEnv(fake, append(t.env, "IAC_CODE_MAX_CONNECTIONS_PER_USER=2", "IAC_CODE_MAX_TURNS_PER_USER=1")...), sharedToken)
		alice, bob := a.as(t.aliceToken), a.as(t.bobToken)
		c1, c2 := t.open(alice), t.open(alice)
		r := alice.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1}))
		Expect(r.status).To(Equal(http.StatusTooManyRequests), string(r.body))
		Expect(r.header.Get("Retry-After")).NotTo(BeEmpty())
		Expect(string(r.body)).To(ContainSubstring("limit 2"))
		cb := t.open(bob)

		s1, s2 := c1.newSession(t.ws("alice")), c2.newSession(t.ws("alice"))
		Expect(c1.wait(c1.prompt(s1, "warm up"))).To(HaveKey("result"))
		fake.Script(llmtest.Reply{Text: "a b c d e f", Hang: true, AfterChunks: 3})
		first := c1.prompt(s1, "long one")
		c1.s.until("first chunk", isAgentChunk)
		m := c2.call("session/prompt", map[string]any{"sessionId": s2, "prompt": []any{map[string]any{"type": "text", "text": "second"}}})
		e, _ := m["error"].(map[string]any)
		Expect(e).NotTo(BeNil(), jsonText(m))
		Expect(e["code"]).To(BeEquivalentTo(-32011))
		Expect(e["message"]).To(ContainSubstring("limit 1"))

		By("another user is served meanwhile")
		sb := cb.newSession(t.ws("bob"))
		Expect(cb.wait(cb.prompt(sb, "hi"))).To(HaveKey("result"))

		By("once the running prompt ends, the user may prompt again; a closed connection frees its slot")
		// session/cancel is a notification: no id, no answer
		c1.via.accepted(c1.id, jrpc(nil, "session/cancel", map[string]any{"sessionId": s1}))
		Expect(c1.wait(first)["result"]).To(HaveKeyWithValue("stopReason", "cancelled"))
		Expect(c2.wait(c2.prompt(s2, "now"))).To(HaveKey("result"))
		Expect(alice.do(http.MethodDelete, nil, "Acp-Connection-Id", c2.id).status).To(Equal(http.StatusOK))
		Expect(t.open(alice).id).NotTo(BeEmpty())
		t.expectCleanWire()
		Expect(a.check.Violations()).To(BeEmpty())
	})

	It("refuses to start on a malformed tokens file, naming file and line", func() {
		Expect(os.WriteFile(t.usersFile, []byte("users:\n  - name: x\n    token_sha256: nope\n"), 0o600)).To(Succeed())
		cmd := serverCmd(0, "acp", "--transport", "http", "--port", freePort())
		cmd.Env = agentEnv(fake, t.env...)
		out, err := cmd.CombinedOutput()
		Expect(err).To(HaveOccurred())
		Expect(string(out)).To(ContainSubstring(t.usersFile + ":3: token_sha256 must be 64 hex digits"))
	})
})

func values(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
