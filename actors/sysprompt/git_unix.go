//go:build unix

package sysprompt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/tools/procgroup"
)

// gitKillGrace is how long git gets to exit after SIGTERM.
const gitKillGrace = 200 * time.Millisecond

// runGit runs git in dir in its own process group, reading at most limit
// bytes of its stdout; full reports that git ended and all its output
// fitted. ctx ending kills the group (git may start helpers).
func runGit(ctx context.Context, dir string, limit int, start Starter, args ...string) (out []byte, full bool, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, false, err
	}
	defer r.Close()
	var stderr bytes.Buffer
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(tools.ChildEnv(), "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C")
	cmd.Stdout, cmd.Stderr = w, &limitedBuffer{b: &stderr, n: 1 << 10}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second // a helper that left the group and kept stderr
	if start == nil {
		start = (*exec.Cmd).Start
	}
	if err := start(cmd); err != nil {
		w.Close()
		return nil, false, err
	}
	w.Close()
	pid := cmd.Process.Pid
	procgroup.Register(pid)
	defer procgroup.Unregister(pid)

	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, int64(limit)+1))
		read <- b
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case out = <-read:
		if len(out) > limit { // enough: the rest is not shown
			procgroup.Kill(pid, gitKillGrace)
			<-exited
			return out[:limit], false, nil
		}
		err = <-exited
	case <-ctx.Done():
		procgroup.Kill(pid, gitKillGrace)
		<-exited
		_ = r.SetReadDeadline(time.Now())
		out = <-read
		return out, false, ctx.Err()
	}
	if procgroup.Alive(pid) {
		procgroup.Kill(pid, gitKillGrace)
	}
	if err != nil {
		if msg := bytes.TrimSpace(stderr.Bytes()); len(msg) > 0 {
			err = errors.New(string(msg))
		}
		return out, false, err
	}
	return out, true, nil
}

// limitedBuffer keeps the first n bytes written.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
