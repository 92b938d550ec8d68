//go:build !unix

package store

import "time"

// Without flock(2) the file store excludes writers within one process only.
type sessionLock struct{}

func lockSession(dir, id string, wait time.Duration) (*sessionLock, error) {
	return &sessionLock{}, nil
}

func (l *sessionLock) markTurn(running bool) error { return nil }

func (l *sessionLock) unlock() error { return nil }
