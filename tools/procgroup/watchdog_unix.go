//go:build unix

package procgroup

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// WatchdogGrace is how long the watchdog waits after SIGTERM before it
// sends SIGKILL to the groups of a dead server.
const WatchdogGrace = time.Second

// Watchdog is the server's handle on its watchdog process.
type Watchdog struct {
	cmd  *exec.Cmd
	pipe *os.File
	done chan struct{}
}

// StartWatchdog starts cmd as the watchdog: cmd runs the server binary's
// hidden subcommand, which calls RunWatchdog on fd 3. It gets the read end
// of the registration pipe as fd 3, its own process group (a Ctrl-C to the
// server's group does not reach it), /dev/null for stdin and stdout, and
// stderr for its log line. Registrations made before and after go to it;
// broken is told once if the watchdog stops reading.
func StartWatchdog(cmd *exec.Cmd, stderr io.Writer, broken func(error)) (*Watchdog, error) {
	wd, err := spawnWatchdog(cmd, stderr)
	if err != nil {
		return nil, err
	}
	reg.Lock()
	defer reg.Unlock()
	attachLocked(wd, broken)
	return wd, nil
}

// spawnWatchdog starts cmd with the read end of a new registration pipe.
func spawnWatchdog(cmd *exec.Cmd, stderr io.Writer) (*Watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{r}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	r.Close() // only the watchdog reads; the write end is ours alone (close-on-exec)
	wd := &Watchdog{cmd: cmd, pipe: w, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(wd.done) }()
	return wd, nil
}

// attachLocked makes wd the registry's watchdog and tells it the groups
// registered so far. reg is locked.
func attachLocked(wd *Watchdog, broken func(error)) {
	for g := range reg.groups {
		if _, err := io.WriteString(wd.pipe, "+"+strconv.Itoa(g)+"\n"); err != nil {
			break
		}
	}
	reg.pipe, reg.broken = wd.pipe, broken
}

// OnDemand is a watchdog started at the first Register instead of at boot:
// it guards tool process groups only, so a server that starts none (an
// idle one, one that only chats) runs no second process. Nothing is lost
// by waiting: the group is written to the pipe before Register returns,
// and the watchdog reads it even if the server is killed the next instant.
type OnDemand struct {
	newCmd  func() *exec.Cmd
	stderr  io.Writer
	started func(pid int, err error)
	broken  func(error)
	wd      *Watchdog // guarded by reg
	tried   bool      // guarded by reg: one start, as at boot
}

// StartWatchdogOnDemand arranges for newCmd's process to become the
// watchdog at the first Register (at once if groups are registered
// already). started is told the outcome, under the registry's lock (keep
// it short: a log line); broken as for StartWatchdog.
func StartWatchdogOnDemand(newCmd func() *exec.Cmd, stderr io.Writer, started func(pid int, err error), broken func(error)) *OnDemand {
	od := &OnDemand{newCmd: newCmd, stderr: stderr, started: started, broken: broken}
	reg.Lock()
	defer reg.Unlock()
	reg.onDemand = od
	if len(reg.groups) > 0 {
		od.startLocked()
	}
	return od
}

// startLocked starts the watchdog, once. reg is locked.
func (od *OnDemand) startLocked() {
	od.tried = true
	wd, err := spawnWatchdog(od.newCmd(), od.stderr)
	if err == nil {
		od.wd = wd
		attachLocked(wd, od.broken)
	}
	if od.started != nil {
		od.started(wd.Pid(), err)
	}
}

// Started is the watchdog if it was started (nil before the first group).
func (od *OnDemand) Started() *Watchdog {
	if od == nil {
		return nil
	}
	reg.Lock()
	defer reg.Unlock()
	return od.wd
}

// Close is Watchdog.Close for the watchdog if it started; either way no
// watchdog starts after it. A nil OnDemand is fine.
func (od *OnDemand) Close(timeout time.Duration) {
	if od == nil {
		return
	}
	reg.Lock()
	if reg.onDemand == od {
		reg.onDemand = nil
	}
	od.tried = true
	wd := od.wd
	reg.Unlock()
	wd.Close(timeout)
}

// Pid is the watchdog's process id (0 for a nil Watchdog).
func (wd *Watchdog) Pid() int {
	if wd == nil {
		return 0
	}
	return wd.cmd.Process.Pid
}

// Close ends the watchdog at an orderly shutdown (after KillAll): the pipe
// closes, the watchdog kills whatever is still registered and exits. Close
// waits for that, at most timeout. A nil Watchdog (none started) is fine.
func (wd *Watchdog) Close(timeout time.Duration) {
	if wd == nil {
		return
	}
	reg.Lock()
	if reg.pipe == wd.pipe {
		reg.pipe = nil
	}
	reg.Unlock()
	_ = wd.pipe.Close()
	select {
	case <-wd.done:
	case <-time.After(timeout):
	}
}

// RunWatchdog is the watchdog process's whole life: it ignores SIGINT,
// SIGTERM and SIGHUP (meant for the server; the watchdog must outlive it),
// reads "+pgid" and "-pgid" lines from in until EOF — the server is gone,
// however it died — then kills the groups still registered (SIGTERM,
// SIGKILL after grace) and returns how many there were.
func RunWatchdog(in io.Reader, grace time.Duration, log zerolog.Logger) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	groups := map[int]struct{}{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 2 {
			continue
		}
		pgid, err := strconv.Atoi(line[1:])
		if err != nil || pgid <= 1 {
			continue
		}
		switch line[0] {
		case '+':
			groups[pgid] = struct{}{}
		case '-':
			delete(groups, pgid)
		}
	}
	if len(groups) == 0 {
		return 0
	}
	start := time.Now()
	list := make([]int, 0, len(groups))
	for g := range groups {
		list = append(list, g)
	}
	killGroups(list, grace)
	log.Warn().Ints("pgids", list).Dur("took", time.Since(start)).
		Msg("server gone: killed the tool process groups it left")
	return len(list)
}
