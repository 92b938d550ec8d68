//go:build !unix

package store

import "time"

// Without flock(2) the file store excludes writers within one process only.
type sessionLock struct{ prior *RunningTurn }

func lockSession(dir, id string, wait time.Duration) (*sessionLock, error) {
	return &sessionLock{}, nil
}

func (l *sessionLock) markTurn(running bool, turn *RunningTurn) error { return nil }

// readRunningTurn: without flock(2) no process can tell another's turn.
func readRunningTurn(dir string) *RunningTurn { return nil }

func (l *sessionLock) unlock() error { return nil }

func (l *sessionLock) unlockKeeping(bool) error { return nil }

// priorTurn is the turn the lock file recorded when the lock was taken.
func (l *sessionLock) priorTurn() *RunningTurn {
	if l == nil {
		return nil
	}
	return l.prior
}
