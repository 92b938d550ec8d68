// Package auth decides who sends an HTTP request: it resolves the request's
// Authorization header to a principal (a user name) or refuses it. The
// sources are a static token (IACCODE_ACP_HTTP_TOKEN, principal "default"),
// a file of users and token hashes (IAC_CODE_AUTH_TOKENS_FILE) and JWT
// bearer tokens verified against a JWKS (IAC_CODE_JWT_*). stdio has no
// authenticator: the local OS user is the principal Default.
package auth

import (
	"bytes"
	"errors"
)

// Default is the principal of the static token, of stdio, and the owner of
// sessions stored before sessions had owners.
const Default = "default"

// Errors of Authenticate. They never carry the credential.
var (
	// ErrNoCredential: no Authorization header, or not "Bearer <token>".
	ErrNoCredential = errors.New("no bearer token")
	// ErrUnknownToken: an opaque token that no source knows.
	ErrUnknownToken = errors.New("unknown token")
	// ErrBadJWT: a JWT that does not verify (wrapped with the reason).
	ErrBadJWT = errors.New("invalid JWT")
)

// Authenticator resolves an Authorization header value to a principal.
// It is safe for concurrent use and never logs the credential.
type Authenticator interface {
	Authenticate(authorization []byte) (principal string, err error)
}

// BearerToken extracts the token of "Bearer <token>" (scheme case-
// insensitive, surrounding blanks ignored); nil when absent or malformed.
func BearerToken(h []byte) []byte {
	const scheme = "bearer "
	h = bytes.TrimSpace(h)
	if len(h) <= len(scheme) || !bytes.EqualFold(h[:len(scheme)], []byte(scheme)) {
		return nil
	}
	t := bytes.TrimSpace(h[len(scheme):])
	if len(t) == 0 || bytes.ContainsAny(t, " \t\r\n") {
		return nil
	}
	return t
}

// validName: principal names go into paths ({user} of the workspace root)
// and logs, so they are 1-64 characters of [A-Za-z0-9._@-], not starting
// with a dot.
func validName(s string) bool {
	if s == "" || len(s) > 64 || s[0] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '@', c == '-':
		default:
			return false
		}
	}
	return true
}

// ValidName reports whether s can be a principal name.
func ValidName(s string) bool { return validName(s) }

// looksLikeJWT: three base64url parts separated by dots.
func looksLikeJWT(t []byte) bool { return bytes.Count(t, []byte(".")) == 2 }

// Chain tries its sources in order of precedence: the opaque tokens (the
// static token, then the tokens file) by constant-time hash comparison,
// then, for a token shaped like a JWT, the JWT verifier. The first source
// that knows the token decides.
type Chain struct {
	Static *Static
	File   *TokenFile
	JWT    *JWTVerifier
}

// Empty reports whether no source is configured (no authentication).
func (c *Chain) Empty() bool { return c == nil || (c.Static == nil && c.File == nil && c.JWT == nil) }

// Authenticate implements Authenticator.
func (c *Chain) Authenticate(h []byte) (string, error) {
	t := BearerToken(h)
	if t == nil {
		return "", ErrNoCredential
	}
	var sum [32]byte
	if c.Static != nil || c.File != nil {
		sum = hashToken(t)
	}
	if c.Static != nil {
		if p, ok := c.Static.match(sum); ok {
			return p, nil
		}
	}
	if c.File != nil {
		if p, ok := c.File.match(sum); ok {
			return p, nil
		}
	}
	if c.JWT != nil && looksLikeJWT(t) {
		return c.JWT.Verify(t)
	}
	return "", ErrUnknownToken
}
