package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// lock takes the cross-process lock of session id; a missing directory is
// ErrNotFound.
func (s *FileStore) lock(id string) (*sessionLock, error) {
	dir := filepath.Join(s.dir, id)
	l, err := lockSession(dir, id, s.lockWait)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return l, err
}

// MarkTurn implements TurnMarker.
func (s *fileSession) MarkTurn(running bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.released {
		return nil
	}
	return s.lock.markTurn(running, nil)
}

// RecordTurn implements TurnRecorder: in the lock file, which also marks
// the turn as MarkTurn does.
func (s *fileSession) RecordTurn(turn *RunningTurn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	return s.lock.markTurn(turn != nil, turn)
}

// PriorTurn implements TurnKeeper.
func (s *fileSession) PriorTurn() *RunningTurn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prior
}

func (s *fileSession) Release() error { return s.release(false) }

// Pause implements TurnKeeper: the recorded turn stays in the lock file.
func (s *fileSession) Pause() error { return s.release(true) }

func (s *fileSession) release(keepTurn bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.released {
		return nil
	}
	err := s.sync()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f = nil
	s.histInfo, _ = os.Stat(filepath.Join(s.dir, historyFile))
	s.metaInfo, _ = os.Stat(filepath.Join(s.dir, metaFile))
	if uerr := s.lock.unlockKeeping(keepTurn); err == nil {
		err = uerr
	}
	s.lock = nil
	s.released = true
	return err
}

func (s *fileSession) Acquire() (_ []Entry, changed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false, ErrClosed
	}
	if !s.released {
		return nil, false, nil
	}
	lock, err := s.st.lock(s.id)
	if err != nil {
		return nil, false, err
	}
	defer func() {
		if err != nil {
			_ = lock.unlock()
		}
	}()
	var entries []Entry
	if !s.unchanged() {
		l, err := s.st.load(s.id)
		if err != nil {
			return nil, false, err
		}
		s.meta, s.size, s.lastSeq, entries, changed = l.meta, l.size, l.lastSeq, l.entries, true
		if entries == nil {
			entries = []Entry{}
		}
	}
	f, err := openHistory(s.dir)
	if err != nil {
		return nil, false, err
	}
	s.f, s.lock, s.released, s.dirty, s.prior = f, lock, false, false, lock.priorTurn()
	s.histInfo, s.metaInfo = nil, nil
	return entries, changed, nil
}

// unchanged reports whether history and meta are the files this handle
// left at Release (same inode, size and mtime). s.mu held.
func (s *fileSession) unchanged() bool {
	same := func(name string, was os.FileInfo) bool {
		now, err := os.Stat(filepath.Join(s.dir, name))
		return err == nil && was != nil && sameVersion(was, now)
	}
	return same(historyFile, s.histInfo) && same(metaFile, s.metaInfo)
}
