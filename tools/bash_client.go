package tools

import (
	"context"
	"fmt"
	"time"
)

// terminalCleanupTimeout bounds each of terminal/kill and terminal/release
// after a cancel, and the wait for the exit status after a kill.
const terminalCleanupTimeout = 5 * time.Second

// RunVia runs the command in a client terminal when the client offers one:
// `bash -c <command>` in the session cwd with the output byte limit, so
// that it works both in clients that wrap commands in a shell and in those
// that run them as given. The exit is awaited for the call's timeout; on
// timeout or cancel the terminal is killed. Then its output is fetched
// (not after a cancel: nobody reads it) and the terminal released — exactly
// once for every terminal created, whatever happens. The result reads like
// the local run's: output, how it ended, exit code or signal, truncation.
func (c *bashCall) RunVia(ctx context.Context, cl Client, progress func(string)) Result {
	if cl == nil || !cl.Caps().Terminal {
		return c.Run(ctx, progress)
	}
	if ctx.Err() != nil {
		return Errorf("bash: cancelled before the command started")
	}
	l := c.t.Limits.WithDefaults()
	// The create is awaited even if the turn is cancelled meanwhile: a
	// terminal the client made must be released.
	keep := context.WithoutCancel(ctx)
	id, err := cl.CreateTerminal(keep, TerminalRequest{
		Command:         "bash",
		Args:            []string{"-c", c.command},
		Env:             [][2]string{{"GIT_TERMINAL_PROMPT", "0"}, {"GIT_PAGER", "cat"}, {"PAGER", "cat"}},
		Cwd:             c.dir,
		OutputByteLimit: int64(l.BashOutputBytes),
	})
	if err != nil {
		return Errorf(fmt.Sprintf("bash: the editor could not run the command in a terminal: %v", err))
	}
	cleanup := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(keep, terminalCleanupTimeout)
	}
	released := false
	release := func() {
		if released {
			return
		}
		released = true
		rctx, cancel := cleanup()
		defer cancel()
		_ = cl.ReleaseTerminal(rctx, id) // nothing more can be done about a failure
	}
	defer release()
	kill := func() {
		kctx, cancel := cleanup()
		defer cancel()
		_ = cl.KillTerminal(kctx, id)
	}
	o := shellOutcome{}
	cancelled := func() Result {
		kill()
		release()
		o.cancelled = true
		o.exitCode, o.signal = -1, ""
		return shellResult(c.timeout, o, nil, "", "the command was killed (terminal/kill)")
	}
	if ctx.Err() != nil {
		return cancelled() // cancelled while the terminal was being created
	}

	type waited struct {
		exit TerminalExit
		err  error
	}
	exited := make(chan waited, 1)
	waitCtx, stopWait := context.WithTimeout(keep, c.timeout+terminalCleanupTimeout)
	defer stopWait()
	go func() {
		ex, err := cl.WaitForTerminalExit(waitCtx, id)
		exited <- waited{ex, err}
	}()

	var exit *TerminalExit
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	select {
	case w := <-exited:
		if w.err != nil {
			return Errorf(fmt.Sprintf("bash: waiting for the editor's terminal failed: %v", w.err))
		}
		exit = &w.exit
	case <-timer.C:
		o.timedOut = true
		kill()
		select {
		case w := <-exited:
			if w.err == nil {
				exit = &w.exit
			}
		case <-time.After(terminalCleanupTimeout):
		}
	case <-ctx.Done():
		return cancelled()
	}

	octx, cancel := cleanup()
	out, err := cl.TerminalOutput(octx, id)
	cancel()
	release()
	if err != nil {
		return Errorf(fmt.Sprintf("bash: reading the editor's terminal output failed: %v", err))
	}
	if exit == nil {
		exit = out.Exit
	}
	o.exitCode, o.signal = terminalExitCode(exit)
	note := ""
	if out.Truncated {
		note = fmt.Sprintf("[output truncated: the editor kept the last %d bytes]", l.BashOutputBytes)
	}
	res := shellResult(c.timeout, o, [][2]string{{"output", out.Output}}, note, "the command was killed (terminal/kill)")
	raw := res.Raw.(map[string]any)
	raw["terminalId"] = id
	raw["truncated"] = out.Truncated
	return res
}

// terminalExitCode maps a client's exit status to the local convention:
// a signal is 128 + its number, named.
func terminalExitCode(e *TerminalExit) (int, string) {
	switch {
	case e == nil:
		return -1, ""
	case e.Signal != "":
		if n, ok := signalNumbers[e.Signal]; ok {
			return 128 + n, e.Signal
		}
		if e.ExitCode != nil {
			return *e.ExitCode, e.Signal
		}
		return -1, e.Signal
	case e.ExitCode != nil:
		return *e.ExitCode, ""
	}
	return -1, ""
}

// signalNumbers are the POSIX numbers of the signals a killed command
// usually reports (the same on Linux and macOS).
var signalNumbers = map[string]int{
	"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5, "SIGABRT": 6,
	"SIGFPE": 8, "SIGKILL": 9, "SIGSEGV": 11, "SIGPIPE": 13, "SIGALRM": 14, "SIGTERM": 15,
}
