package llm

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestSaveAndForgetCredential(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home") // created by the first save
	path := filepath.Join(home, CredentialsFile)
	if err := SaveCredential(home, "anthropic", "sk-ant-1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(mustRead(t, path), "# mine\nopenai: sk-o\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := SaveCredential(home, "anthropic", "sk-ant-2"); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", info.Mode().Perm(), err)
	}
	creds, warn, err := readCredentials(path)
	if err != nil || warn != "" || creds["anthropic"].value != "sk-ant-2" || creds["openai"].value != "sk-o" {
		t.Fatalf("after saves: %v %q %v", creds, warn, err)
	}
	if !strings.Contains(string(mustRead(t, path)), "# mine") {
		t.Errorf("comment lost:\n%s", mustRead(t, path))
	}
	if found, err := ForgetCredential(home, "anthropic"); !found || err != nil {
		t.Fatalf("forget: %v %v", found, err)
	}
	if found, err := ForgetCredential(home, "anthropic"); found || err != nil {
		t.Fatalf("forget twice: %v %v", found, err)
	}
	creds, _, _ = readCredentials(path)
	if _, ok := creds["anthropic"]; ok || creds["openai"].value != "sk-o" {
		t.Fatalf("after forget: %v", creds)
	}
	entries, _ := os.ReadDir(home)
	for _, e := range entries {
		if e.Name() != CredentialsFile && e.Name() != CredentialsFile+lockSuffix {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}

func TestEditYAMLLeavesAMalformedFileAlone(t *testing.T) {
	home := t.TempDir()
	path := filepath.Join(home, CredentialsFile)
	if err := os.WriteFile(path, []byte("a: [b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := SaveCredential(home, "openai", "k"); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("want an error naming the file, got %v", err)
	}
	if string(mustRead(t, path)) != "a: [b\n" {
		t.Fatal("malformed file was changed")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSessionDefaults(t *testing.T) {
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, SettingsFile), []byte("activeProvider: openai # mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := SaveSessionDefault(home, "", "thought_level", "high"); err != nil {
		t.Fatal(err)
	}
	if err := SaveSessionDefault(home, "", "thought_level", "low"); err != nil {
		t.Fatal(err)
	}
	if got := SessionDefaults(home, ""); len(got) != 1 || got["thought_level"] != "low" {
		t.Fatalf("defaults %v", got)
	}
	st, err := readSettings(filepath.Join(home, SettingsFile))
	if err != nil || st.activeProvider.value != "openai" {
		t.Fatalf("settings still read: %v %v", st.activeProvider, err)
	}
}

func TestTakesThoughtLevel(t *testing.T) {
	for _, c := range []struct {
		provider, model string
		want            bool
	}{
		{"openai", "o4-mini", true}, {"openai", "gpt-5", true}, {"openai", "gpt-4.1", false},
		{"anthropic", "claude-sonnet-4-5", true}, {"anthropic", "claude-3-7-sonnet-latest", true},
		{"anthropic", "claude-3-5-haiku-latest", false}, {"deepseek", "deepseek-reasoner", false},
	} {
		if got := (Config{Provider: c.provider}).TakesThoughtLevel(c.model); got != c.want {
			t.Errorf("%s %s: %v", c.provider, c.model, got)
		}
	}
}

// openai_compatible has no thinking style of its own; pointed at OpenAI
// itself its requests carry reasoning_effort, so the option is offered.
func TestTakesThoughtLevelFollowsTheRequestRule(t *testing.T) {
	for _, c := range []struct {
		base, model string
		want        bool
	}{
		{"", "o3", true}, {"https://api.openai.com/v1", "o4-mini", true}, {"", "gpt-4.1", false},
		{"http://127.0.0.1:9/v1", "o3", false},
	} {
		cfg := Config{Provider: "openai_compatible", BaseURL: c.base}
		if got := cfg.TakesThoughtLevel(c.model); got != c.want {
			t.Errorf("%q %s: %v", c.base, c.model, got)
		}
		_, style := cfg.thinkingStyle()
		if sends := style == ThinkingEffort && isOpenAIReasoningModel(c.model); sends != c.want {
			t.Errorf("%q %s: the request sends reasoning_effort %v, the option is offered %v", c.base, c.model, sends, c.want)
		}
	}
}

func TestSessionDefaultsPerPrincipal(t *testing.T) {
	home := t.TempDir()
	// an old file: the shared sessionDefaults only
	if err := os.WriteFile(filepath.Join(home, SettingsFile), []byte("sessionDefaults:\n  thought_level: medium\n  auto_compact: \"true\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := SessionDefaults(home, "alice"); got["thought_level"] != "medium" || got["auto_compact"] != "true" {
		t.Fatalf("a principal without its own values falls back to sessionDefaults: %v", got)
	}
	var wg sync.WaitGroup
	for _, c := range [][3]string{{"alice", "thought_level", "high"}, {"bob", "auto_compact", "false"}, {"carol", "thought_level", "low"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := SaveSessionDefault(home, c[0], c[1], c[2]); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for principal, want := range map[string]map[string]string{
		"":      {"thought_level": "medium", "auto_compact": "true"},
		"alice": {"thought_level": "high", "auto_compact": "true"},
		"bob":   {"thought_level": "medium", "auto_compact": "false"},
		"carol": {"thought_level": "low", "auto_compact": "true"},
		"dave":  {"thought_level": "medium", "auto_compact": "true"},
	} {
		if got := SessionDefaults(home, principal); !maps.Equal(got, want) {
			t.Errorf("%q: defaults %v, want %v", principal, got, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(home, SettingsFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("settings.yml %v %v", fi, err)
	}
}
