package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/rs/zerolog"
)

// Defaults of JWTConfig.
const (
	DefaultUserClaim  = "sub"
	DefaultLeeway     = 30 * time.Second
	DefaultMinRefresh = time.Minute
	// maxJWKSBytes bounds a fetched key set.
	maxJWKSBytes = 1 << 20
	// maxCached bounds the verified-token cache.
	maxCached = 16384
)

// validMethods are the only signing algorithms accepted: "none" and the
// HMAC family never are (an HMAC "signed" with the public key is a classic
// forgery).
var validMethods = []string{"RS256", "ES256", "EdDSA"}

// JWTConfig configures JWTVerifier (IAC_CODE_JWT_*). Exactly one of JWKSURL
// and JWKSFile; Issuer and Audience are required.
type JWTConfig struct {
	JWKSURL   string
	JWKSFile  string
	Issuer    string
	Audience  string
	UserClaim string
	// Leeway on exp and nbf (default 30 s).
	Leeway time.Duration
	// MinRefresh spaces the re-reads of the key set for an unknown kid
	// (default one minute).
	MinRefresh time.Duration
	// HTTP fetches JWKSURL (default: a client with a 10 s timeout).
	HTTP *http.Client
}

// JWTVerifier verifies bearer JWTs: signature against the key set,
// algorithm, exp/nbf, iss, aud, and the user claim. Verified tokens are
// cached until their exp.
type JWTVerifier struct {
	cfg    JWTConfig
	log    zerolog.Logger
	parser *jwt.Parser

	mu sync.RWMutex
	// refresh serialises key set refreshes (held while fetching; mu not).
	refresh sync.Mutex
	keys    map[string]publicKey
	fetched time.Time

	cacheMu sync.RWMutex
	cache   map[string]cachedToken
	// limits are the budget claims of each principal's last token.
	limits principalLimits
}

type cachedToken struct {
	principal string
	exp       time.Time
}

// NewJWTVerifier checks cfg and loads the key set: a JWKS file must load;
// a JWKS URL that does not answer now is fetched again on the first token.
func NewJWTVerifier(cfg JWTConfig, log zerolog.Logger) (*JWTVerifier, error) {
	if (cfg.JWKSURL == "") == (cfg.JWKSFile == "") {
		return nil, errors.New("JWT: set exactly one of IAC_CODE_JWT_JWKS_URL and IAC_CODE_JWT_JWKS_FILE")
	}
	if cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("JWT: IAC_CODE_JWT_ISSUER and IAC_CODE_JWT_AUDIENCE are required with a JWKS")
	}
	if cfg.UserClaim == "" {
		cfg.UserClaim = DefaultUserClaim
	}
	if cfg.Leeway <= 0 {
		cfg.Leeway = DefaultLeeway
	}
	if cfg.MinRefresh <= 0 {
		cfg.MinRefresh = DefaultMinRefresh
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	v := &JWTVerifier{cfg: cfg, log: log, cache: map[string]cachedToken{},
		parser: jwt.NewParser(jwt.WithValidMethods(validMethods), jwt.WithLeeway(cfg.Leeway),
			jwt.WithIssuer(cfg.Issuer), jwt.WithAudience(cfg.Audience), jwt.WithExpirationRequired())}
	keys, err := v.load()
	switch {
	case err == nil:
		v.keys, v.fetched = keys, time.Now()
	case cfg.JWKSFile != "":
		return nil, err
	default:
		log.Warn().Err(err).Str("url", cfg.JWKSURL).Msg("JWKS not fetched; trying again on the first token")
	}
	return v, nil
}

// load reads the key set from its file or URL.
func (v *JWTVerifier) load() (map[string]publicKey, error) {
	if v.cfg.JWKSFile != "" {
		data, err := os.ReadFile(v.cfg.JWKSFile)
		if err != nil {
			return nil, err
		}
		keys, err := parseJWKS(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.cfg.JWKSFile, err)
		}
		return keys, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.cfg.JWKSURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := v.cfg.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("JWKS: HTTP %d", resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes))
	if err != nil {
		return nil, err
	}
	return parseJWKS(data)
}

// key finds the key of kid, re-reading the key set (at most once per
// MinRefresh) when it is not known: the identity provider rotated its keys.
func (v *JWTVerifier) key(kid string) (publicKey, bool) {
	v.mu.RLock()
	k, ok := pick(v.keys, kid)
	v.mu.RUnlock()
	if ok {
		return k, true
	}
	// One refresh at a time, and never under mu: a token with a made-up
	// kid must not hold up the checks of tokens whose key is known while
	// the identity provider answers (up to 10 s).
	v.refresh.Lock()
	defer v.refresh.Unlock()
	v.mu.RLock()
	k, ok = pick(v.keys, kid)
	fetched := v.fetched
	v.mu.RUnlock()
	if ok {
		return k, true // another refresh brought it
	}
	if !fetched.IsZero() && time.Since(fetched) < v.cfg.MinRefresh {
		return publicKey{}, false
	}
	v.mu.Lock()
	v.fetched = time.Now()
	v.mu.Unlock()
	keys, err := v.load()
	if err != nil {
		v.log.Warn().Err(err).Msg("JWKS refresh failed; keeping the previous keys")
		return publicKey{}, false
	}
	v.mu.Lock()
	v.keys = keys
	v.mu.Unlock()
	return pick(keys, kid)
}

// pick: the key of kid; a token without kid may use the only key of a set.
func pick(keys map[string]publicKey, kid string) (publicKey, bool) {
	if k, ok := keys[kid]; ok {
		return k, true
	}
	if kid == "" && len(keys) == 1 {
		for _, k := range keys {
			return k, true
		}
	}
	return publicKey{}, false
}

func (v *JWTVerifier) keyFunc(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	k, ok := v.key(kid)
	if !ok {
		return nil, errors.New("unknown kid")
	}
	if k.alg != "" && k.alg != t.Method.Alg() {
		return nil, errors.New("algorithm does not match the key")
	}
	return k.key, nil
}

// Verify checks a JWT and returns its user claim as the principal.
func (v *JWTVerifier) Verify(token []byte) (string, error) {
	now := time.Now()
	v.cacheMu.RLock()
	c, hit := v.cache[string(token)]
	v.cacheMu.RUnlock()
	if hit && now.Before(c.exp) {
		return c.principal, nil
	}
	claims := jwt.MapClaims{}
	t, err := v.parser.ParseWithClaims(string(token), claims, v.keyFunc)
	if err != nil || !t.Valid {
		return "", fmt.Errorf("%w: %s", ErrBadJWT, reason(err))
	}
	name, _ := claims[v.cfg.UserClaim].(string)
	if !validName(name) {
		return "", fmt.Errorf("%w: no valid %q claim", ErrBadJWT, v.cfg.UserClaim)
	}
	if name == Default {
		// The operator's principal (stdio, the shared token): it owns the
		// sessions stored before owners and the server's key.
		return "", fmt.Errorf("%w: %q is reserved", ErrBadJWT, Default)
	}
	v.limits.set(name, Limits{TokensPerDay: claimLimit(claims[ClaimTokensPerDay]),
		TokensPerMonth: claimLimit(claims[ClaimTokensPerMonth])})
	exp, err := claims.GetExpirationTime()
	if err == nil && exp != nil {
		v.remember(string(token), cachedToken{principal: name, exp: exp.Time})
	}
	return name, nil
}

func (v *JWTVerifier) remember(token string, c cachedToken) {
	v.cacheMu.Lock()
	defer v.cacheMu.Unlock()
	if len(v.cache) >= maxCached {
		now := time.Now()
		for k, e := range v.cache {
			if !now.Before(e.exp) {
				delete(v.cache, k)
			}
		}
		if len(v.cache) >= maxCached {
			clear(v.cache)
		}
	}
	v.cache[token] = c
}

// reason is a short, credential-free cause for the log.
func reason(err error) string {
	switch {
	case err == nil:
		return "invalid"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "not valid yet"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "wrong issuer"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "wrong audience"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "bad signature"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "unverifiable (algorithm or key)"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "required claim missing"
	}
	return "invalid"
}
