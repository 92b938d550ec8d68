//go:build unix

package tools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/iac-code/iac-code/tools/procgroup"
)

// pipeDrainWait is how long output is still read after the process group
// is gone (a process that left the group may hold the pipes open).
const pipeDrainWait = 500 * time.Millisecond

func runShell(ctx context.Context, r shellRun) Result {
	if ctx.Err() != nil {
		return Errorf("bash: cancelled before the command started")
	}
	stdout := newHeadTail(r.limits.BashOutputBytes)
	stderr := newHeadTail(r.limits.BashOutputBytes)
	var stream *progressStreamer
	if r.progress != nil {
		stream = newProgressStreamer(r.progress, r.limits.ProgressInterval, 8<<20)
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		stream.finish()
		return Errorf(fmt.Sprintf("bash: %v", err))
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		stream.finish()
		return Errorf(fmt.Sprintf("bash: %v", err))
	}
	cmd := exec.Command("bash", "-c", r.command)
	cmd.Dir = r.dir
	cmd.Env = shellEnv()
	cmd.Stdin = nil // /dev/null
	cmd.Stdout = outW
	cmd.Stderr = errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if r.jail != nil {
		err = r.jail.Start(cmd, nil)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		stream.finish()
		return Errorf(fmt.Sprintf("bash: cannot start the command: %v", err))
	}
	outW.Close()
	errW.Close()
	pid := cmd.Process.Pid // also the process group id
	// The watchdog kills the group if the server dies before it ends.
	procgroup.Register(pid)
	defer procgroup.Unregister(pid) // the group is gone by then (killed or ended)

	var readers sync.WaitGroup
	pump := func(rd *os.File, into *headTail) {
		defer readers.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := rd.Read(buf)
			if n > 0 {
				into.Write(buf[:n])
				stream.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}
	readers.Add(2)
	go pump(outR, stdout)
	go pump(errR, stderr)

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	o := shellOutcome{pid: pid}
	timer := time.NewTimer(r.timeout)
	defer timer.Stop()
	var waitErr error
	select {
	case waitErr = <-exited:
		if procgroup.Alive(pid) { // background jobs left behind
			procgroup.Kill(pid, r.limits.BashKillGrace)
		}
	case <-timer.C:
		o.timedOut = true
		procgroup.Kill(pid, r.limits.BashKillGrace)
		waitErr = <-exited
	case <-ctx.Done():
		o.cancelled = true
		procgroup.Kill(pid, r.limits.BashKillGrace)
		waitErr = <-exited
	}

	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(pipeDrainWait):
		now := time.Now()
		_ = outR.SetReadDeadline(now)
		_ = errR.SetReadDeadline(now)
		<-drained
	}
	outR.Close()
	errR.Close()
	stream.finish()

	o.exitCode, o.signal = exitStatus(waitErr)
	return formatShellResult(r, o, stdout.String(), stderr.String())
}

func exitStatus(err error) (code int, signal string) {
	if err == nil {
		return 0, ""
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), signalName(ws.Signal())
		}
		return ee.ExitCode(), ""
	}
	return -1, ""
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	}
	return s.String()
}

// shellEnv is the server's environment without its secrets (ChildEnv) plus
// settings that keep commands from waiting for a terminal that is not there.
func shellEnv() []string {
	env := ChildEnv()
	add := func(k, v string) {
		if _, ok := os.LookupEnv(k); !ok {
			env = append(env, k+"="+v)
		}
	}
	add("GIT_TERMINAL_PROMPT", "0")
	add("GIT_PAGER", "cat")
	add("PAGER", "cat")
	return env
}
