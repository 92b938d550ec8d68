package auth

import (
	"context"
	"errors"

	"github.com/rs/zerolog"
)

// FromEnv builds the chain of the configured sources: IACCODE_ACP_HTTP_TOKEN,
// IAC_CODE_AUTH_TOKENS_FILE (watched until ctx ends) and IAC_CODE_JWT_*.
// nil when none is set (no authentication). An invalid source is an error
// (the server stops at start).
func FromEnv(ctx context.Context, getenv func(string) string, log zerolog.Logger) (*Chain, error) {
	c := &Chain{}
	if t := getenv("IACCODE_ACP_HTTP_TOKEN"); t != "" {
		c.Static = NewStatic(t)
	}
	var errs []error
	if path := getenv("IAC_CODE_AUTH_TOKENS_FILE"); path != "" {
		f, err := LoadTokenFile(path, log)
		if err != nil {
			errs = append(errs, errors.New("IAC_CODE_AUTH_TOKENS_FILE: "+err.Error()))
		} else {
			c.File = f
			go f.Watch(ctx, DefaultPollInterval)
		}
	}
	jc := JWTConfig{
		JWKSURL:   getenv("IAC_CODE_JWT_JWKS_URL"),
		JWKSFile:  getenv("IAC_CODE_JWT_JWKS_FILE"),
		Issuer:    getenv("IAC_CODE_JWT_ISSUER"),
		Audience:  getenv("IAC_CODE_JWT_AUDIENCE"),
		UserClaim: getenv("IAC_CODE_JWT_USER_CLAIM"),
	}
	if jc.JWKSURL != "" || jc.JWKSFile != "" || jc.Issuer != "" || jc.Audience != "" {
		v, err := NewJWTVerifier(jc, log)
		if err != nil {
			errs = append(errs, err)
		} else {
			c.JWT = v
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if c.Empty() {
		return nil, nil
	}
	return c, nil
}
