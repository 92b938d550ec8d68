package auth

import (
	"fmt"
	"math"
	"strconv"
	"sync"
)

// Limits are a principal's own token budget, overriding the server's
// default (IAC_CODE_USER_TOKENS_PER_DAY, …_PER_MONTH) for each period that
// is set; 0 is no cap. They come from the principal's entry in the tokens
// file (tokens_per_day, tokens_per_month) or from the claims of its JWT
// (ClaimTokensPerDay, ClaimTokensPerMonth).
type Limits struct {
	TokensPerDay, TokensPerMonth *int64
}

// Claims of a JWT that set the bearer's token budget (numbers, >= 0).
const (
	ClaimTokensPerDay   = "iac_code_tokens_per_day"
	ClaimTokensPerMonth = "iac_code_tokens_per_month"
)

// LimitsOf is what the sources know of principal's own limits: its entry in
// the tokens file, else the claims of its last verified JWT.
func (c *Chain) LimitsOf(principal string) Limits {
	if c == nil {
		return Limits{}
	}
	if c.File != nil {
		if l, ok := c.File.limitsOf(principal); ok {
			return l
		}
	}
	if c.JWT != nil {
		return c.JWT.limits.of(principal)
	}
	return Limits{}
}

// tokenLimit parses a tokens file's tokens_per_day / tokens_per_month.
func tokenLimit(key, v string) (*int64, string) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return nil, fmt.Sprintf("%s must be a whole number of tokens, 0 or more (0: no cap), got %q", key, v)
	}
	return &n, ""
}

// claimLimit reads a budget claim: a whole number >= 0, else unset.
func claimLimit(v any) *int64 {
	f, ok := v.(float64)
	if !ok || f < 0 || f != math.Trunc(f) || f > math.MaxInt64/2 {
		return nil
	}
	n := int64(f)
	return &n
}

// principalLimits remembers the limits of each principal's last verified
// JWT.
type principalLimits struct {
	mu sync.RWMutex
	m  map[string]Limits
}

func (p *principalLimits) set(principal string, l Limits) {
	p.mu.RLock()
	old, known := p.m[principal]
	p.mu.RUnlock()
	if known && sameLimit(old.TokensPerDay, l.TokensPerDay) && sameLimit(old.TokensPerMonth, l.TokensPerMonth) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]Limits{}
	}
	if l.TokensPerDay == nil && l.TokensPerMonth == nil {
		delete(p.m, principal)
		return
	}
	p.m[principal] = l
}

func (p *principalLimits) of(principal string) Limits {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.m[principal]
}

func sameLimit(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
