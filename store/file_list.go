package store

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/iac-code/iac-code/protocol"
)

type cachedMeta struct {
	info os.FileInfo
	meta Meta
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
