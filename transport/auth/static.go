package auth

import (
	"crypto/sha256"
	"crypto/subtle"
)

func hashToken(t []byte) [32]byte { return sha256.Sum256(t) }

// Static is one shared token (IACCODE_ACP_HTTP_TOKEN), principal Default.
// Only its SHA-256 is kept.
type Static struct{ sum [32]byte }

// NewStatic keeps the digest of token.
func NewStatic(token string) *Static { return &Static{sum: hashToken([]byte(token))} }

// match compares digests in constant time (so not even the length leaks).
func (s *Static) match(sum [32]byte) (string, bool) {
	if subtle.ConstantTimeCompare(sum[:], s.sum[:]) == 1 {
		return Default, true
	}
	return "", false
}
