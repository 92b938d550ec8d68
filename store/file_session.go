package store

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/iac-code/iac-code/protocol"
)

// fileSession is the Session handle of a FileStore session.
type fileSession struct {
	st  *FileStore
	id  string
	dir string

	mu      sync.Mutex
	f       *os.File // nil while released
	lock    *sessionLock
	meta    Meta
	size    int64 // bytes of history written
	lastSeq int64
	dirty   bool // appended since the last fsync
	closed  bool
	buf     []byte
	// released: lock and history closed (Release); histInfo and metaInfo
	// are the files as this handle left them, to tell on Acquire whether
	// another writer changed them.
	released           bool
	histInfo, metaInfo os.FileInfo
	// prior is the turn the lock file recorded when this handle took it.
	prior *RunningTurn
}

var (
	_ Session    = (*fileSession)(nil)
	_ TurnMarker = (*fileSession)(nil)
	_ TurnKeeper = (*fileSession)(nil)
)

func (s *fileSession) ID() string { return s.id }

func (s *fileSession) LastSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSeq
}

func (s *fileSession) Meta() Meta {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.meta.clone()
}

// maxKeptBuf bounds the encode buffer kept between appends.
const maxKeptBuf = 1 << 20

func (s *fileSession) Append(entries ...Entry) error {
	if len(entries) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	stamped, err := stampAppend(entries, s.lastSeq, s.st.stamp())
	if err != nil {
		return err
	}
	var n int
	if len(stamped) == 1 {
		// The usual case: the line goes from the encoder to the file, a
		// long text written from its own string (a message can hold a
		// whole long answer).
		w := countingWriter{w: s.f}
		err = writeLine(&w, &stamped[0])
		n = w.n
		if err != nil && n == 0 {
			return fmt.Errorf("encode entry %d: %w", stamped[0].Seq, err)
		}
	} else {
		// Several entries: one write, so they land together.
		buf := s.buf[:0]
		for i := range stamped {
			if buf, err = appendLine(buf, &stamped[i]); err != nil {
				return err
			}
		}
		n, err = s.f.Write(buf)
		if cap(buf) <= maxKeptBuf {
			s.buf = buf[:0]
		} else {
			s.buf = nil
		}
	}
	if err != nil {
		// Cut a partial write so the next append starts on a fresh line.
		if n > 0 {
			_ = s.f.Truncate(s.size)
		}
		return fmt.Errorf("append history: %w", err)
	}
	s.size += int64(n)
	s.lastSeq = stamped[len(stamped)-1].Seq
	s.dirty = true
	copy(entries, stamped)
	return nil
}

// countingWriter counts what reached w.
type countingWriter struct {
	w io.Writer
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += n
	return n, err
}

// writable reports why the handle cannot write now, if it cannot. s.mu held.
func (s *fileSession) writable() error {
	switch {
	case s.closed:
		return ErrClosed
	case s.released:
		return ErrReleased
	case s.f == nil:
		return fmt.Errorf("session %s: history not open", s.id)
	}
	return nil
}

func (s *fileSession) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.sync()
}

func (s *fileSession) sync() error {
	if !s.dirty || s.f == nil {
		return nil
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("sync history: %w", err)
	}
	s.dirty = false
	return nil
}

func (s *fileSession) SaveMeta(m Meta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	m = m.replacing(s.meta, s.st.stamp())
	data, err := protocol.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode meta: %w", err)
	}
	if err := writeFileAtomic(s.dir, metaFile, data); err != nil {
		return fmt.Errorf("save meta: %w", err)
	}
	s.meta = m
	return nil
}

func (s *fileSession) Rewrite(entries []Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	data, err := encodeAll(entries)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(s.dir, historyFile, data); err != nil {
		return fmt.Errorf("rewrite history: %w", err)
	}
	// The handle still points at the replaced file: reopen.
	if s.f != nil {
		_ = s.f.Close()
		s.f = nil
	}
	f, err := openHistory(s.dir)
	if err != nil {
		return fmt.Errorf("reopen history: %w", err)
	}
	s.f, s.size, s.dirty = f, int64(len(data)), false
	s.lastSeq = 0
	if n := len(entries); n > 0 {
		s.lastSeq = entries[n-1].Seq
	}
	return nil
}

func (s *fileSession) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	defer s.st.release(s.id)
	if s.released {
		return nil
	}
	err := s.sync()
	if s.f != nil {
		if cerr := s.f.Close(); err == nil {
			err = cerr
		}
		s.f = nil
	}
	if uerr := s.lock.unlock(); err == nil {
		err = uerr
	}
	s.lock = nil
	return err
}
