package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/iac-code/iac-code/protocol"
)

// listedTurn are the running turn's columns of a session row as List
// reports them: whether it is listed — only while the lease that recorded
// it is live (a turn recorded before migration 0006 has no epoch) — and the
// turn.
const listedTurn = `s.turn_started_at IS NOT NULL AND COALESCE(s.turn_epoch, s.lease_epoch) = s.lease_epoch
	AND NOT ` + leaseFree + `, ` + turnColumns

// turnColumns are the recorded turn of a session row (scanTurn).
const turnColumns = `s.turn_started_at, s.turn_prompt_request, s.turn_conn, s.turn_first_seq, s.turn_id,
	s.turn_mcp_servers`

// recordedTurn scans turnColumns.
type recordedTurn struct {
	started  *time.Time
	prompt   []byte
	conn, id *string
	firstSeq *int64
	mcp      []string
}

func (r *recordedTurn) dest() []any {
	return []any{&r.started, &r.prompt, &r.conn, &r.firstSeq, &r.id, &r.mcp}
}

// turn is the recorded turn, nil when none.
func (r *recordedTurn) turn() *RunningTurn {
	if r.started == nil || r.prompt == nil {
		return nil
	}
	t := &RunningTurn{StartedAt: r.started.UTC(), PromptRequest: r.prompt}
	if r.conn != nil {
		t.Conn = *r.conn
	}
	if r.id != nil {
		t.ID = *r.id
	}
	if r.firstSeq != nil {
		t.FirstSeq = *r.firstSeq
	}
	if len(r.mcp) > 0 {
		t.MCPServers = r.mcp
	}
	return t
}

// Create implements Store.
func (s *PGStore) Create(meta Meta) (Session, error) {
	if !ValidID(meta.ID) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidID, meta.ID)
	}
	meta = meta.born(meta.ID, meta.ForkedFrom, s.stamp())
	data, err := protocol.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("encode meta: %w", err)
	}
	ctx, cancel := opCtx()
	defer cancel()
	var epoch int64
	err = s.pool.QueryRow(ctx, `INSERT INTO iac_sessions (id, cwd, updated_at, meta, lease_owner, lease_epoch, lease_expires, owner)
		VALUES ($1, $2, $3, $4, $5, 1, now() + $6::interval, $7) ON CONFLICT (id) DO NOTHING RETURNING lease_epoch`,
		meta.ID, cleanCwd(meta.Cwd), meta.UpdatedAt, data, s.self, s.ttl, meta.Owner).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrExists, meta.ID)
	}
	if err != nil {
		return nil, s.dbErr("create "+meta.ID, err)
	}
	return s.handle(meta, epoch, 0), nil
}

func (s *PGStore) handle(meta Meta, epoch, lastSeq int64) *pgSession {
	h := &pgSession{st: s, id: meta.ID, epoch: epoch, meta: meta, lastSeq: lastSeq}
	s.renewing(h, true)
	return h
}

// acquireSQL takes the lease of session $1 for owner $2 for $3 when it is
// free, or when $2 still holds it at epoch $4 (Acquire after a Release
// that did not reach the database; 0 matches nothing). The row lock makes
// concurrent acquisitions queue; each re-checks the row as the previous one
// left it, so exactly one wins. It returns the new epoch, the meta and the
// previous owner (for the takeover count).
//
// The turn recorded as running stays, for the new holder to resume or clear
// (TurnKeeper), and is returned; one recorded before migration 0006 gets the
// epoch that recorded it, so that List does not show it as the new
// holder's.
const acquireSQL = `UPDATE iac_sessions s
	SET lease_owner = $2, lease_epoch = s.lease_epoch + 1, lease_expires = now() + $3::interval,
		turn_epoch = CASE WHEN s.turn_started_at IS NOT NULL THEN COALESCE(s.turn_epoch, s.lease_epoch) END
	FROM (SELECT lease_owner FROM iac_sessions WHERE id = $1) AS old
	WHERE s.id = $1 AND (` + leaseFree + ` OR (s.lease_owner = $2 AND s.lease_epoch = $4))
	RETURNING s.lease_epoch, s.meta, old.lease_owner, ` + turnColumns

// historySQL reads the history of $1 if owner $2 holds its lease at an
// epoch other than $3 (0: at any epoch); in the same implicit transaction as
// acquireSQL it reads nothing when that failed.
const historySQL = `SELECT h.seq, h.entry FROM iac_history h
	JOIN iac_sessions s ON s.id = h.session_id AND s.lease_owner = $2 AND s.lease_epoch <> $3
	WHERE h.session_id = $1 ORDER BY h.seq`

// Open implements Store.
func (s *PGStore) Open(id string) (Session, []Entry, error) {
	if !ValidID(id) {
		return nil, nil, fmt.Errorf("%w: invalid id %q", ErrNotFound, id)
	}
	t, err := s.take(id, 0, 0)
	if err != nil {
		return nil, nil, err
	}
	h := s.handle(t.meta, t.epoch, t.last)
	h.prior = t.prior
	return h, t.entries, nil
}

// taken is a session whose lease take got: the new epoch, and the meta and
// history unless they were not read (read false).
type taken struct {
	epoch   int64
	read    bool
	meta    Meta
	entries []Entry
	last    int64
	// prior is the turn recorded as running when the lease was taken.
	prior *RunningTurn
}

// take acquires the lease of id and reads the session, in one round trip
// and one transaction. held is an epoch at which this store may still hold
// the lease, 0 for none; the session is not read when the new epoch is
// unread (0: always read). Errors: ErrNotFound, *InUseError, database.
func (s *PGStore) take(id string, held, unread int64) (taken, error) {
	ctx, cancel := opCtx()
	defer cancel()
	for attempt := 0; ; attempt++ {
		b := &pgx.Batch{}
		b.Queue(acquireSQL, id, s.self, s.ttl, held)
		b.Queue(historySQL, id, s.self, unread)
		br := s.pool.SendBatch(ctx, b)
		var (
			t       taken
			metaRaw []byte
			prev    *string
		)
		var rt recordedTurn
		err := br.QueryRow().Scan(append([]any{&t.epoch, &metaRaw, &prev}, rt.dest()...)...)
		t.prior = rt.turn()
		if errors.Is(err, pgx.ErrNoRows) {
			_ = br.Close()
			err = s.busy(ctx, id)
			if err == nil && attempt < 3 {
				continue // released in between: try again
			}
			if err == nil {
				err = &InUseError{ID: id}
			}
			return taken{}, err
		}
		if err != nil {
			_ = br.Close()
			return taken{}, s.dbErr("open "+id, err)
		}
		rows, err := br.Query()
		if err == nil {
			t.entries, t.last, err = s.scanHistory(rows, id)
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			s.releaseLease(id, t.epoch, true)
			return taken{}, s.dbErr("open "+id, err)
		}
		if t.read = t.epoch != unread; t.read {
			if err := safeUnmarshal(metaRaw, &t.meta); err != nil {
				s.releaseLease(id, t.epoch, true)
				return taken{}, fmt.Errorf("decode meta of %s: %w", id, err)
			}
			t.meta.ID = id
		}
		if prev != nil && *prev != s.self {
			s.takeovers.Add(1)
			s.log.Info().Str("session", id).Str("from", *prev).Int64("epoch", t.epoch).Msg("took over session lease")
		}
		return t, nil
	}
}

// busy explains why the lease of id could not be taken: ErrNotFound, an
// *InUseError naming the holder, or nil when it is free now.
func (s *PGStore) busy(ctx context.Context, id string) error {
	var owner *string
	err := s.pool.QueryRow(ctx, "SELECT lease_owner FROM iac_sessions WHERE id = $1", id).Scan(&owner)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	case err != nil:
		return s.dbErr("open "+id, err)
	case owner == nil:
		return nil
	}
	return &InUseError{ID: id, Owner: *owner}
}

// scanHistory decodes history rows. Rows that do not decode to a valid entry
// are skipped with a warning, like bad lines of a history file; last is the
// highest seq present, valid or not, so appends never collide.
func (s *PGStore) scanHistory(rows pgx.Rows, id string) ([]Entry, int64, error) {
	defer rows.Close()
	var (
		entries []Entry
		last    int64
		seq     int64
	)
	for rows.Next() {
		if err := rows.Scan(&seq, nil); err != nil {
			return nil, 0, err
		}
		// json travels as its text: the row's bytes as received, valid
		// until Next; the decoder copies what it keeps.
		raw := rows.RawValues()[1]
		last = max(last, seq)
		var e Entry
		err := decodeEntry(raw, &e)
		if err == nil && e.Seq != seq {
			err = fmt.Errorf("entry seq %d in row %d", e.Seq, seq)
		}
		if err != nil {
			s.log.Warn().Str("session", id).Int64("seq", seq).Err(err).Msg("skipping corrupt history row")
			continue
		}
		entries = append(entries, e)
	}
	return entries, last, rows.Err()
}

// Fork implements Store: the new session's row, lease and a copy of the
// source's history rows are written in one transaction.
func (s *PGStore) Fork(srcID, newID string) (_ Session, _ []Entry, err error) {
	if !ValidID(srcID) {
		return nil, nil, fmt.Errorf("%w: invalid id %q", ErrNotFound, srcID)
	}
	if !ValidID(newID) {
		return nil, nil, fmt.Errorf("%w: %q", ErrInvalidID, newID)
	}
	ctx, cancel := opCtx()
	defer cancel()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, nil, s.dbErr("fork", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(ctx)
		}
	}()
	var metaRaw []byte
	err = tx.QueryRow(ctx, "SELECT meta FROM iac_sessions WHERE id = $1", srcID).Scan(&metaRaw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, fmt.Errorf("%w: %s", ErrNotFound, srcID)
	}
	if err != nil {
		return nil, nil, s.dbErr("fork "+srcID, err)
	}
	var meta Meta
	if err := safeUnmarshal(metaRaw, &meta); err != nil {
		return nil, nil, fmt.Errorf("decode meta of %s: %w", srcID, err)
	}
	meta = meta.born(newID, srcID, s.stamp())
	data, err := protocol.Marshal(meta)
	if err != nil {
		return nil, nil, fmt.Errorf("encode meta: %w", err)
	}
	var epoch int64
	err = tx.QueryRow(ctx, `INSERT INTO iac_sessions (id, cwd, updated_at, meta, lease_owner, lease_epoch, lease_expires, owner)
		VALUES ($1, $2, $3, $4, $5, 1, now() + $6::interval, $7) ON CONFLICT (id) DO NOTHING RETURNING lease_epoch`,
		newID, cleanCwd(meta.Cwd), meta.UpdatedAt, data, s.self, s.ttl, meta.Owner).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, fmt.Errorf("%w: %s", ErrExists, newID)
	}
	if err != nil {
		return nil, nil, s.dbErr("fork "+srcID, err)
	}
	if _, err = tx.Exec(ctx, `INSERT INTO iac_history (session_id, seq, entry)
		SELECT $2, seq, entry FROM iac_history WHERE session_id = $1`, srcID, newID); err != nil {
		return nil, nil, s.dbErr("fork "+srcID, err)
	}
	rows, err := tx.Query(ctx, "SELECT seq, entry FROM iac_history WHERE session_id = $1 ORDER BY seq", newID)
	if err != nil {
		return nil, nil, s.dbErr("fork "+srcID, err)
	}
	entries, last, err := s.scanHistory(rows, newID)
	if err != nil {
		return nil, nil, s.dbErr("fork "+srcID, err)
	}
	if err = tx.Commit(ctx); err != nil {
		return nil, nil, s.dbErr("fork "+srcID, err)
	}
	return s.handle(meta, epoch, last), entries, nil
}

// Delete implements Store. A session whose lease is held (by anyone) is in
// use; the history goes with the row.
func (s *PGStore) Delete(id string) error {
	if !ValidID(id) {
		return fmt.Errorf("%w: invalid id %q", ErrNotFound, id)
	}
	ctx, cancel := opCtx()
	defer cancel()
	for attempt := 0; ; attempt++ {
		tag, err := s.pool.Exec(ctx, "DELETE FROM iac_sessions s WHERE s.id = $1 AND "+leaseFree, id)
		if err != nil {
			return s.dbErr("delete "+id, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		err = s.busy(ctx, id)
		if err == nil && attempt < 3 {
			continue
		}
		if err == nil {
			err = &InUseError{ID: id}
		}
		return err
	}
}

// Stat implements Store: the meta row, no lease.
func (s *PGStore) Stat(id string) (Meta, error) {
	if !ValidID(id) {
		return Meta{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	ctx, cancel := opCtx()
	defer cancel()
	var raw []byte
	err := s.pool.QueryRow(ctx, "SELECT meta FROM iac_sessions WHERE id = $1", id).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return Meta{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Meta{}, s.dbErr("stat "+id, err)
	}
	var m Meta
	if err := safeUnmarshal(raw, &m); err != nil {
		return Meta{}, fmt.Errorf("decode meta of %s: %w", id, err)
	}
	m.ID = id
	return m, nil
}

// List implements Store: one indexed query per page.
func (s *PGStore) List(cwd, cursor string, limit int) ([]Meta, string, error) {
	return s.ListOwned("", cwd, cursor, limit)
}

// ListOwned implements Store; owner "" lists every owner's.
func (s *PGStore) ListOwned(owner, cwd, cursor string, limit int) ([]Meta, string, error) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	var (
		conds []string
		args  []any
	)
	if owner != "" {
		args = append(args, owner)
		conds = append(conds, fmt.Sprintf("owner = $%d", len(args)))
	}
	if cwd != "" {
		args = append(args, filepath.Clean(cwd))
		conds = append(conds, fmt.Sprintf("cwd = $%d", len(args)))
	}
	if cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cursor)
		var c listCursor
		if err != nil || safeUnmarshal(raw, &c) != nil || c.ID == "" {
			return nil, "", ErrInvalidCursor
		}
		// Newest first, then by id: after (u, id) is older, or as old with
		// a greater id. The first condition bounds the index range.
		args = append(args, time.Unix(0, c.U).UTC(), c.ID)
		n := len(args)
		conds = append(conds, fmt.Sprintf("updated_at <= $%d AND (updated_at < $%d OR id > $%d)", n-1, n-1, n))
	}
	q := "SELECT s.id, s.meta, " + listedTurn + " FROM iac_sessions s"
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	args = append(args, limit+1)
	q += fmt.Sprintf(" ORDER BY updated_at DESC, id LIMIT $%d", len(args))
	ctx, cancel := opCtx()
	defer cancel()
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, "", s.dbErr("list", err)
	}
	defer rows.Close()
	metas := make([]Meta, 0, min(limit+1, 64))
	more := false
	for rows.Next() {
		var (
			id     string
			raw    []byte
			listed bool
			rt     recordedTurn
		)
		if err := rows.Scan(append([]any{&id, &raw, &listed}, rt.dest()...)...); err != nil {
			return nil, "", s.dbErr("list", err)
		}
		if len(metas) == limit {
			more = true
			break
		}
		var m Meta
		if err := safeUnmarshal(raw, &m); err != nil {
			s.log.Warn().Str("session", id).Err(err).Msg("skipping unreadable session meta")
			continue
		}
		m.ID = id
		if listed {
			m.RunningTurn = rt.turn()
		}
		metas = append(metas, m)
	}
	if err := rows.Err(); err != nil {
		return nil, "", s.dbErr("list", err)
	}
	next := ""
	if more && len(metas) > 0 {
		last := metas[len(metas)-1]
		next = base64.RawURLEncoding.EncodeToString(protocol.MustMarshal(listCursor{U: last.UpdatedAt.UnixNano(), ID: last.ID}))
	}
	return metas, next, nil
}
