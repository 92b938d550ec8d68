//go:build unix

package mcp

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/iac-code/iac-code/tools/procgroup"
)

// stdioTransport runs the server's command in its own process group, in
// the session cwd, with the agent's environment (without its secrets) plus
// the entry's variables, and its stderr going to the log.
func (s *Server) stdioTransport() (sdk.Transport, error) {
	base := s.opts.ChildEnv
	if base == nil {
		base = defaultChildEnv
	}
	env := mergeEnv(base(), s.cfg.Env)
	path, err := lookPath(s.cfg.Command, env)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        append([]string{s.cfg.Command}, s.cfg.Args...),
		Env:         env,
		Dir:         s.opts.Cwd,
		Stderr:      w,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	return &groupTransport{inner: &sdk.CommandTransport{Command: cmd, TerminateDuration: s.opts.Grace},
		server: s, stderrR: r, stderrW: w}, nil
}

// groupTransport registers the server's process group with the watchdog
// the moment the process has started, so that no exit of ours leaves it
// running.
type groupTransport struct {
	inner            *sdk.CommandTransport
	server           *Server
	stderrR, stderrW *os.File
}

func (t *groupTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	var conn sdk.Connection
	var err error
	if jail := t.server.opts.Jail; jail != nil {
		cmd := t.inner.Command
		own := ownDirs(cmd.Path, cmd.Args[1:], func(name string) string { return envValue(cmd.Env, name) })
		if serr := jail.StartWith(cmd, func() error { conn, err = t.inner.Connect(ctx); return err }, own); serr != nil && err == nil {
			err = serr // the sandbox refused: nothing started
		}
	} else {
		conn, err = t.inner.Connect(ctx)
	}
	t.stderrW.Close() // the child has its copy
	if err != nil {
		t.stderrR.Close()
		return nil, err
	}
	pid := t.inner.Command.Process.Pid // also the group id (Setpgid)
	procgroup.Register(pid)
	s := t.server
	s.mu.Lock()
	s.pgid = pid
	closed := s.closed
	s.mu.Unlock()
	s.stderrRead.Store(true)
	go s.readStderr(t.stderrR)
	if closed {
		// Closed while starting: Close may not have seen the group.
		go s.release(false)
	}
	return conn, nil
}

// endGroup waits up to grace for process group pgid to end on its own,
// then kills every member left (SIGKILL) and forgets the group.
func endGroup(pgid int, grace time.Duration) {
	deadline := time.Now().Add(grace)
	for procgroup.Alive(pgid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if procgroup.Alive(pgid) {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		stop := time.Now().Add(time.Second)
		for procgroup.Alive(pgid) && time.Now().Before(stop) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	procgroup.Unregister(pgid)
}
