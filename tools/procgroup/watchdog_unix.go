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

	reg.Lock()
	defer reg.Unlock()
	for g := range reg.groups { // anything registered before the watchdog
		if _, err := io.WriteString(w, "+"+strconv.Itoa(g)+"\n"); err != nil {
			break
		}
	}
	reg.pipe, reg.broken = w, broken
	return wd, nil
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
