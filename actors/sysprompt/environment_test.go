//go:build unix

package sysprompt

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func gitIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func TestGatherGitStatus(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root, _ := filepath.EvalSymlinks(t.TempDir())
	gitIn(t, root, "init", "-q", "-b", "trunk")
	write(t, filepath.Join(root, "a.txt"), "one\n")
	gitIn(t, root, "add", "a.txt")
	gitIn(t, root, "commit", "-q", "-m", "first")
	write(t, filepath.Join(root, "a.txt"), "two\n")
	write(t, filepath.Join(root, "new.txt"), "new\n")

	env := Gather(context.Background(), filepath.Join(root, "sub"), root, true, GitTimeout, nil)
	g := env.Git
	if g == nil || g.Problem != "" || g.Branch != "trunk" || strings.Join(g.Changes, "|") != " M a.txt|?? new.txt" || g.More {
		t.Fatalf("git = %+v", g)
	}
	text := Turn(env, "default", "")
	for _, want := range []string{EnvironmentHeading, "- OS: " + env.OS + "/" + env.Arch, "- Date: " + time.Now().Format("2006-01-02"),
		"- Working directory: " + filepath.Join(root, "sub"), "- Git repository: yes, top level " + root,
		"- Branch: trunk", "\n     M a.txt", "\n    ?? new.txt", "Mode: default."} {
		if !strings.Contains(text, want) {
			t.Errorf("turn text lacks %q:\n%s", want, text)
		}
	}
	if env := Gather(context.Background(), root, root, false, GitTimeout, nil); env.Git != nil ||
		!strings.Contains(Turn(env, "", ""), "- Git repository: no") {
		t.Errorf("not a repository: %+v", env.Git)
	}
}

// fakeGit puts a script named git first on PATH.
func fakeGit(t *testing.T, script string) string {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "git"), "#!/bin/sh\n"+script)
	if err := os.Chmod(filepath.Join(dir, "git"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return dir
}

func TestGatherSlowGitIsBoundedAndKilled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	// git prints a little, then hangs in a child (sleep) of its group.
	fakeGit(t, "echo '## main'\necho ' M x'\necho '?? half'\nprintf '?? cut-sho'\nsleep 30 &\necho $! > "+pidFile+"\nwait\n")
	start := time.Now()
	env := Gather(context.Background(), "/", "/", true, 300*time.Millisecond, nil)
	took := time.Since(start)
	if took > 3*time.Second {
		t.Errorf("Gather took %v with a 300ms limit", took)
	}
	g := env.Git
	if g == nil || !strings.Contains(g.Problem, "did not finish within 300ms") || g.Branch != "main" ||
		strings.Join(g.Changes, "|") != " M x|?? half" {
		t.Fatalf("git = %+v", g)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(3 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("git's child %d outlived the limit", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestGatherHugeStatusIsCapped(t *testing.T) {
	fakeGit(t, "echo '## main'\necho \"?? long-$(printf %0500d 0)\"\ni=0\nwhile [ $i -lt 100000 ]; do echo \"?? file-$i-$(printf %0100d 0)\"; i=$((i+1)); done\n")
	env := Gather(context.Background(), "/", "/", true, GitTimeout, nil)
	g := env.Git
	if g == nil || len(g.Changes) != maxGitLines || !g.More || g.Problem != "" {
		t.Fatalf("git = %+v", g)
	}
	for _, c := range g.Changes {
		if len(c) > maxGitLine+len("…") {
			t.Errorf("line of %d bytes", len(c))
		}
	}
	if c := g.Changes[0]; len(c) != maxGitLine+len("…") || !strings.HasSuffix(c, "…") {
		t.Errorf("long line not clipped: %d bytes", len(c))
	}
	if n := len(Turn(env, "", "")); n > 20<<10 {
		t.Errorf("turn text of %d bytes", n)
	}
}

func TestGatherGitFailure(t *testing.T) {
	fakeGit(t, "echo 'fatal: not a git repository' >&2\nexit 128\n")
	g := Gather(context.Background(), "/", "/", true, GitTimeout, nil).Git
	if g == nil || g.Problem != "git status failed: fatal: not a git repository" {
		t.Fatalf("git = %+v", g)
	}
}

func TestModeRules(t *testing.T) {
	env := Environment{OS: "linux", Arch: "amd64"}
	plan := Turn(env, "plan", "")
	if !strings.Contains(plan, "Mode: plan. This mode is read-only") {
		t.Errorf("plan:\n%s", plan)
	}
	for _, mode := range []string{"default", "accept_edits", "bypass", ""} {
		text := Turn(env, mode, "")
		if strings.Contains(text, "read-only") {
			t.Errorf("%q has plan's rules:\n%s", mode, text)
		}
		if mode != "" && !strings.Contains(text, "Mode: "+mode+".") {
			t.Errorf("%q lacks its rules:\n%s", mode, text)
		}
	}
	if !strings.Contains(Turn(env, "", "explore"), "You are a explore sub-agent") {
		t.Error("no sub-agent role")
	}
}

// A real repository of 30,000 files in one commit (git fast-import, no
// checkout: git status lists every file as deleted): the output is capped
// and git is stopped once enough was read.
func TestGatherRealHugeRepoIsCapped(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root, _ := filepath.EvalSymlinks(t.TempDir())
	gitIn(t, root, "init", "-q", "-b", "trunk")
	var stream strings.Builder
	stream.WriteString("blob\nmark :1\ndata 2\nx\n")
	stream.WriteString("commit refs/heads/trunk\ncommitter t <t@t> 0 +0000\ndata 4\nhuge\n")
	for i := range 30000 {
		stream.WriteString("M 100644 :1 dir" + strconv.Itoa(i%100) + "/file-" + strconv.Itoa(i) + ".txt\n")
	}
	cmd := exec.Command("git", "fast-import", "--quiet")
	cmd.Dir, cmd.Stdin = root, strings.NewReader(stream.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fast-import: %v\n%s", err, out)
	}
	start := time.Now()
	g := Gather(context.Background(), root, root, true, GitTimeout, nil).Git
	took := time.Since(start)
	if g.Problem != "" || !strings.HasPrefix(g.Branch, "trunk") || len(g.Changes) != maxGitLines || !g.More {
		t.Fatalf("git = %+v", g)
	}
	if !strings.HasPrefix(g.Changes[0], "D  dir") {
		t.Errorf("first change %q", g.Changes[0])
	}
	t.Logf("git status of 30,000 files: %v", took)
}
