// Package authtest is a small identity provider for tests: it holds RS256,
// ES256 and EdDSA signing keys, serves their JWKS over HTTP on loopback,
// and mints good and bad tokens with them.
package authtest

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Key ids of the issuer's keys.
const (
	KidRSA = "rsa-1"
	KidEC  = "ec-1"
	KidEd  = "ed-1"
)

// Issuer is a test identity provider.
type Issuer struct {
	Name     string // iss
	Audience string // aud
	rsa      *rsa.PrivateKey
	ec       *ecdsa.PrivateKey
	ed       ed25519.PrivateKey
	srv      *httptest.Server
	// Fetches counts GETs of the JWKS.
	Fetches atomic.Int64
}

// NewIssuer makes fresh keys.
func NewIssuer(iss, aud string) *Issuer {
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	_, dk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	return &Issuer{Name: iss, Audience: aud, rsa: rk, ec: ek, ed: dk}
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// JWKS is the public key set.
func (i *Issuer) JWKS() []byte {
	pad := func(b []byte, n int) []byte { return append(make([]byte, n-len(b)), b...) }
	ecPub, err := i.ec.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		panic(err)
	}
	keys := []map[string]string{
		{"kty": "RSA", "kid": KidRSA, "use": "sig", "alg": "RS256", "n": b64(i.rsa.N.Bytes()),
			"e": b64(pad(big(i.rsa.E), 3))},
		{"kty": "EC", "kid": KidEC, "use": "sig", "alg": "ES256", "crv": "P-256",
			"x": b64(ecPub[1:33]), "y": b64(ecPub[33:])},
		{"kty": "OKP", "kid": KidEd, "use": "sig", "alg": "EdDSA", "crv": "Ed25519",
			"x": b64(i.ed.Public().(ed25519.PublicKey))},
	}
	out, _ := json.Marshal(map[string]any{"keys": keys})
	return out
}

func big(e int) []byte {
	var b []byte
	for ; e > 0; e >>= 8 {
		b = append([]byte{byte(e)}, b...)
	}
	return b
}

// Serve starts the JWKS endpoint on 127.0.0.1 and returns its URL.
func (i *Issuer) Serve() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	i.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		i.Fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(i.JWKS())
	}))
	i.srv.Listener = ln
	i.srv.Start()
	return i.srv.URL + "/jwks.json"
}

// Close stops the JWKS endpoint.
func (i *Issuer) Close() {
	if i.srv != nil {
		i.srv.Close()
	}
}

// Claims are the standard claims of a valid token for user, expiring in ttl.
func (i *Issuer) Claims(user string, ttl time.Duration) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"iss": i.Name, "aud": i.Audience, "sub": user,
		"iat": now.Unix(), "nbf": now.Add(-time.Second).Unix(), "exp": now.Add(ttl).Unix()}
}

// Token signs claims with the key of alg (RS256, ES256 or EdDSA) and its kid.
func (i *Issuer) Token(alg string, claims jwt.MapClaims) string {
	var (
		m   jwt.SigningMethod
		key any
		kid string
	)
	switch alg {
	case "RS256":
		m, key, kid = jwt.SigningMethodRS256, i.rsa, KidRSA
	case "ES256":
		m, key, kid = jwt.SigningMethodES256, i.ec, KidEC
	case "EdDSA":
		m, key, kid = jwt.SigningMethodEdDSA, i.ed, KidEd
	default:
		panic("authtest: unknown alg " + alg)
	}
	t := jwt.NewWithClaims(m, claims)
	t.Header["kid"] = kid
	s, err := t.SignedString(key)
	if err != nil {
		panic(err)
	}
	return s
}

// For is a valid RS256 token for user for an hour.
func (i *Issuer) For(user string) string { return i.Token("RS256", i.Claims(user, time.Hour)) }

// WithKid is a token signed by the RSA key under another kid.
func (i *Issuer) WithKid(kid string, claims jwt.MapClaims) string {
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	t.Header["kid"] = kid
	s, err := t.SignedString(i.rsa)
	if err != nil {
		panic(err)
	}
	return s
}

// None is an unsigned token (alg "none").
func (i *Issuer) None(claims jwt.MapClaims) string {
	t := jwt.NewWithClaims(jwt.SigningMethodNone, claims)
	t.Header["kid"] = KidRSA
	s, err := t.SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		panic(err)
	}
	return s
}

// HMACWithPublicKey is the key-confusion forgery: HS256 "signed" with the
// RSA public key (its DER encoding), under the RSA key's kid.
func (i *Issuer) HMACWithPublicKey(claims jwt.MapClaims) string {
	der, err := x509.MarshalPKIXPublicKey(&i.rsa.PublicKey)
	if err != nil {
		panic(err)
	}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	t.Header["kid"] = KidRSA
	s, err := t.SignedString(der)
	if err != nil {
		panic(err)
	}
	return s
}

// Stranger is a token signed by a key that is not in the set, under a kid
// of the set.
func Stranger(claims jwt.MapClaims) string {
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	t.Header["kid"] = KidRSA
	s, err := t.SignedString(other)
	if err != nil {
		panic(err)
	}
	return s
}

// SHA256 is the hex digest of a token, as written in a tokens file.
func SHA256(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}
