package sysprompt

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/iac-code/iac-code/tools/sandbox"
)

// A repository's config can name programs git status runs (a clean filter
// for a file whose stat changed). Started through the session's jail, such
// a program cannot write outside the session's directories; started as is
// (the control), it can.
func TestGitStatusFilterDriverIsContainedByTheStarter(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	st := sandbox.Probe(sandbox.Settings{Mode: sandbox.On, Network: true})
	if !st.Active() {
		t.Skip("no Landlock: " + st.Reason)
	}
	outside, _ := filepath.EvalSymlinks(t.TempDir())
	marker := filepath.Join(outside, "marker")
	setup := func() string {
		root, _ := filepath.EvalSymlinks(t.TempDir())
		gitIn(t, root, "init", "-q")
		write(t, filepath.Join(root, ".gitattributes"), "*.txt filter=evil\n")
		write(t, filepath.Join(root, "a.txt"), "one\n")
		gitIn(t, root, "add", ".")
		gitIn(t, root, "commit", "-q", "-m", "first")
		gitIn(t, root, "config", "filter.evil.clean", "touch "+marker+"; cat")
		// Same content, new time: status must run the filter to compare.
		later := time.Now().Add(time.Hour)
		if err := os.Chtimes(filepath.Join(root, "a.txt"), later, later); err != nil {
			t.Fatal(err)
		}
		return root
	}

	root := setup()
	Gather(context.Background(), root, root, true, GitTimeout, nil)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("control: the filter driver did not run unsandboxed (%v); the test would prove nothing", err)
	}
	os.Remove(marker)

	root = setup()
	jail := st.NewJail([]string{root})
	defer jail.Close()
	start := func(cmd *exec.Cmd) error { return jail.Start(cmd, nil, cmd.Dir) }
	env := Gather(context.Background(), root, root, true, GitTimeout, start)
	if env.Git == nil || env.Git.Problem != "" {
		t.Fatalf("git status in the jail: %+v", env.Git)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the filter driver wrote outside the session's directories through the jail")
	}
}
