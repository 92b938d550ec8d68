package auth

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"
)

// DefaultPollInterval is how often a tokens file is checked for changes
// (the bound is 10 s).
const DefaultPollInterval = 2 * time.Second

// tokenUser is one entry of the tokens file.
type tokenUser struct {
	name   string
	sum    [32]byte
	limits Limits
}

// TokenFile is IAC_CODE_AUTH_TOKENS_FILE: YAML
//
//	users:
//	  - name: user-a
//	    token_sha256: "<64 hex digits>"
//	    tokens_per_day: 200000     # optional: user-a's own token budget
//	    tokens_per_month: 3000000  # (0: no cap), see Limits
//
// Plain tokens are never stored. A name may have several tokens (rotation:
// add the new one, then remove the old one). The file is re-read when its identity,
// size or modification time changes (Watch); a bad reload keeps the
// previous good contents with a warning.
type TokenFile struct {
	path  string
	log   zerolog.Logger
	users atomic.Pointer[[]tokenUser]
	stamp fileStamp
}

// LoadTokenFile reads and validates path. A malformed file is an error
// "path:line: reason" (the server stops at start on it).
func LoadTokenFile(path string, log zerolog.Logger) (*TokenFile, error) {
	f := &TokenFile{path: path, log: log}
	st, err := stampOf(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	users, err := readTokenFile(path)
	if err != nil {
		return nil, err
	}
	f.users.Store(&users)
	f.stamp = st
	return f, nil
}

// Users is the number of principals loaded now.
func (f *TokenFile) Users() int { return len(*f.users.Load()) }

// match compares the digest with every entry in constant time, without
// stopping at a match: the time does not depend on which entry matched.
func (f *TokenFile) match(sum [32]byte) (string, bool) {
	found := -1
	users := *f.users.Load()
	for i := range users {
		if subtle.ConstantTimeCompare(sum[:], users[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return users[found].name, true
}

// limitsOf is the budget of name's entries (the first that sets each).
func (f *TokenFile) limitsOf(name string) (Limits, bool) {
	var l Limits
	found := false
	for _, u := range *f.users.Load() {
		if u.name != name {
			continue
		}
		found = true
		if l.TokensPerDay == nil {
			l.TokensPerDay = u.limits.TokensPerDay
		}
		if l.TokensPerMonth == nil {
			l.TokensPerMonth = u.limits.TokensPerMonth
		}
	}
	return l, found
}

// Watch re-reads the file when it changes, every interval, until ctx ends.
func (f *TokenFile) Watch(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.Reload()
		}
	}
}

// Reload re-reads the file if it changed since the last good read, and
// reports whether new contents are in force.
func (f *TokenFile) Reload() bool {
	st, err := stampOf(f.path)
	if err != nil {
		if !f.stamp.missing {
			f.log.Warn().Err(err).Str("file", f.path).Msg("tokens file unreadable; keeping the previous users")
			f.stamp.missing = true
		}
		return false
	}
	if st.same(f.stamp) {
		return false
	}
	users, err := readTokenFile(f.path)
	f.stamp = st
	if err != nil {
		f.log.Warn().Str("error", err.Error()).Msg("tokens file not reloaded; keeping the previous users")
		return false
	}
	f.users.Store(&users)
	f.log.Info().Str("file", f.path).Int("users", len(users)).Msg("tokens file reloaded")
	return true
}

// fileStamp identifies a version of a file without reading it.
type fileStamp struct {
	info    os.FileInfo
	missing bool
}

func stampOf(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{info: st}, nil
}

// same: same file (inode: a rename over it is a change), size and mtime.
func (s fileStamp) same(o fileStamp) bool {
	return o.info != nil && !o.missing && os.SameFile(s.info, o.info) &&
		s.info.Size() == o.info.Size() && s.info.ModTime().Equal(o.info.ModTime())
}

func readTokenFile(path string) ([]tokenUser, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	users, line, reason := parseTokenFile(data)
	if reason != "" {
		return nil, fmt.Errorf("%s:%d: %s", path, line, reason)
	}
	return users, nil
}

// parseTokenFile returns the users, or the line and reason of the first
// problem.
func parseTokenFile(data []byte) (users []tokenUser, line int, reason string) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, yamlErrLine(err), "invalid YAML: " + err.Error()
	}
	if len(doc.Content) == 0 {
		return nil, 1, "empty file: expected a 'users' list"
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, root.Line, "expected a mapping with a 'users' list"
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "users" {
			return nil, k.Line, fmt.Sprintf("unknown key %q (expected 'users')", k.Value)
		}
		list = v
	}
	if list == nil {
		return nil, root.Line, "missing 'users' list"
	}
	if list.Kind != yaml.SequenceNode {
		return nil, list.Line, "'users' must be a list"
	}
	seen := map[[32]byte]bool{}
	for _, item := range list.Content {
		if item.Kind != yaml.MappingNode {
			return nil, item.Line, "each user must be a mapping with 'name' and 'token_sha256'"
		}
		var u tokenUser
		var hasName, hasSum bool
		for i := 0; i+1 < len(item.Content); i += 2 {
			k, v := item.Content[i], item.Content[i+1]
			if v.Kind != yaml.ScalarNode {
				return nil, v.Line, fmt.Sprintf("%q must be a string", k.Value)
			}
			switch k.Value {
			case "name":
				if !validName(v.Value) {
					return nil, v.Line, fmt.Sprintf("invalid user name %q: 1-64 characters of A-Z a-z 0-9 . _ @ -, not starting with a dot", v.Value)
				}
				u.name, hasName = v.Value, true
			case "token_sha256":
				b, err := hex.DecodeString(v.Value)
				if err != nil || len(b) != 32 {
					return nil, v.Line, "token_sha256 must be 64 hex digits (the SHA-256 of the token, not the token)"
				}
				copy(u.sum[:], b)
				hasSum = true
			case "tokens_per_day", "tokens_per_month":
				n, bad := tokenLimit(k.Value, v.Value)
				if bad != "" {
					return nil, v.Line, bad
				}
				if k.Value == "tokens_per_day" {
					u.limits.TokensPerDay = n
				} else {
					u.limits.TokensPerMonth = n
				}
			default:
				return nil, k.Line, fmt.Sprintf("unknown key %q (expected 'name', 'token_sha256', 'tokens_per_day', 'tokens_per_month')", k.Value)
			}
		}
		switch {
		case !hasName:
			return nil, item.Line, "user without 'name'"
		case !hasSum:
			return nil, item.Line, "user " + u.name + " without 'token_sha256'"
		case seen[u.sum]:
			return nil, item.Line, "the same token_sha256 is given twice"
		}
		seen[u.sum] = true
		users = append(users, u)
	}
	return users, 0, ""
}

// yamlErrLine digs the line out of a yaml error ("yaml: line N: ...").
func yamlErrLine(err error) int {
	var n int
	msg := err.Error()
	for _, f := range []string{"yaml: line %d:", "yaml: unmarshal errors:\n  line %d:"} {
		if _, e := fmt.Sscanf(msg, f, &n); e == nil {
			return n
		}
	}
	return 1
}
