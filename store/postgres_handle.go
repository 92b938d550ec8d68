package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/iac-code/iac-code/protocol"
)

// pgSession is the Session handle of a PGStore session: it holds the lease
// at epoch, or held it there last (released).
type pgSession struct {
	st *PGStore
	id string

	mu       sync.Mutex
	epoch    int64
	meta     Meta
	lastSeq  int64
	closed   bool
	released bool
	lost     bool // the renewal found the lease gone (logged once)
	// prior is the turn recorded as running when the lease was taken.
	prior *RunningTurn
}

var (
	_ Session    = (*pgSession)(nil)
	_ TurnKeeper = (*pgSession)(nil)
)

// PriorTurn implements TurnKeeper.
func (h *pgSession) PriorTurn() *RunningTurn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.prior
}

func (h *pgSession) ID() string { return h.id }

func (h *pgSession) LastSeq() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastSeq
}

func (h *pgSession) Meta() Meta {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.meta.clone()
}

// writable reports why the handle cannot write now, if it cannot. h.mu held.
func (h *pgSession) writable() error {
	switch {
	case h.closed:
		return ErrClosed
	case h.released:
		return ErrReleased
	}
	return nil
}

// fenced explains a write refused for want of the lease; it wraps the new
// holder's *InUseError when there is one.
func (h *pgSession) fenced(ctx context.Context) error {
	var (
		owner *string
		epoch int64
	)
	err := h.st.pool.QueryRow(ctx, "SELECT lease_owner, lease_epoch FROM iac_sessions WHERE id = $1", h.id).Scan(&owner, &epoch)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: session %s was deleted", ErrFenced, h.id)
	case err != nil || owner == nil:
		return fmt.Errorf("%w: session %s (this handle's epoch %d; the lease was released)", ErrFenced, h.id, h.epoch)
	}
	return fmt.Errorf("%w (this handle's epoch %d, now %d): %w", ErrFenced, h.epoch, epoch, &InUseError{ID: h.id, Owner: *owner})
}

// appendSQL inserts history rows only while owner $2 holds the lease at
// epoch $3: FOR SHARE locks the session row against a concurrent takeover
// until the insert commits, and a takeover that committed first leaves no
// row to join. One statement, one round trip.
const appendSQL = `INSERT INTO iac_history (session_id, seq, entry)
	SELECT s.id, t.seq, t.entry
	FROM iac_sessions s, unnest($4::bigint[], $5::json[]) AS t(seq, entry)
	WHERE s.id = $1 AND s.lease_owner = $2 AND s.lease_epoch = $3
	FOR SHARE OF s`

func (h *pgSession) Append(entries ...Entry) error {
	if len(entries) == 0 {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.writable(); err != nil {
		return err
	}
	stamped, err := stampAppend(entries, h.lastSeq, h.st.now().UTC())
	if err != nil {
		return err
	}
	seqs := make([]int64, len(stamped))
	rows := make([][]byte, len(stamped))
	for i := range stamped {
		seqs[i] = stamped[i].Seq
		if rows[i], err = protocol.Marshal(&stamped[i]); err != nil {
			return fmt.Errorf("encode entry %d: %w", seqs[i], err)
		}
	}
	ctx, cancel := opCtx()
	defer cancel()
	tag, err := h.st.pool.Exec(ctx, appendSQL, h.id, h.st.self, h.epoch, seqs, rows)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
			return fmt.Errorf("%w: append seq %d: already in the history", ErrBadSeq, seqs[0])
		}
		return h.st.dbErr("append to "+h.id, err)
	}
	if tag.RowsAffected() != int64(len(rows)) {
		return h.fenced(ctx)
	}
	h.lastSeq = seqs[len(seqs)-1]
	copy(entries, stamped)
	return nil
}

// Sync implements Session: every Append is already committed.
func (h *pgSession) Sync() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	return nil
}

func (h *pgSession) SaveMeta(m Meta) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.writable(); err != nil {
		return err
	}
	m = m.replacing(h.meta, h.st.stamp())
	data, err := protocol.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode meta: %w", err)
	}
	ctx, cancel := opCtx()
	defer cancel()
	tag, err := h.st.pool.Exec(ctx, `UPDATE iac_sessions SET meta = $4, cwd = $5, updated_at = $6
		WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3`, h.id, h.st.self, h.epoch, data, cleanCwd(m.Cwd), m.UpdatedAt)
	if err != nil {
		return h.st.dbErr("save meta of "+h.id, err)
	}
	if tag.RowsAffected() == 0 {
		return h.fenced(ctx)
	}
	h.meta = m
	return nil
}

// RecordTurn implements TurnRecorder: one UPDATE, at this handle's lease.
func (h *pgSession) RecordTurn(turn *RunningTurn) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.writable(); err != nil {
		return err
	}
	var (
		started      *time.Time
		prompt       []byte
		conn, turnID *string
		first, epoch *int64
		mcpServers   []string
	)
	if turn != nil {
		t := turn.StartedAt.UTC()
		started, prompt, epoch = &t, turn.PromptRequest, &h.epoch
		if prompt == nil {
			prompt = []byte("null")
		}
		conn, turnID, first, mcpServers = &turn.Conn, &turn.ID, &turn.FirstSeq, turn.MCPServers
	}
	ctx, cancel := opCtx()
	defer cancel()
	tag, err := h.st.pool.Exec(ctx, `UPDATE iac_sessions SET turn_started_at = $4, turn_prompt_request = $5,
		turn_conn = $6, turn_first_seq = $7, turn_id = $8, turn_epoch = $9, turn_mcp_servers = $10
		WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3`, h.id, h.st.self, h.epoch, started, prompt,
		conn, first, turnID, epoch, mcpServers)
	if err != nil {
		return h.st.dbErr("record the turn of "+h.id, err)
	}
	if tag.RowsAffected() == 0 {
		return h.fenced(ctx)
	}
	return nil
}

func (h *pgSession) Rewrite(entries []Entry) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.writable(); err != nil {
		return err
	}
	seqs, rows, err := encodeRows(entries)
	if err != nil {
		return err
	}
	ctx, cancel := opCtx()
	defer cancel()
	tx, err := h.st.pool.Begin(ctx)
	if err != nil {
		return h.st.dbErr("rewrite "+h.id, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	tag, err := tx.Exec(ctx, "SELECT 1 FROM iac_sessions WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3 FOR UPDATE",
		h.id, h.st.self, h.epoch)
	if err != nil {
		return h.st.dbErr("rewrite "+h.id, err)
	}
	if tag.RowsAffected() == 0 {
		_ = tx.Rollback(ctx)
		return h.fenced(ctx)
	}
	if _, err := tx.Exec(ctx, "DELETE FROM iac_history WHERE session_id = $1", h.id); err != nil {
		return h.st.dbErr("rewrite "+h.id, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO iac_history (session_id, seq, entry)
		SELECT $1, t.seq, t.entry FROM unnest($2::bigint[], $3::json[]) AS t(seq, entry)`, h.id, seqs, rows); err != nil {
		return h.st.dbErr("rewrite "+h.id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return h.st.dbErr("rewrite "+h.id, err)
	}
	h.lastSeq = 0
	if n := len(seqs); n > 0 {
		h.lastSeq = seqs[n-1]
	}
	return nil
}

// Release implements Session: it gives up the lease (keeping its epoch,
// which tells Acquire whether another owner took the session meanwhile).
func (h *pgSession) Release() error { return h.release(false) }

// Pause implements TurnKeeper: Release keeping the recorded turn.
func (h *pgSession) Pause() error { return h.release(true) }

func (h *pgSession) release(keepTurn bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	if h.released {
		return nil
	}
	h.released = true
	h.st.renewing(h, false)
	// A release that does not reach the database leaves the lease to
	// expire; Acquire takes it back meanwhile (acquireSQL).
	return h.st.releaseLease(h.id, h.epoch, keepTurn)
}

// Acquire implements Session: it takes the lease again, reading the session
// in the same round trip only when another owner took the lease since this
// handle's (the new epoch is not the next one).
func (h *pgSession) Acquire() ([]Entry, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, false, ErrClosed
	}
	if !h.released {
		return nil, false, nil
	}
	t, err := h.st.take(h.id, h.epoch, h.epoch+1)
	if err != nil {
		return nil, false, err
	}
	h.epoch, h.released, h.lost, h.prior = t.epoch, false, false, t.prior
	h.st.renewing(h, true)
	if !t.read {
		return nil, false, nil
	}
	h.meta, h.lastSeq = t.meta, t.last
	if t.entries == nil {
		t.entries = []Entry{}
	}
	return t.entries, true, nil
}

// Close implements Session: it releases the lease (if still held).
func (h *pgSession) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	if h.released {
		return nil
	}
	h.st.renewing(h, false)
	return h.st.releaseLease(h.id, h.epoch, false)
}
