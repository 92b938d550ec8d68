package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/protocol"
)

// File names inside a session directory.
const (
	historyFile = "history.jsonl"
	metaFile    = "meta.json"
	// Directories being built (Create, Fork) or deleted carry these
	// prefixes; they are never listed and are swept by New after staleAge.
	tmpPrefix = ".tmp-"
	delPrefix = ".del-"
	staleAge  = time.Hour
)

// FileStore is the default Store: plain files under <root>/sessions.
type FileStore struct {
	dir string
	// dirFile is dir, open for its fsyncs (one per create and delete).
	dirFile *os.File
	log     zerolog.Logger
	now     func() time.Time
	// lockWait: see WithLockWait.
	lockWait time.Duration
	// usage counts tokens under <root>/usage (UsageCounter).
	usage *fileUsage

	mu   sync.Mutex
	open map[string]bool // ids with a live Session handle (or being deleted)
	// metas caches List's reads: an entry is used while meta.json is still
	// the same file (atomic replaces create a new one) with the same mtime
	// and size, so List costs one stat per session instead of a read.
	metas map[string]cachedMeta
}

func sameVersion(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

var _ Store = (*FileStore)(nil)

// New opens (creating it if needed) the store under root, e.g. DefaultRoot().
// Leftovers of interrupted creates and deletes older than an hour are removed.
// Options about leases are ignored.
func New(root string, opts ...Option) (*FileStore, error) {
	o := newOptions(opts)
	s := &FileStore{dir: filepath.Join(root, "sessions"), usage: newFileUsage(root), log: o.log, now: o.now, lockWait: o.lockWait,
		open: map[string]bool{}, metas: map[string]cachedMeta{}}
	if err := os.MkdirAll(s.dir, dirPerm); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if runtime.GOOS != "windows" { // which cannot fsync a directory
		d, err := os.Open(s.dir)
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		s.dirFile = d
	}
	s.sweep()
	return s, nil
}

// Close implements Backend: it closes the sessions directory, held open
// for its fsyncs, and the usage day file. Session handles stay usable.
func (s *FileStore) Close() error {
	s.usage.close()
	s.mu.Lock()
	d := s.dirFile
	s.dirFile = nil
	s.mu.Unlock()
	if d == nil {
		return nil
	}
	return d.Close()
}

// syncSessions makes the creations and renames of session directories
// durable.
func (s *FileStore) syncSessions() error {
	s.mu.Lock()
	d := s.dirFile
	s.mu.Unlock()
	if d == nil {
		return syncDir(s.dir)
	}
	return d.Sync()
}

// Dir is the directory holding one subdirectory per session.
func (s *FileStore) Dir() string { return s.dir }

func (s *FileStore) sweep() {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, tmpPrefix) && !strings.HasPrefix(name, delPrefix) {
			continue
		}
		if info, err := e.Info(); err == nil && s.now().Sub(info.ModTime()) > staleAge {
			_ = os.RemoveAll(filepath.Join(s.dir, name))
		}
	}
}

func (s *FileStore) stamp() time.Time { return s.now().UTC() }

// acquire marks id as in use in this process.
func (s *FileStore) acquire(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[id] {
		return false
	}
	s.open[id] = true
	return true
}

func (s *FileStore) release(id string) {
	s.mu.Lock()
	delete(s.open, id)
	s.mu.Unlock()
}

// Create implements Store.
func (s *FileStore) Create(meta Meta) (Session, error) {
	if !ValidID(meta.ID) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidID, meta.ID)
	}
	sess, err := s.build(meta.born(meta.ID, meta.ForkedFrom, s.stamp()), nil, 0)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return sess, nil
}

// Fork implements Store.
func (s *FileStore) Fork(srcID, newID string) (Session, []Entry, error) {
	if !ValidID(srcID) {
		return nil, nil, fmt.Errorf("%w: invalid id %q", ErrNotFound, srcID)
	}
	if !ValidID(newID) {
		return nil, nil, fmt.Errorf("%w: %q", ErrInvalidID, newID)
	}
	srcDir := filepath.Join(s.dir, srcID)
	meta, err := s.readMeta(srcDir)
	if err != nil {
		return nil, nil, err
	}
	// The source may be open and appending: a line being written shows as an
	// unterminated tail and is left out of the copy.
	h, err := readHistory(filepath.Join(srcDir, historyFile), s.log.With().Str("session", srcID).Logger())
	if err != nil {
		return nil, nil, err
	}
	data, err := encodeAll(h.entries)
	if err != nil {
		return nil, nil, err
	}
	meta = meta.born(newID, srcID, s.stamp())
	var last int64
	if n := len(h.entries); n > 0 {
		last = h.entries[n-1].Seq
	}
	sess, err := s.build(meta, data, last)
	if err != nil {
		return nil, nil, err
	}
	return sess, h.entries, nil
}

// build writes a new session directory under a temporary name and renames it
// into place, so a session directory always has both files.
func (s *FileStore) build(meta Meta, history []byte, lastSeq int64) (_ *fileSession, err error) {
	if !s.acquire(meta.ID) {
		return nil, fmt.Errorf("%w: %s", ErrExists, meta.ID)
	}
	defer func() {
		if err != nil {
			s.release(meta.ID)
		}
	}()
	final := filepath.Join(s.dir, meta.ID)
	metaData, err := protocol.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("encode meta: %w", err)
	}
	tmp, err := os.MkdirTemp(s.dir, tmpPrefix+meta.ID+"-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err = writeFileSynced(tmp, metaFile, metaData); err != nil {
		return nil, err
	}
	// The history's descriptor is the handle's: it stays valid across the
	// rename. An empty history needs no fsync (a lost empty file reads as
	// an empty history); the directory's fsync below makes its name durable.
	f, err := openFile(filepath.Join(tmp, historyFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	if len(history) > 0 {
		if _, err = f.Write(history); err != nil {
			return nil, err
		}
		if err = f.Sync(); err != nil {
			return nil, err
		}
	}
	// Locked before it becomes visible: the lock is on the inode, which the
	// rename keeps.
	lock, err := lockSession(tmp, meta.ID, 0)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = lock.unlock()
		}
	}()
	if err = syncDir(tmp); err != nil {
		return nil, err
	}
	// Renaming onto an existing (non-empty) session directory fails, so
	// taking an existing id needs no check before all this work.
	if err = renameFile(tmp, final); err != nil {
		if _, serr := os.Lstat(final); serr == nil {
			return nil, fmt.Errorf("%w: %s", ErrExists, meta.ID)
		}
		return nil, err
	}
	if err = s.syncSessions(); err != nil {
		return nil, err
	}
	return s.handle(meta, f, int64(len(history)), lastSeq, lock), nil
}

// handle makes the Session handle of an open history f. The caller holds
// the id and the session's lock, which the handle now owns.
func (s *FileStore) handle(meta Meta, f *os.File, size, lastSeq int64, lock *sessionLock) *fileSession {
	return &fileSession{st: s, id: meta.ID, dir: filepath.Join(s.dir, meta.ID), f: f, lock: lock, meta: meta, size: size, lastSeq: lastSeq,
		prior: lock.priorTurn()}
}

func openHistory(dir string) (*os.File, error) {
	return openFile(filepath.Join(dir, historyFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, filePerm)
}

// loaded is a session read from disk under its lock.
type loaded struct {
	meta    Meta
	entries []Entry
	size    int64
	lastSeq int64
}

// load reads meta and history of session id (its lock held), repairing an
// unterminated last line so appends start on a fresh one.
func (s *FileStore) load(id string) (loaded, error) {
	dir := filepath.Join(s.dir, id)
	meta, err := s.readMeta(dir)
	if err != nil {
		return loaded{}, err
	}
	log := s.log.With().Str("session", id).Logger()
	path := filepath.Join(dir, historyFile)
	h, err := readHistory(path, log)
	if err != nil {
		return loaded{}, err
	}
	size := h.size
	if h.complete < h.size {
		// An unterminated last line (crash mid-write): terminate it if it
		// was a whole entry, else cut it off, so appends start on a new line.
		if size, err = fixTail(path, h); err != nil {
			return loaded{}, err
		}
		log.Warn().Bool("kept", h.tailKept).Int64("offset", h.complete).Msg("repaired unterminated history tail")
	}
	l := loaded{meta: meta, entries: h.entries, size: size}
	if n := len(h.entries); n > 0 {
		l.lastSeq = h.entries[n-1].Seq
	}
	return l, nil
}

// Open implements Store.
func (s *FileStore) Open(id string) (_ Session, _ []Entry, err error) {
	if !ValidID(id) {
		return nil, nil, fmt.Errorf("%w: invalid id %q", ErrNotFound, id)
	}
	if !s.acquire(id) {
		return nil, nil, &InUseError{ID: id}
	}
	defer func() {
		if err != nil {
			s.release(id)
		}
	}()
	lock, err := s.lock(id)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			_ = lock.unlock()
		}
	}()
	l, err := s.load(id)
	if err != nil {
		return nil, nil, err
	}
	f, err := openHistory(filepath.Join(s.dir, id))
	if err != nil {
		return nil, nil, err
	}
	return s.handle(l.meta, f, l.size, l.lastSeq, lock), l.entries, nil
}

func fixTail(path string, h history) (int64, error) {
	f, err := openFile(path, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	size := h.complete
	if h.tailKept {
		if _, err = f.WriteAt([]byte{'\n'}, h.size); err != nil {
			return 0, err
		}
		size = h.size + 1
	} else if err = f.Truncate(h.complete); err != nil {
		return 0, err
	}
	return size, f.Sync()
}

func (s *FileStore) readMeta(dir string) (Meta, error) {
	data, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
				return Meta{}, fmt.Errorf("%w: %s", ErrNotFound, filepath.Base(dir))
			}
		}
		return Meta{}, fmt.Errorf("read meta: %w", err)
	}
	var m Meta
	if err := safeUnmarshal(data, &m); err != nil {
		return Meta{}, fmt.Errorf("decode %s: %w", filepath.Join(dir, metaFile), err)
	}
	m.ID = filepath.Base(dir)
	return m, nil
}

func safeUnmarshal(data []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decode panic: %v", r)
		}
	}()
	return protocol.Unmarshal(data, v)
}

// Delete implements Store. The directory is first renamed away, so a crash
// mid-removal never leaves a half session visible.
func (s *FileStore) Delete(id string) error {
	if !ValidID(id) {
		return fmt.Errorf("%w: invalid id %q", ErrNotFound, id)
	}
	if !s.acquire(id) {
		return &InUseError{ID: id}
	}
	defer s.release(id)
	dir := filepath.Join(s.dir, id)
	if _, err := os.Lstat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return err
	}
	lock, err := s.lock(id)
	if err != nil {
		return err
	}
	defer lock.unlock()
	gone := filepath.Join(s.dir, fmt.Sprintf("%s%s-%d", delPrefix, id, time.Now().UnixNano()))
	if err := renameFile(dir, gone); err != nil {
		return err
	}
	if err := s.syncSessions(); err != nil {
		return err
	}
	return os.RemoveAll(gone)
}
