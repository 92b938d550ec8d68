//go:build unix

package store

import (
	"bytes"
	"errors"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iac-code/iac-code/protocol"
)

// lockFile is the name of a session's lock file. It is never replaced
// (history.jsonl and meta.json are, by Rewrite and SaveMeta), so the lock
// stays on one inode for the session's whole life.
const lockFile = "lock"

// sessionLock is an exclusive flock(2) on <dir>/lock. The kernel drops it
// when its descriptor closes, which includes the death of the process, so a
// crashed server never leaves a session locked.
type sessionLock struct {
	fd int
	// turn: the file says a turn runs (markTurn), to clear at unlock.
	turn bool
	// prior is the turn the file recorded when the lock was taken: left by
	// a holder that paused it or died (store.TurnKeeper).
	prior *RunningTurn
	// size is the file's length as this holder left it (only holders
	// write the file), or more when unknown: a write of as many bytes or
	// more needs no truncate after it.
	size int64
	// closeLost closes fd if the lock is dropped without unlock, as an
	// *os.File's finalizer would.
	closeLost runtime.Cleanup
}

// lockSession takes the lock of the session directory dir. When another open
// file description holds it (another process, or another Store value in this
// one), it waits up to wait for the holder to let go, unless the holder is
// running a turn (markTurn): then, or once wait is over, it returns an
// *InUseError naming the holder's pid as written in the file. The wait is
// for holders that let go of idle sessions at once (the session actors do,
// see store.TurnMarker): they hold the lock only for the few milliseconds
// of a request between turns.
func lockSession(dir, id string, wait time.Duration) (*sessionLock, error) {
	fd, err := openFD(dir+"/"+lockFile, os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err = syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			break
		}
		pid, turn := readHolder(fd)
		if turn && onlyProbed(fd) {
			// Holders hold the lock exclusively; shared holds are session
			// lists probing the mark a holder killed mid-turn left
			// (readRunningTurn): no turn runs, wait for them as for an
			// idle holder.
			turn = false
		}
		if turn || !time.Now().Before(deadline) {
			_ = syscall.Close(fd)
			return nil, &InUseError{ID: id, PID: pid, Turn: turn}
		}
		time.Sleep(lockPoll)
	}
	if err != nil {
		defer syscall.Close(fd)
		return nil, &os.PathError{Op: "flock", Path: dir + "/" + lockFile, Err: err}
	}
	// Who holds it, for the error another process reports. Best effort: the
	// lock, not the content, is what excludes. Always holderWidth bytes, so
	// each holder overwrites the last one's line. The turn a holder left
	// (paused, or killed mid-turn) stays in the lines after it for this
	// holder to resume or clear; the first line no longer says a turn runs.
	prior, rest := readTurnLines(fd)
	size := int64(holderWidth + rest)
	if rest >= maxTurnLine {
		size = math.MaxInt64 // longer than any lines written: unknown, the next write truncates
	}
	_, _ = syscall.Pwrite(fd, holderLine(false), 0)
	if prior == nil && rest > 0 {
		_ = syscall.Ftruncate(fd, holderWidth)
		size = holderWidth
	}
	l := &sessionLock{fd: fd, prior: prior, size: size}
	l.closeLost = runtime.AddCleanup(l, func(fd int) { _ = syscall.Close(fd) }, fd)
	return l, nil
}

// lockPoll is how often a waiting lockSession tries again.
const lockPoll = 5 * time.Millisecond

// holderWidth holds any pid (an int32), the turn marker and a newline;
// older versions wrote the bare pid and a newline after a truncate, never
// more than 12 bytes.
const holderWidth = 20

// holderLine is "<pid>[ turn]", space-padded to holderWidth with a newline.
func holderLine(turn bool) []byte {
	b := make([]byte, 0, holderWidth)
	b = strconv.AppendInt(b, int64(os.Getpid()), 10)
	if turn {
		b = append(b, " turn"...)
	}
	for len(b) < holderWidth-1 {
		b = append(b, ' ')
	}
	return append(b, '\n')
}

// readHolder reads the holder's pid (0 when unreadable) and whether it is
// running a turn from the lock file's first line.
func readHolder(fd int) (pid int, turn bool) {
	var buf [32]byte
	n, _ := syscall.Pread(fd, buf[:], 0)
	line, _, _ := strings.Cut(string(buf[:max(n, 0)]), "\n")
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return 0, false
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil {
		pid = 0
	}
	return pid, len(fields) > 1 && fields[1] == "turn"
}

// The lock file's second line, while a turn runs whose details the holder
// recorded (TurnRecorder): "<startedAt RFC 3339> <prompt request id>", the
// id's bytes as its client sent them. An id that would make the line longer
// than maxTurnLine, or that has a line break, is not written: the lock then
// says only that a turn runs, and session lists show none. The third line
// (durable turns) is "<first seq> <turn id> <connection id>", "-" for an
// empty id; older versions read the second line only. The fourth, when the
// turn names MCP servers, is their names as a JSON array (left out when
// they would make the lines too long: the next holder does not wait for
// them then).
const maxTurnLine = 4096

func turnLine(turn *RunningTurn) []byte {
	if turn == nil || len(turn.PromptRequest) == 0 || bytes.ContainsAny(turn.PromptRequest, "\r\n") {
		return nil
	}
	b := turn.StartedAt.UTC().AppendFormat(make([]byte, 0, 40+len(turn.PromptRequest)), time.RFC3339Nano)
	b = append(append(append(b, ' '), turn.PromptRequest...), '\n')
	b = strconv.AppendInt(b, turn.FirstSeq, 10)
	for _, id := range []string{turn.ID, turn.Conn} {
		if id == "" || strings.ContainsAny(id, " \r\n") {
			id = "-"
		}
		b = append(append(b, ' '), id...)
	}
	b = append(b, '\n')
	if len(b) > maxTurnLine {
		return nil
	}
	if len(turn.MCPServers) > 0 {
		if names, err := protocol.Marshal(turn.MCPServers); err == nil && len(b)+len(names)+1 <= maxTurnLine {
			b = append(append(b, names...), '\n')
		}
	}
	return b
}

// readTurnLines parses the turn the lock file records after its first line
// (turnLine), nil when none; n is how many bytes follow the first line
// (maxTurnLine or more: at least that many).
func readTurnLines(fd int) (_ *RunningTurn, n int) {
	// Most lock files hold no turn: a small buffer first, read again
	// whole when the lines do not fit in it.
	var small [256]byte
	buf := small[:]
	n, _ = syscall.Pread(fd, buf, holderWidth)
	if n == len(buf) {
		buf = make([]byte, maxTurnLine)
		n, _ = syscall.Pread(fd, buf, holderWidth)
	}
	n = max(n, 0)
	line, rest, ok := bytes.Cut(buf[:n], []byte{'\n'})
	started, prompt, cut := bytes.Cut(line, []byte{' '})
	at, perr := time.Parse(time.RFC3339Nano, string(started))
	if !ok || !cut || perr != nil || len(prompt) == 0 {
		return nil, n
	}
	t := &RunningTurn{StartedAt: at, PromptRequest: bytes.Clone(prompt)}
	if third, rest, ok := bytes.Cut(rest, []byte{'\n'}); ok {
		if f := strings.Fields(string(third)); len(f) == 3 {
			t.FirstSeq, _ = strconv.ParseInt(f[0], 10, 64)
			if f[1] != "-" {
				t.ID = f[1]
			}
			if f[2] != "-" {
				t.Conn = f[2]
			}
		}
		if fourth, _, ok := bytes.Cut(rest, []byte{'\n'}); ok {
			var names []string
			if protocol.Unmarshal(fourth, &names) == nil && len(names) > 0 {
				t.MCPServers = names
			}
		}
	}
	return t, n
}

// markTurn tells processes that find the lock held whether a turn runs,
// and which (turn, nil when unknown) for their session lists.
func (l *sessionLock) markTurn(running bool, turn *RunningTurn) error {
	if l == nil || l.fd < 0 {
		return nil
	}
	b := holderLine(running)
	if running {
		b = append(b, turnLine(turn)...)
	}
	if _, err := syscall.Pwrite(l.fd, b, 0); err != nil {
		return err
	}
	l.turn = running
	if l.size <= int64(len(b)) {
		l.size = int64(len(b))
		return nil // the file is b
	}
	if err := syscall.Ftruncate(l.fd, int64(len(b))); err != nil {
		return err
	}
	l.size = int64(len(b))
	return nil
}

// onlyProbed reports whether the lock fd failed to take exclusively is held
// shared only, i.e. by probes of readRunningTurn and by no holder.
func onlyProbed(fd int) bool {
	for {
		err := syscall.Flock(fd, syscall.LOCK_SH|syscall.LOCK_NB)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return false
		}
		_ = syscall.Flock(fd, syscall.LOCK_UN)
		return true
	}
}

// readRunningTurn is the running turn the lock file of session directory
// dir names, when a live process holds that lock: a process killed mid-turn
// leaves the lines but not the lock. Nothing is read past the first line of
// a session without a turn. The probe takes the lock shared for a moment
// when nobody holds it (see lockSession).
func readRunningTurn(dir string) *RunningTurn {
	fd, err := openFD(dir+"/"+lockFile, os.O_RDONLY, 0)
	if err != nil {
		return nil
	}
	defer syscall.Close(fd)
	if _, turn := readHolder(fd); !turn {
		return nil
	}
	t, _ := readTurnLines(fd)
	if t == nil {
		return nil
	}
	for {
		err = syscall.Flock(fd, syscall.LOCK_SH|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err == nil {
		_ = syscall.Flock(fd, syscall.LOCK_UN)
		return nil
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return nil
	}
	return t
}

// unlock releases the lock (closing the descriptor releases the flock).
func (l *sessionLock) unlock() error { return l.unlockKeeping(false) }

// unlockKeeping is unlock; keepTurn leaves the recorded turn in the file
// for the next holder (store.TurnKeeper.Pause).
func (l *sessionLock) unlockKeeping(keepTurn bool) error {
	if l == nil || l.fd < 0 {
		return nil
	}
	l.closeLost.Stop()
	if l.turn && !keepTurn { // the turn is over for every reader, whatever they check
		_, _ = syscall.Pwrite(l.fd, holderLine(false), 0)
		_ = syscall.Ftruncate(l.fd, holderWidth)
		l.turn = false
	}
	err := syscall.Close(l.fd)
	l.fd = -1
	return err
}

// priorTurn is the turn the lock file recorded when the lock was taken.
func (l *sessionLock) priorTurn() *RunningTurn {
	if l == nil {
		return nil
	}
	return l.prior
}
