package store

import (
	"fmt"
	"strings"
	"time"
)

// Open opens the session store dbURL names: "" is the file store under home
// (<home>/sessions, one process), postgres:// or postgresql:// the
// PostgreSQL store shared by every process given the same URL. Both binaries
// (cmd/iac-code and its profiling build) open their store through here.
func Open(dbURL, home string, opts ...Option) (Backend, error) {
	switch {
	case dbURL == "":
		fs, err := New(home, opts...)
		if err != nil {
			return nil, err
		}
		return fs, nil
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		pg, err := NewPostgres(dbURL, opts...)
		if err != nil {
			return nil, err
		}
		return pg, nil
	}
	return nil, fmt.Errorf("store: unsupported store URL scheme %q (want postgres:// or postgresql://, or unset for files)", schemeOf(dbURL))
}

// schemeOf is the scheme of a URL for an error message: letters, digits and
// "+-." before "://", else "?" (the input may be a secret of another shape).
func schemeOf(raw string) string {
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok || scheme == "" || len(scheme) > 20 || strings.TrimLeft(strings.ToLower(scheme), "abcdefghijklmnopqrstuvwxyz0123456789+-.") != "" {
		return "?"
	}
	return scheme
}

// Environment variables read by OpenFromEnv.
const (
	EnvStoreURL   = "IAC_CODE_STORE_URL"
	EnvLeaseTTL   = "IAC_CODE_LEASE_TTL"
	EnvLeaseRenew = "IAC_CODE_LEASE_RENEW"
)

// OpenFromEnv is Open configured by the environment: IAC_CODE_STORE_URL,
// and for the shared store IAC_CODE_LEASE_TTL and IAC_CODE_LEASE_RENEW
// (Go durations). opts come after and win.
func OpenFromEnv(home string, getenv func(string) string, opts ...Option) (Backend, error) {
	var env []Option
	for _, v := range []struct {
		name string
		opt  func(time.Duration) Option
	}{{EnvLeaseTTL, WithLeaseTTL}, {EnvLeaseRenew, WithLeaseRenew}} {
		raw := getenv(v.name)
		if raw == "" {
			continue
		}
		d, err := time.ParseDuration(raw)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%s: want a positive duration such as 10s, got %q", v.name, raw)
		}
		env = append(env, v.opt(d))
	}
	b, err := Open(getenv(EnvStoreURL), home, append(env, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvStoreURL, err)
	}
	return b, nil
}
