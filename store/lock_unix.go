//go:build unix

package store

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
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
	// closeLost closes fd if the lock is dropped without unlock, as an
	// *os.File's finalizer would.
	closeLost runtime.Cleanup
}

// lockSession takes the lock of the session directory dir without waiting.
// When another open file description holds it (another process, or another
// Store value in this one), it returns an *InUseError naming the holder's
// pid as written in the file.
func lockSession(dir, id string) (*sessionLock, error) {
	fd, err := openFD(dir+"/"+lockFile, os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		defer syscall.Close(fd)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &InUseError{ID: id, PID: readPID(fd)}
		}
		return nil, &os.PathError{Op: "flock", Path: dir + "/" + lockFile, Err: err}
	}
	// Who holds it, for the error another process reports. Best effort: the
	// lock, not the content, is what excludes. Always pidWidth bytes, so
	// each holder overwrites the last one's pid without a truncate.
	_, _ = syscall.Pwrite(fd, pidLine, 0)
	l := &sessionLock{fd: fd}
	l.closeLost = runtime.AddCleanup(l, func(fd int) { _ = syscall.Close(fd) }, fd)
	return l, nil
}

// pidWidth holds any pid (an int32) and its newline; older versions wrote
// the bare pid and a newline after a truncate, never more than this.
const pidWidth = 12

// pidLine is this process's pid, space-padded to pidWidth.
var pidLine = func() []byte {
	b := []byte(strconv.Itoa(os.Getpid()))
	for len(b) < pidWidth-1 {
		b = append(b, ' ')
	}
	return append(b, '\n')
}()

func readPID(fd int) int {
	var buf [32]byte
	n, _ := syscall.Pread(fd, buf[:], 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:max(n, 0)])))
	if err != nil {
		return 0
	}
	return pid
}

// unlock releases the lock (closing the descriptor releases the flock).
func (l *sessionLock) unlock() error {
	if l == nil || l.fd < 0 {
		return nil
	}
	l.closeLost.Stop()
	err := syscall.Close(l.fd)
	l.fd = -1
	return err
}
