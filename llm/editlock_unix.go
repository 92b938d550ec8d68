//go:build unix

package llm

import (
	"errors"
	"os"
	"syscall"
)

// lockEdits takes an exclusive flock(2) on path's lock file (path + ".lock",
// mode perm), waiting while another process or goroutine edits path; unlock
// lets go. The lock file is never replaced or removed, so every editor
// locks the same inode (path itself is replaced by each write), and the
// kernel drops the lock when its holder dies.
func lockEdits(path string, perm os.FileMode) (unlock func(), err error) {
	lockPath := path + lockSuffix
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, perm)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, &os.PathError{Op: "flock", Path: lockPath, Err: err}
	}
	return func() { _ = f.Close() }, nil // the close drops the lock
}
