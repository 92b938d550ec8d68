package auth_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/transport/auth"
	"github.com/iac-code/iac-code/transport/auth/authtest"
)

func bearer(t string) []byte { return []byte("Bearer " + t) }

func writeUsers(path string, users ...string) {
	var b bytes.Buffer
	b.WriteString("users:\n")
	for i := 0; i+1 < len(users); i += 2 {
		b.WriteString("  - name: " + users[i] + "\n    token_sha256: \"" + authtest.SHA256(users[i+1]) + "\"\n")
	}
	Expect(os.WriteFile(path+".tmp", b.Bytes(), 0o600)).To(Succeed())
	Expect(os.Rename(path+".tmp", path)).To(Succeed())
}

var _ = Describe("tokens file", func() {
	var path string
	BeforeEach(func() { path = filepath.Join(GinkgoT().TempDir(), "tokens.yaml") })

	It("resolves each token to its user and refuses unknown ones", func() {
		writeUsers(path, "user-a", "tok-a", "user-b", "tok-b", "user-a", "tok-a2")
		f, err := auth.LoadTokenFile(path, zerolog.Nop())
		Expect(err).NotTo(HaveOccurred())
		c := &auth.Chain{File: f}
		for tok, want := range map[string]string{"tok-a": "user-a", "tok-b": "user-b", "tok-a2": "user-a"} {
			Expect(c.Authenticate(bearer(tok))).To(Equal(want))
		}
		_, err = c.Authenticate(bearer("tok-c"))
		Expect(err).To(MatchError(auth.ErrUnknownToken))
		for _, h := range []string{"", "Bearer", "Bearer ", "Basic dG9rLWE=", "tok-a", "Bearer tok a"} {
			_, err = c.Authenticate([]byte(h))
			Expect(err).To(MatchError(auth.ErrNoCredential), h)
		}
		Expect(c.Authenticate([]byte("  bearer   tok-b  "))).To(Equal("user-b"))
	})

	DescribeTable("stops at start on a malformed file with file:line: reason",
		func(content string, line int, reason string) {
			Expect(os.WriteFile(path, []byte(content), 0o600)).To(Succeed())
			_, err := auth.LoadTokenFile(path, zerolog.Nop())
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(HavePrefix(path + ":" + itoa(line) + ": "))
			Expect(err.Error()).To(ContainSubstring(reason))
		},
		Entry("bad hex", "users:\n  - name: a\n    token_sha256: \"xyz\"\n", 3, "64 hex digits"),
		Entry("plain token instead of a hash", "users:\n  - name: a\n    token: secret\n", 3, "unknown key"),
		Entry("bad name", "users:\n  - name: ../b\n    token_sha256: \""+authtest.SHA256("x")+"\"\n", 2, "invalid user name"),
		Entry("no users key", "people: []\n", 1, "unknown key"),
		Entry("users not a list", "users: 3\n", 1, "must be a list"),
		Entry("missing hash", "users:\n  - name: a\n", 2, "without 'token_sha256'"),
		Entry("duplicate hash", "users:\n  - name: a\n    token_sha256: \""+authtest.SHA256("x")+"\"\n  - name: b\n    token_sha256: \""+authtest.SHA256("x")+"\"\n", 4, "twice"),
		Entry("broken YAML", "users:\n  - name: a\n\ttoken_sha256: x\n", 2, "invalid YAML"),
	)

	It("takes rotation and revocation on reload, and keeps the previous users on a bad one", func() {
		writeUsers(path, "user-a", "tok-a")
		f, err := auth.LoadTokenFile(path, zerolog.Nop())
		Expect(err).NotTo(HaveOccurred())
		c := &auth.Chain{File: f}
		Expect(f.Reload()).To(BeFalse(), "unchanged")

		writeUsers(path, "user-a", "tok-a-new", "user-b", "tok-b")
		Expect(f.Reload()).To(BeTrue())
		Expect(c.Authenticate(bearer("tok-a-new"))).To(Equal("user-a"))
		_, err = c.Authenticate(bearer("tok-a"))
		Expect(err).To(MatchError(auth.ErrUnknownToken), "revoked")

		Expect(os.WriteFile(path, []byte("users:\n  - name: x\n    token_sha256: nope\n"), 0o600)).To(Succeed())
		Expect(f.Reload()).To(BeFalse())
		Expect(c.Authenticate(bearer("tok-b"))).To(Equal("user-b"), "previous good contents kept")
		Expect(os.Remove(path)).To(Succeed())
		Expect(f.Reload()).To(BeFalse())
		Expect(c.Authenticate(bearer("tok-b"))).To(Equal("user-b"))
	})
})

var _ = Describe("JWT", func() {
	var (
		iss *authtest.Issuer
		v   *auth.JWTVerifier
		url string
	)
	BeforeEach(func() {
		iss = authtest.NewIssuer("https://idp.test", "iac-code")
		url = iss.Serve()
		DeferCleanup(iss.Close)
		var err error
		v, err = auth.NewJWTVerifier(auth.JWTConfig{JWKSURL: url, Issuer: iss.Name, Audience: iss.Audience}, zerolog.Nop())
		Expect(err).NotTo(HaveOccurred())
	})

	It("accepts RS256, ES256 and EdDSA tokens of the key set", func() {
		for _, alg := range []string{"RS256", "ES256", "EdDSA"} {
			Expect(v.Verify([]byte(iss.Token(alg, iss.Claims("user-"+alg, time.Minute))))).To(Equal("user-" + alg))
		}
	})

	It("reads the user from the configured claim", func() {
		v, err := auth.NewJWTVerifier(auth.JWTConfig{JWKSURL: url, Issuer: iss.Name, Audience: iss.Audience,
			UserClaim: "preferred_username"}, zerolog.Nop())
		Expect(err).NotTo(HaveOccurred())
		cl := iss.Claims("subject-1", time.Minute)
		cl["preferred_username"] = "alice"
		Expect(v.Verify([]byte(iss.Token("ES256", cl)))).To(Equal("alice"))
		_, err = v.Verify([]byte(iss.For("subject-1")))
		Expect(err).To(MatchError(auth.ErrBadJWT))
	})

	DescribeTable("refuses", func(mint func() string) {
		_, err := v.Verify([]byte(mint()))
		Expect(err).To(MatchError(auth.ErrBadJWT))
		c := &auth.Chain{JWT: v}
		_, err = c.Authenticate(bearer(mint()))
		Expect(err).To(HaveOccurred())
	},
		Entry("alg none", func() string { return iss.None(iss.Claims("a", time.Minute)) }),
		Entry("HMAC signed with the public key", func() string { return iss.HMACWithPublicKey(iss.Claims("a", time.Minute)) }),
		Entry("unknown kid", func() string { return iss.WithKid("nobody", iss.Claims("a", time.Minute)) }),
		Entry("a key not in the set", func() string { return authtest.Stranger(iss.Claims("a", time.Minute)) }),
		Entry("expired beyond the leeway", func() string {
			c := iss.Claims("a", time.Minute)
			c["exp"] = time.Now().Add(-time.Minute).Unix()
			return iss.Token("RS256", c)
		}),
		Entry("not valid yet beyond the leeway", func() string {
			c := iss.Claims("a", time.Hour)
			c["nbf"] = time.Now().Add(time.Minute).Unix()
			return iss.Token("ES256", c)
		}),
		Entry("without exp", func() string {
			c := iss.Claims("a", time.Minute)
			delete(c, "exp")
			return iss.Token("RS256", c)
		}),
		Entry("another issuer", func() string {
			c := iss.Claims("a", time.Minute)
			c["iss"] = "https://evil.test"
			return iss.Token("RS256", c)
		}),
		Entry("another audience", func() string {
			c := iss.Claims("a", time.Minute)
			c["aud"] = "other-service"
			return iss.Token("EdDSA", c)
		}),
		Entry("no user claim", func() string {
			c := iss.Claims("a", time.Minute)
			delete(c, "sub")
			return iss.Token("RS256", c)
		}),
		Entry("the operator's principal as the user claim", func() string {
			return iss.Token("RS256", iss.Claims(auth.Default, time.Minute))
		}),
		Entry("a user claim that cannot be a principal", func() string {
			return iss.Token("RS256", iss.Claims("../../etc", time.Minute))
		}),
		Entry("a tampered payload", func() string {
			t := iss.For("a")
			other := iss.For("b")
			return t[:bytes.IndexByte([]byte(t), '.')] + other[bytes.IndexByte([]byte(other), '.'):bytes.LastIndexByte([]byte(other), '.')] + t[bytes.LastIndexByte([]byte(t), '.'):]
		}),
	)

	It("accepts exp and nbf within the leeway", func() {
		c := iss.Claims("a", time.Minute)
		c["exp"] = time.Now().Add(-5 * time.Second).Unix()
		Expect(v.Verify([]byte(iss.Token("RS256", c)))).To(Equal("a"))
		c = iss.Claims("a", time.Minute)
		c["nbf"] = time.Now().Add(5 * time.Second).Unix()
		Expect(v.Verify([]byte(iss.Token("RS256", c)))).To(Equal("a"))
	})

	It("fetches the key set again on an unknown kid at most once per interval", func() {
		before := iss.Fetches.Load()
		for range 5 {
			_, err := v.Verify([]byte(iss.WithKid("rotated", iss.Claims("a", time.Minute))))
			Expect(err).To(HaveOccurred())
		}
		Expect(iss.Fetches.Load() - before).To(BeNumerically("<=", 1))
		// A fresh verifier (no recent fetch) refreshes at once.
		v2, err := auth.NewJWTVerifier(auth.JWTConfig{JWKSURL: url, Issuer: iss.Name, Audience: iss.Audience,
			MinRefresh: time.Millisecond}, zerolog.Nop())
		Expect(err).NotTo(HaveOccurred())
		before = iss.Fetches.Load()
		time.Sleep(2 * time.Millisecond)
		_, err = v2.Verify([]byte(iss.WithKid("rotated", iss.Claims("a", time.Minute))))
		Expect(err).To(HaveOccurred())
		Expect(iss.Fetches.Load() - before).To(Equal(int64(1)))
	})

	It("checks tokens of known keys while a refresh for an unknown kid waits on the identity provider", func() {
		release := make(chan struct{})
		var fetches atomic.Int64
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if fetches.Add(1) > 1 {
				<-release // the provider hangs on the refresh
			}
			_, _ = w.Write(iss.JWKS())
		}))
		DeferCleanup(slow.Close)
		DeferCleanup(func() { close(release) })
		vs, err := auth.NewJWTVerifier(auth.JWTConfig{JWKSURL: slow.URL, Issuer: iss.Name, Audience: iss.Audience,
			MinRefresh: time.Millisecond}, zerolog.Nop())
		Expect(err).NotTo(HaveOccurred())
		time.Sleep(2 * time.Millisecond)
		go func() { _, _ = vs.Verify([]byte(iss.WithKid("rotated", iss.Claims("a", time.Minute)))) }()
		Eventually(fetches.Load).Should(Equal(int64(2)), "the refresh started")
		start := time.Now()
		Expect(vs.Verify([]byte(iss.Token("ES256", iss.Claims("bob", time.Minute))))).To(Equal("bob"))
		Expect(time.Since(start)).To(BeNumerically("<", time.Second), "a known key's token waited for the refresh")
	})

	It("reads a JWKS file, and refuses a missing one at start", func() {
		p := filepath.Join(GinkgoT().TempDir(), "jwks.json")
		Expect(os.WriteFile(p, iss.JWKS(), 0o600)).To(Succeed())
		vf, err := auth.NewJWTVerifier(auth.JWTConfig{JWKSFile: p, Issuer: iss.Name, Audience: iss.Audience}, zerolog.Nop())
		Expect(err).NotTo(HaveOccurred())
		Expect(vf.Verify([]byte(iss.Token("EdDSA", iss.Claims("bob", time.Minute))))).To(Equal("bob"))
		_, err = auth.NewJWTVerifier(auth.JWTConfig{JWKSFile: p + ".missing", Issuer: "i", Audience: "a"}, zerolog.Nop())
		Expect(err).To(HaveOccurred())
		_, err = auth.NewJWTVerifier(auth.JWTConfig{JWKSFile: p}, zerolog.Nop())
		Expect(err).To(MatchError(ContainSubstring("IAC_CODE_JWT_ISSUER")))
	})
})

var _ = Describe("chain", func() {
	It("tries the static token, then the tokens file, then JWTs", func() {
		iss := authtest.NewIssuer("https://idp.test", "iac-code")
		defer iss.Close()
		dir := GinkgoT().TempDir()
		jw := filepath.Join(dir, "jwks.json")
		Expect(os.WriteFile(jw, iss.JWKS(), 0o600)).To(Succeed())
		users := filepath.Join(dir, "users.yaml")
		writeUsers(users, "carol", "tok-c")
		env := map[string]string{"IACCODE_ACP_HTTP_TOKEN": "shared", "IAC_CODE_AUTH_TOKENS_FILE": users,
			"IAC_CODE_JWT_JWKS_FILE": jw, "IAC_CODE_JWT_ISSUER": iss.Name, "IAC_CODE_JWT_AUDIENCE": iss.Audience}
		c, err := auth.FromEnv(GinkgoT().Context(), func(k string) string { return env[k] }, zerolog.Nop())
		Expect(err).NotTo(HaveOccurred())
		Expect(c.Authenticate(bearer("shared"))).To(Equal(auth.Default))
		Expect(c.Authenticate(bearer("tok-c"))).To(Equal("carol"))
		Expect(c.Authenticate(bearer(iss.For("dave")))).To(Equal("dave"))
		_, err = c.Authenticate(bearer("a.b.c"))
		Expect(err).To(MatchError(auth.ErrBadJWT))

		none, err := auth.FromEnv(GinkgoT().Context(), func(string) string { return "" }, zerolog.Nop())
		Expect(err).NotTo(HaveOccurred())
		Expect(none).To(BeNil())
		env["IAC_CODE_AUTH_TOKENS_FILE"] = filepath.Join(dir, "missing.yaml")
		_, err = auth.FromEnv(GinkgoT().Context(), func(k string) string { return env[k] }, zerolog.Nop())
		Expect(err).To(MatchError(ContainSubstring("IAC_CODE_AUTH_TOKENS_FILE")))
	})
})

func itoa(n int) string { return string(rune('0' + n)) }

var _ = jwt.MapClaims{}
