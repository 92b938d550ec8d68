package store

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
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

	mu   sync.Mutex
	open map[string]bool // ids with a live Session handle (or being deleted)
	// metas caches List's reads: an entry is used while meta.json is still
	// the same file (atomic replaces create a new one) with the same mtime
	// and size, so List costs one stat per session instead of a read.
	metas map[string]cachedMeta
}

type cachedMeta struct {
	info os.FileInfo
	meta Meta
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
	s := &FileStore{dir: filepath.Join(root, "sessions"), log: o.log, now: o.now, lockWait: o.lockWait,
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
// for its fsyncs. Session handles stay usable.
func (s *FileStore) Close() error {
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
	return &fileSession{st: s, id: meta.ID, dir: filepath.Join(s.dir, meta.ID), f: f, lock: lock, meta: meta, size: size, lastSeq: lastSeq}
}

func openHistory(dir string) (*os.File, error) {
	return openFile(filepath.Join(dir, historyFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, filePerm)
}

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

// listCursor is the decoded form of List's opaque cursor: the sort key of
// the last item returned.
type listCursor struct {
	U  int64  `json:"u"`
	ID string `json:"id"`
}

// before reports whether a sorts before b (newest first, then by id).
func before(au int64, aid string, bu int64, bid string) bool {
	if au != bu {
		return au > bu
	}
	return aid < bid
}

// List implements Store.
func (s *FileStore) List(cwd, cursor string, limit int) ([]Meta, string, error) {
	return s.ListOwned("", cwd, cursor, limit)
}

// ListOwned implements Store; owner "" lists every owner's.
func (s *FileStore) ListOwned(owner, cwd, cursor string, limit int) ([]Meta, string, error) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	var after *listCursor
	if cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cursor)
		var c listCursor
		if err != nil || safeUnmarshal(raw, &c) != nil || c.ID == "" {
			return nil, "", ErrInvalidCursor
		}
		after = &c
	}
	if cwd != "" {
		cwd = filepath.Clean(cwd)
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, "", fmt.Errorf("list sessions: %w", err)
	}
	metas := make([]Meta, 0, len(ents))
	seen := make(map[string]bool, len(ents))
	for _, e := range ents {
		id := e.Name()
		if !e.IsDir() || !ValidID(id) {
			continue
		}
		m, ok := s.listMeta(id)
		if !ok {
			continue
		}
		seen[id] = true
		if (cwd != "" && filepath.Clean(m.Cwd) != cwd) || (owner != "" && m.OwnedBy() != owner) {
			continue
		}
		metas = append(metas, m)
	}
	s.mu.Lock()
	for id := range s.metas {
		if !seen[id] {
			delete(s.metas, id)
		}
	}
	s.mu.Unlock()
	sort.Slice(metas, func(i, j int) bool {
		return before(metas[i].UpdatedAt.UnixNano(), metas[i].ID, metas[j].UpdatedAt.UnixNano(), metas[j].ID)
	})
	start := 0
	if after != nil {
		start = sort.Search(len(metas), func(i int) bool {
			return before(after.U, after.ID, metas[i].UpdatedAt.UnixNano(), metas[i].ID)
		})
	}
	end := min(start+limit, len(metas))
	page := metas[start:end:end]
	for i := range page {
		page[i] = page[i].clone() // cached maps stay private
		page[i].RunningTurn = readRunningTurn(filepath.Join(s.dir, page[i].ID))
	}
	next := ""
	if end < len(metas) {
		last := page[len(page)-1]
		next = base64.RawURLEncoding.EncodeToString(protocol.MustMarshal(listCursor{U: last.UpdatedAt.UnixNano(), ID: last.ID}))
	}
	return page, next, nil
}

// Stat implements Store.
func (s *FileStore) Stat(id string) (Meta, error) {
	if !ValidID(id) {
		return Meta{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	m, ok := s.listMeta(id)
	if !ok {
		return Meta{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return m.clone(), nil
}

// listMeta returns the meta of session id, from the cache while meta.json
// is unchanged. Unreadable metas are logged and skipped.
func (s *FileStore) listMeta(id string) (Meta, bool) {
	dir := filepath.Join(s.dir, id)
	info, err := os.Stat(filepath.Join(dir, metaFile))
	if err == nil {
		s.mu.Lock()
		c, ok := s.metas[id]
		s.mu.Unlock()
		if ok && sameVersion(c.info, info) {
			return c.meta, true
		}
	}
	// Stat before read: if the file is replaced in between, the newer
	// content is cached under the older info and re-read next time.
	m, rerr := s.readMeta(dir)
	if rerr != nil {
		if !errors.Is(rerr, ErrNotFound) { // not deleted meanwhile
			s.log.Warn().Str("session", id).Err(rerr).Msg("skipping unreadable session meta")
		}
		return Meta{}, false
	}
	if err == nil {
		s.mu.Lock()
		s.metas[id] = cachedMeta{info: info, meta: m}
		s.mu.Unlock()
	}
	return m, true
}

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
}

var (
	_ Session      = (*fileSession)(nil)
	_ TurnMarker   = (*fileSession)(nil)
	_ TurnRecorder = (*fileSession)(nil)
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
		// The usual case: the line goes from the encoder to the file, not
		// copied on the way (a message can hold a whole long answer).
		w := countingWriter{w: s.f}
		err = protocol.EncodeLine(&w, &stamped[0])
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

func (s *fileSession) Release() error {
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
	if uerr := s.lock.unlock(); err == nil {
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
	s.f, s.lock, s.released, s.dirty = f, lock, false, false
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
