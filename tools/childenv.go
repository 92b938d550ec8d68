package tools

import (
	"os"
	"sort"
	"strings"

	"github.com/iac-code/iac-code/llm"
)

// serverSecretEnv are the server's own secret settings. A new secret setting
// joins this list (and docs/security.md, "Tools do not get the server's
// secrets").
var serverSecretEnv = []string{
	"IAC_CODE_API_KEY",        // the model API key
	"IACCODE_ACP_HTTP_TOKEN",  // the HTTP edge's bearer token
	"IAC_CODE_STORE_URL",      // a database URL may carry a password
	"IAC_CODE_CLUSTER_SECRET", // the cluster's shared secret
	// the tokens file: every user's token hash (not a secret itself, but no
	// tool needs to find it)
	"IAC_CODE_AUTH_TOKENS_FILE",
}

// SecretEnv lists the environment variables that never reach a process the
// agent starts for a tool (bash, MCP servers): the server's own secret
// settings and every provider preset's API key variables, sorted.
func SecretEnv() []string {
	seen := map[string]bool{}
	for _, k := range serverSecretEnv {
		seen[k] = true
	}
	for _, p := range llm.Presets {
		for _, k := range p.KeyEnv {
			seen[k] = true
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// IsSecretEnv reports whether a variable is one of SecretEnv.
func IsSecretEnv(name string) bool {
	for _, k := range SecretEnv() {
		if k == name {
			return true
		}
	}
	return false
}

// ChildEnv is the environment for a process the agent starts for a tool:
// the server's environment without SecretEnv, everything else unchanged.
func ChildEnv() []string { return FilterEnv(os.Environ()) }

// FilterEnv drops the SecretEnv variables from a "NAME=value" list.
func FilterEnv(environ []string) []string {
	secret := map[string]bool{}
	for _, k := range SecretEnv() {
		secret[k] = true
	}
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !secret[name] {
			out = append(out, kv)
		}
	}
	return out
}
