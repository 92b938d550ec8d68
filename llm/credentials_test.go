package llm

import (
	"os"
	"path/filepath"
	"strings"
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
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
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
