package sysprompt

import (
	"bytes"
	"context"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// GitTimeout bounds git status: a huge repository (or a git that hangs)
// must not stall the turn.
const GitTimeout = 5 * time.Second

// Bounds on the git status shown to the model.
const (
	maxGitOutput = 16 << 10 // bytes read from git
	maxGitLines  = 40       // changed paths shown
	maxGitLine   = 300      // bytes per line
)

// Environment is what the model is told about where it runs.
type Environment struct {
	OS, Arch string
	Shell    string
	Date     string // YYYY-MM-DD, local time
	Cwd      string
	Git      *GitState // nil outside a git repository
}

// GitState is a bounded git status of the repository.
type GitState struct {
	Root string
	// Branch is git's "## " line (branch, upstream, ahead/behind).
	Branch string
	// Changes are porcelain v1 lines, at most maxGitLines; More is set
	// when there were more.
	Changes []string
	More    bool
	// Problem says why the status is missing or partial ("" when whole).
	Problem string
}

// Starter starts a command the environment needs (git status): the
// session's sandbox when it has one, since repository config can name
// programs git runs (filter drivers). nil starts it as is.
type Starter func(cmd *exec.Cmd) error

// Gather takes the environment of cwd now; the git status is bounded by
// timeout and started by start. root and git are the Instructions' (one
// walk finds both).
func Gather(ctx context.Context, cwd, root string, git bool, timeout time.Duration, start Starter) Environment {
	env := Environment{OS: runtime.GOOS, Arch: runtime.GOARCH, Shell: "bash (the bash tool runs bash -c)",
		Date: time.Now().Format("2006-01-02"), Cwd: cwd}
	if git {
		env.Git = gitStatus(ctx, root, timeout, start)
	}
	return env
}

// gitStatus runs git status in root. Repository config can name commands
// git runs (core.fsmonitor); those that status would start are switched
// off, and git never prompts or takes locks.
func gitStatus(ctx context.Context, root string, timeout time.Duration, start Starter) *GitState {
	st := &GitState{Root: root}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, full, err := runGit(ctx, root, maxGitOutput, start,
		"--no-optional-locks", "-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false",
		"status", "--porcelain=v1", "-b")
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		st.Problem = "git status did not finish within " + timeout.String() + "; what it printed until then is shown"
	case err != nil:
		st.Problem = "git status failed: " + firstLine(err.Error())
	case !full:
		st.More = true
	}
	if !full {
		// A line cut short would misstate a path: keep whole lines.
		out = out[:bytes.LastIndexByte(out, '\n')+1]
	}
	lines := strings.Split(string(out), "\n")
	for _, l := range lines {
		switch {
		case l == "":
		case strings.HasPrefix(l, "## "):
			st.Branch = clip(l[3:])
		case len(st.Changes) < maxGitLines:
			st.Changes = append(st.Changes, clip(l))
		default:
			st.More = true
		}
	}
	return st
}

func clip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > maxGitLine {
		s = strings.ToValidUTF8(s[:maxGitLine], "") + "…"
	}
	return s
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return clip(s)
}
