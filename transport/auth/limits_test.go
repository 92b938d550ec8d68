package auth_test

import (
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/transport/auth"
	"github.com/iac-code/iac-code/transport/auth/authtest"
)

// limits flattens Limits for comparison: -1 stands for "not set".
func limits(l auth.Limits) [2]int64 {
	out := [2]int64{-1, -1}
	if l.TokensPerDay != nil {
		out[0] = *l.TokensPerDay
	}
	if l.TokensPerMonth != nil {
		out[1] = *l.TokensPerMonth
	}
	return out
}

var _ = Describe("per-person token budgets", func() {
	It("reads tokens_per_day and tokens_per_month of the tokens file, per user, 0 for no cap", func() {
		path := filepath.Join(GinkgoT().TempDir(), "tokens.yaml")
		Expect(os.WriteFile(path, []byte("users:\n"+
			"  - name: alice\n    token_sha256: \""+authtest.SHA256("a1")+"\"\n    tokens_per_day: 5000\n"+
			"  - name: alice\n    token_sha256: \""+authtest.SHA256("a2")+"\"\n    tokens_per_month: 0\n"+
			"  - name: bob\n    token_sha256: \""+authtest.SHA256("b")+"\"\n"), 0o600)).To(Succeed())
		f, err := auth.LoadTokenFile(path, zerolog.Nop())
		Expect(err).NotTo(HaveOccurred())
		c := &auth.Chain{File: f}
		Expect(limits(c.LimitsOf("alice"))).To(Equal([2]int64{5000, 0}))
		Expect(limits(c.LimitsOf("bob"))).To(Equal([2]int64{-1, -1}))
		Expect(limits(c.LimitsOf("nobody"))).To(Equal([2]int64{-1, -1}))
		var none *auth.Chain
		Expect(limits(none.LimitsOf("alice"))).To(Equal([2]int64{-1, -1}))
	})

	DescribeTable("stops at start on a bad budget in the tokens file", func(value string) {
		path := filepath.Join(GinkgoT().TempDir(), "tokens.yaml")
		Expect(os.WriteFile(path, []byte("users:\n  - name: a\n    token_sha256: \""+authtest.SHA256("x")+
			"\"\n    tokens_per_day: "+value+"\n"), 0o600)).To(Succeed())
		_, err := auth.LoadTokenFile(path, zerolog.Nop())
		Expect(err).To(MatchError(ContainSubstring(path + ":4: tokens_per_day must be a whole number")))
	},
		Entry("negative", "-1"),
		Entry("not a number", "lots"),
		Entry("fraction", "1.5"),
	)

	It("takes a JWT's iac_code_tokens_per_day / _per_month claims as its bearer's budget, the last token's winning", func() {
		iss := authtest.NewIssuer("https://idp.test", "iac-code")
		url := iss.Serve()
		DeferCleanup(iss.Close)
		v, err := auth.NewJWTVerifier(auth.JWTConfig{JWKSURL: url, Issuer: iss.Name, Audience: iss.Audience}, zerolog.Nop())
		Expect(err).NotTo(HaveOccurred())
		c := &auth.Chain{JWT: v}
		cl := iss.Claims("carol", time.Minute)
		cl[auth.ClaimTokensPerDay] = 1200
		Expect(c.Authenticate(bearer(iss.Token("RS256", cl)))).To(Equal("carol"))
		Expect(limits(c.LimitsOf("carol"))).To(Equal([2]int64{1200, -1}))

		cl = iss.Claims("carol", 2*time.Minute)
		cl[auth.ClaimTokensPerMonth] = 90000
		cl[auth.ClaimTokensPerDay] = "lots" // not a number: not set
		Expect(c.Authenticate(bearer(iss.Token("ES256", cl)))).To(Equal("carol"))
		Expect(limits(c.LimitsOf("carol"))).To(Equal([2]int64{-1, 90000}))

		Expect(c.Authenticate(bearer(iss.Token("RS256", iss.Claims("carol", 3*time.Minute))))).To(Equal("carol"))
		Expect(limits(c.LimitsOf("carol"))).To(Equal([2]int64{-1, -1}))
		Expect(limits(c.LimitsOf("dave"))).To(Equal([2]int64{-1, -1}))
	})
})
