//go:build unix

package sysprompt

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// What a prompt pays before its first model call (turn_context.go).

func BenchmarkRefreshUnchanged(b *testing.B) {
	root, _ := filepath.EvalSymlinks(b.TempDir())
	nested := filepath.Join(root, "a", "b", "c")
	write(b, filepath.Join(nested, FileName), strings.Repeat("rule\n", 2000))
	write(b, filepath.Join(root, FileName), strings.Repeat("rule\n", 2000))
	write(b, filepath.Join(root, ".git", "HEAD"), "ref: refs/heads/main\n")
	p := NewProject(nested, b.TempDir())
	p.Refresh()
	b.ReportAllocs()
	for b.Loop() {
		if _, changed := p.Refresh(); changed {
			b.Fatal("re-read")
		}
	}
}

func BenchmarkGatherSmallRepo(b *testing.B) {
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("no git")
	}
	root, _ := filepath.EvalSymlinks(b.TempDir())
	if out, err := exec.Command("git", "init", "-q", root).CombinedOutput(); err != nil {
		b.Fatalf("%v %s", err, out)
	}
	write(b, filepath.Join(root, "x.go"), "package x\n")
	b.ReportAllocs()
	for b.Loop() {
		if env := Gather(context.Background(), root, root, true, GitTimeout, nil); env.Git.Problem != "" {
			b.Fatal(env.Git.Problem)
		}
	}
}

func BenchmarkStableAndTurnText(b *testing.B) {
	in := &Instructions{Files: []File{{Path: "/r/AGENTS.md", Text: strings.Repeat("rule\n", 2000)}}}
	env := Environment{OS: "linux", Arch: "amd64", Cwd: "/r", Git: &GitState{Root: "/r", Branch: "main", Changes: []string{" M a"}}}
	b.ReportAllocs()
	for b.Loop() {
		_ = Stable(in)
		_ = Turn(env, "default", "")
	}
}
