package auth_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/transport/auth"
	"github.com/iac-code/iac-code/transport/auth/authtest"
)

// frontDoor is the chain a team deployment runs: static token, tokens file
// of 100 users, JWTs of a JWKS file.
func frontDoor(tb testing.TB) (*auth.Chain, *authtest.Issuer) {
	iss := authtest.NewIssuer("https://idp.test", "iac-code")
	return frontDoorOf(tb, iss), iss
}

func frontDoorOf(tb testing.TB, iss *authtest.Issuer) *auth.Chain {
	dir := tb.TempDir()
	jw := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(jw, iss.JWKS(), 0o600); err != nil {
		tb.Fatal(err)
	}
	users := "users:\n"
	for i := range 100 {
		users += "  - name: user-" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + "\n    token_sha256: \"" +
			authtest.SHA256("token-"+string(rune('a'+i%26))+string(rune('a'+i/26))) + "\"\n"
	}
	up := filepath.Join(dir, "users.yaml")
	if err := os.WriteFile(up, []byte(users), 0o600); err != nil {
		tb.Fatal(err)
	}
	env := map[string]string{"IACCODE_ACP_HTTP_TOKEN": "shared", "IAC_CODE_AUTH_TOKENS_FILE": up,
		"IAC_CODE_JWT_JWKS_FILE": jw, "IAC_CODE_JWT_ISSUER": iss.Name, "IAC_CODE_JWT_AUDIENCE": iss.Audience}
	c, err := auth.FromEnv(tb.Context(), func(k string) string { return env[k] }, zerolog.Nop())
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// FuzzAuthorization: whatever the header, the front door answers a
// principal or an error, never panics, and only accepts what it was given.
func FuzzAuthorization(f *testing.F) {
	c, iss := frontDoor(f)
	good := iss.For("alice")
	for _, s := range []string{"", "Bearer ", "Bearer shared", "bearer token-aa", "Bearer " + good, "Bearer a.b.c",
		"Bearer " + iss.None(iss.Claims("x", time.Minute)), "Bearer " + iss.HMACWithPublicKey(iss.Claims("x", time.Minute)),
		"Bearer eyJhbGciOiJub25lIn0.e30.", "Basic Zm9vOmJhcg==", "Bearer ..", "Bearer " + good[:len(good)-3]} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, h []byte) {
		p, err := c.Authenticate(h)
		if err != nil {
			if p != "" {
				t.Fatalf("principal %q with error %v", p, err)
			}
			return
		}
		if !auth.ValidName(p) {
			t.Fatalf("invalid principal %q", p)
		}
		tok := string(auth.BearerToken(h))
		if tok != "shared" && tok != good && p != "alice" && len(tok) != len("token-aa") {
			t.Fatalf("accepted an unknown credential as %q", p)
		}
	})
}

// BenchmarkIdentity is the per-request identity check of each source (the
// JWT one with its verified-token cache, and without it for comparison).
func BenchmarkIdentity(b *testing.B) {
	c, iss := frontDoor(b)
	cases := map[string][]byte{
		"static":     []byte("Bearer shared"),
		"tokensfile": []byte("Bearer token-zc"),
		"jwt-cached": []byte("Bearer " + iss.For("alice")),
	}
	for name, h := range cases {
		b.Run(name, func(b *testing.B) {
			if _, err := c.Authenticate(h); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Authenticate(h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, alg := range []string{"RS256", "ES256", "EdDSA"} {
		b.Run("jwt-uncached-"+alg, func(b *testing.B) {
			toks := make([][]byte, 0, 4096)
			for i := range 4096 {
				toks = append(toks, []byte("Bearer "+iss.Token(alg, iss.Claims("u"+string(rune('a'+i%26)), time.Hour+time.Duration(i)*time.Second))))
			}
			i := 0
			for b.Loop() {
				if i == len(toks) {
					b.StopTimer()
					c = frontDoorOf(b, iss) // a fresh cache
					i = 0
					b.StartTimer()
				}
				if _, err := c.Authenticate(toks[i]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
