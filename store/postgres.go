package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/protocol"
)

// PGStore is the shared Store: sessions in PostgreSQL, used by any number of
// processes at once (the pods of a cluster). Tables and their meaning are in
// migrations/; the schema is migrated at start.
//
// Exactly one writer per session is a lease on the session's row: owner
// incarnation (this process's id), epoch (bumped by every acquisition, never
// reused) and expiry (database clock). Create, Open and Fork take it; a
// background loop renews the leases of open handles every renew interval;
// Close releases it. Every write (Append, Rewrite, SaveMeta) checks owner and
// epoch in the statement that writes, under a row lock, so a handle whose
// lease was taken over can never write: it gets ErrFenced. Open of a session
// leased by another live owner fails with an *InUseError naming the owner;
// once the lease has expired, or its owner was declared dead (MarkDead), Open
// takes it over with a higher epoch.
//
// Every Append is one committed transaction (one round trip): Sync has
// nothing left to do.
type PGStore struct {
	pool   *pgxpool.Pool
	log    zerolog.Logger
	now    func() time.Time
	self   string
	ttl    time.Duration
	renew  time.Duration
	secret string // the URL's password, scrubbed from every error

	mu         sync.Mutex
	open       map[*pgSession]struct{}
	registered bool

	takeovers atomic.Int64
	stop      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var _ Backend = (*PGStore)(nil)

// ErrUnknownIncarnation: no incarnation with that id was registered.
var ErrUnknownIncarnation = errors.New("unknown incarnation")

// pgOpTimeout bounds every database call of the Store interface, so a
// database that stopped answering fails the call instead of hanging its actor.
const pgOpTimeout = 10 * time.Second

// pgStartTimeout bounds NewPostgres: connecting and migrating.
const pgStartTimeout = 60 * time.Second

// NewPostgres connects to the database at url (postgres://user:password@host:port/db?…;
// pgx's pool parameters such as pool_max_conns apply), migrates the schema
// and starts renewing leases. The password never appears in errors or logs.
func NewPostgres(dbURL string, opts ...Option) (*PGStore, error) {
	o := newOptions(opts)
	if o.leaseTTL <= 0 || o.leaseRenew <= 0 || o.leaseRenew >= o.leaseTTL {
		return nil, fmt.Errorf("store: lease renewal (%v) must be positive and shorter than the lease TTL (%v)", o.leaseRenew, o.leaseTTL)
	}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("store: invalid PostgreSQL URL %s: %s (want postgres://user:password@host:port/database)",
			RedactURL(dbURL), parseReason(err, dbURL))
	}
	self := o.incarnation
	if self == "" {
		self = uuid.NewString()
	}
	s := &PGStore{log: o.log, now: o.now, self: self, ttl: o.leaseTTL, renew: o.leaseRenew,
		secret: cfg.ConnConfig.Password, open: map[*pgSession]struct{}{},
		stop: make(chan struct{}), stopped: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), pgStartTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, s.dbErr("connect", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, s.dbErr("connect", err)
	}
	version, err := migrate(ctx, pool, o.log)
	if err != nil {
		pool.Close()
		return nil, s.dbErr("migrate", err)
	}
	s.pool = pool
	s.log.Info().Str("db", RedactURL(dbURL)).Int("schema_version", version).Str("incarnation", self).
		Dur("lease_ttl", s.ttl).Dur("lease_renew", s.renew).Msg("session store: PostgreSQL")
	go s.renewLoop()
	return s, nil
}

// RedactURL returns a connection URL without its password (and without any
// password query parameter), for logs and errors; "(unparseable URL)" when it
// cannot be parsed at all.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "(unparseable URL)"
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	q := u.Query()
	for k := range q {
		if strings.EqualFold(k, "password") {
			q.Set(k, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// parseReason is the reason of a pgx parse error without the connection
// string it quotes: pgx masks the password there only on a best-effort basis
// (an unescaped '@' in a password leaks its tail).
func parseReason(err error, dbURL string) string {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return "cannot parse"
	}
	msg := pce.Error()
	i := strings.LastIndex(msg, "`: ")
	if i < 0 {
		return "cannot parse"
	}
	reason := msg[i+3:]
	if u, err := url.Parse(dbURL); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			reason = scrubSecret(reason, pw)
		}
	}
	return reason
}

// dbError is a database error with the password scrubbed from its text.
// errors.Is looks through to the cause (context.DeadlineExceeded, …); the
// cause's own text is never exposed.
type dbError struct {
	msg   string
	cause error
}

func (e *dbError) Error() string           { return e.msg }
func (e *dbError) Is(target error) bool    { return errors.Is(e.cause, target) }
func (s *PGStore) scrub(msg string) string { return scrubSecret(msg, s.secret) }

func scrubSecret(msg, secret string) string {
	if secret == "" {
		return msg
	}
	for _, form := range []string{secret, url.QueryEscape(secret), url.PathEscape(secret)} {
		msg = strings.ReplaceAll(msg, form, "xxxxx")
	}
	return msg
}

func (s *PGStore) dbErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return &dbError{msg: "store: " + op + ": " + s.scrub(err.Error()), cause: err}
}

// Incarnation is this process's incarnation id: the owner of its leases.
func (s *PGStore) Incarnation() string { return s.self }

// Takeovers counts the leases this store took over from another owner whose
// lease had expired or who was declared dead.
func (s *PGStore) Takeovers() int64 { return s.takeovers.Load() }

func (s *PGStore) stamp() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), pgOpTimeout)
}

func cleanCwd(cwd string) string {
	if cwd == "" {
		return ""
	}
	return filepath.Clean(cwd)
}

// leaseFree is true for a session row whose lease can be taken: released,
// expired, or held by an incarnation declared dead.
const leaseFree = `(s.lease_owner IS NULL OR s.lease_expires <= now()
	OR EXISTS (SELECT 1 FROM iac_incarnations i WHERE i.id = s.lease_owner AND i.dead_at IS NOT NULL))`

// noTurn clears the running turn of a session row (TurnRecorder): with
// every release and acquisition of its lease.
const noTurn = `turn_started_at = NULL, turn_prompt_request = NULL`

// listedTurn are the running turn's columns of a session row as List
// reports them: only while the lease that recorded it is live.
const listedTurn = `CASE WHEN s.turn_started_at IS NOT NULL AND NOT ` + leaseFree + ` THEN s.turn_started_at END,
	CASE WHEN s.turn_started_at IS NOT NULL AND NOT ` + leaseFree + ` THEN s.turn_prompt_request END`

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

// renewing adds h to (or removes it from) the handles whose leases the
// renewal loop extends.
func (s *PGStore) renewing(h *pgSession, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.open[h] = struct{}{}
	} else {
		delete(s.open, h)
	}
}

// acquireSQL takes the lease of session $1 for owner $2 for $3 when it is
// free, or when $2 still holds it at epoch $4 (Acquire after a Release
// that did not reach the database; 0 matches nothing). The row lock makes
// concurrent acquisitions queue; each re-checks the row as the previous one
// left it, so exactly one wins. It returns the new epoch, the meta and the
// previous owner (for the takeover count).
const acquireSQL = `UPDATE iac_sessions s
	SET lease_owner = $2, lease_epoch = s.lease_epoch + 1, lease_expires = now() + $3::interval, ` + noTurn + `
	FROM (SELECT lease_owner FROM iac_sessions WHERE id = $1) AS old
	WHERE s.id = $1 AND (` + leaseFree + ` OR (s.lease_owner = $2 AND s.lease_epoch = $4))
	RETURNING s.lease_epoch, s.meta, old.lease_owner`

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
	return s.handle(t.meta, t.epoch, t.last), t.entries, nil
}

// taken is a session whose lease take got: the new epoch, and the meta and
// history unless they were not read (read false).
type taken struct {
	epoch   int64
	read    bool
	meta    Meta
	entries []Entry
	last    int64
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
		err := br.QueryRow().Scan(&t.epoch, &metaRaw, &prev)
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
			s.releaseLease(id, t.epoch)
			return taken{}, s.dbErr("open "+id, err)
		}
		if t.read = t.epoch != unread; t.read {
			if err := safeUnmarshal(metaRaw, &t.meta); err != nil {
				s.releaseLease(id, t.epoch)
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
			id          string
			raw, prompt []byte
			started     *time.Time
		)
		if err := rows.Scan(&id, &raw, &started, &prompt); err != nil {
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
		if started != nil && prompt != nil {
			m.RunningTurn = &RunningTurn{StartedAt: started.UTC(), PromptRequest: prompt}
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

// releaseLease gives up the lease of id if this store still holds it at
// epoch. Best effort: an unreleased lease expires after the TTL.
func (s *PGStore) releaseLease(id string, epoch int64) error {
	ctx, cancel := opCtx()
	defer cancel()
	_, err := s.pool.Exec(ctx, `UPDATE iac_sessions SET lease_owner = NULL, lease_expires = NULL, `+noTurn+`
		WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3`, id, s.self, epoch)
	return s.dbErr("release lease of "+id, err)
}

// renewLoop extends the leases of open handles every renew interval until
// Close.
func (s *PGStore) renewLoop() {
	defer close(s.stopped)
	defer func() {
		if r := recover(); r != nil {
			s.log.Error().Interface("panic", r).Msg("lease renewal crashed; leases will expire")
		}
	}()
	t := time.NewTicker(s.renew)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.renewOnce()
		}
	}
}

// renewOnce extends, in one statement, the leases this process holds for
// its open handles, and heartbeats its incarnation when registered. A handle
// whose lease was taken over is logged once; its writes fail with ErrFenced.
func (s *PGStore) renewOnce() {
	s.mu.Lock()
	ids := make([]string, 0, len(s.open))
	handles := make([]*pgSession, 0, len(s.open))
	for h := range s.open {
		ids = append(ids, h.id)
		handles = append(handles, h)
	}
	registered := s.registered
	s.mu.Unlock()
	if len(ids) == 0 && !registered {
		return
	}
	// The epochs each handle holds now (h.mu is never taken under s.mu).
	epochs := make([]int64, len(handles))
	for i, h := range handles {
		h.mu.Lock()
		epochs[i] = h.epoch
		h.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(pgOpTimeout, s.ttl))
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(`UPDATE iac_sessions SET lease_expires = now() + $3::interval
		WHERE lease_owner = $1 AND id = ANY($2) RETURNING id, lease_epoch`, s.self, ids, s.ttl)
	if registered {
		b.Queue("UPDATE iac_incarnations SET heartbeat_at = now() WHERE id = $1", s.self)
	}
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		s.log.Warn().Err(s.dbErr("renew leases", err)).Int("sessions", len(ids)).Msg("lease renewal failed")
		return
	}
	held := make(map[string]int64, len(ids))
	for rows.Next() {
		var (
			id    string
			epoch int64
		)
		if err := rows.Scan(&id, &epoch); err == nil {
			held[id] = epoch
		}
	}
	if err := rows.Err(); err != nil {
		s.log.Warn().Err(s.dbErr("renew leases", err)).Int("sessions", len(ids)).Msg("lease renewal failed")
		return
	}
	for i, h := range handles {
		if epoch, ok := held[h.id]; ok && epoch == epochs[i] {
			continue
		}
		h.mu.Lock()
		// Released, closed or acquired again meanwhile: not this lease.
		current := !h.closed && !h.released && h.epoch == epochs[i]
		report := current && !h.lost
		h.lost = h.lost || current
		h.mu.Unlock()
		if report {
			s.log.Warn().Str("session", h.id).Int64("epoch", epochs[i]).Msg("session lease lost to another owner; its writes are refused")
		}
	}
}

// Close implements Backend: it stops renewing, releases every lease of this
// incarnation (handles still open can no longer write), declares the
// incarnation dead when it was registered, and closes the connections. The
// sessions can be opened elsewhere at once.
func (s *PGStore) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.stopped
		ctx, cancel := opCtx()
		defer cancel()
		_, err := s.ReleaseLeases(ctx, s.self)
		s.mu.Lock()
		registered := s.registered
		s.mu.Unlock()
		if registered && err == nil {
			err = s.MarkDead(ctx, s.self)
		}
		s.pool.Close()
		s.closeErr = err
	})
	return s.closeErr
}

// Incarnation describes one process incarnation (a pod) of a cluster.
type Incarnation struct {
	ID string
	// Addr is the address other pods reach it at.
	Addr      string
	Started   time.Time
	Heartbeat time.Time
	// Dead is when it was declared dead; zero while it is not.
	Dead time.Time
}

// Register records this incarnation with the address other pods reach it
// at; the lease renewal loop then also heartbeats it. Registering again
// updates the address.
func (s *PGStore) Register(ctx context.Context, addr string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO iac_incarnations (id, addr, started_at, heartbeat_at)
		VALUES ($1, $2, now(), now())
		ON CONFLICT (id) DO UPDATE SET addr = EXCLUDED.addr, heartbeat_at = now()`, s.self, addr)
	if err != nil {
		return s.dbErr("register incarnation", err)
	}
	s.mu.Lock()
	s.registered = true
	s.mu.Unlock()
	return nil
}

// Heartbeat records that this incarnation is alive now (the renewal loop
// does it every renew interval once registered). ErrUnknownIncarnation
// before Register.
func (s *PGStore) Heartbeat(ctx context.Context) error {
	tag, err := s.pool.Exec(ctx, "UPDATE iac_incarnations SET heartbeat_at = now() WHERE id = $1", s.self)
	if err != nil {
		return s.dbErr("heartbeat", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", ErrUnknownIncarnation, s.self)
	}
	return nil
}

const incarnationCols = "id, addr, started_at, heartbeat_at, dead_at"

func scanIncarnation(row pgx.Row) (Incarnation, error) {
	var (
		inc  Incarnation
		dead *time.Time
	)
	if err := row.Scan(&inc.ID, &inc.Addr, &inc.Started, &inc.Heartbeat, &dead); err != nil {
		return Incarnation{}, err
	}
	if dead != nil {
		inc.Dead = *dead
	}
	return inc, nil
}

// LookupIncarnation returns the incarnation id. ErrUnknownIncarnation.
func (s *PGStore) LookupIncarnation(ctx context.Context, id string) (Incarnation, error) {
	inc, err := scanIncarnation(s.pool.QueryRow(ctx, "SELECT "+incarnationCols+" FROM iac_incarnations WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Incarnation{}, fmt.Errorf("%w: %s", ErrUnknownIncarnation, id)
	}
	if err != nil {
		return Incarnation{}, s.dbErr("look up incarnation", err)
	}
	return inc, nil
}

// Incarnations lists every registered incarnation, oldest first.
func (s *PGStore) Incarnations(ctx context.Context) ([]Incarnation, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+incarnationCols+" FROM iac_incarnations ORDER BY started_at, id")
	if err != nil {
		return nil, s.dbErr("list incarnations", err)
	}
	defer rows.Close()
	var out []Incarnation
	for rows.Next() {
		inc, err := scanIncarnation(rows)
		if err != nil {
			return nil, s.dbErr("list incarnations", err)
		}
		out = append(out, inc)
	}
	return out, s.dbErr("list incarnations", rows.Err())
}

// MarkDead declares incarnation id dead (the first declaration's time
// stays): from now on Open takes its leases over at once instead of waiting
// for them to expire. Its handles are fenced as soon as that happens. An id
// never registered is recorded as dead too.
func (s *PGStore) MarkDead(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO iac_incarnations (id, addr, started_at, heartbeat_at, dead_at)
		VALUES ($1, '', now(), now(), now())
		ON CONFLICT (id) DO UPDATE SET dead_at = coalesce(iac_incarnations.dead_at, now())`, id)
	return s.dbErr("mark incarnation dead", err)
}

// ReleaseLeases releases every lease incarnation id holds (the SIGTERM path:
// its sessions can be opened elsewhere at once) and returns how many. The
// epochs stay, so the old holder's handles are fenced.
func (s *PGStore) ReleaseLeases(ctx context.Context, id string) (int64, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE iac_sessions SET lease_owner = NULL, lease_expires = NULL, `+noTurn+`
		WHERE lease_owner = $1`, id)
	if err != nil {
		return 0, s.dbErr("release leases", err)
	}
	return tag.RowsAffected(), nil
}

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
}

var (
	_ Session      = (*pgSession)(nil)
	_ TurnRecorder = (*pgSession)(nil)
)

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
		started *time.Time
		prompt  []byte
	)
	if turn != nil {
		t := turn.StartedAt.UTC()
		started, prompt = &t, turn.PromptRequest
		if prompt == nil {
			prompt = []byte("null")
		}
	}
	ctx, cancel := opCtx()
	defer cancel()
	tag, err := h.st.pool.Exec(ctx, `UPDATE iac_sessions SET turn_started_at = $4, turn_prompt_request = $5
		WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3`, h.id, h.st.self, h.epoch, started, prompt)
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
func (h *pgSession) Release() error {
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
	return h.st.releaseLease(h.id, h.epoch)
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
	h.epoch, h.released, h.lost = t.epoch, false, false
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
	return h.st.releaseLease(h.id, h.epoch)
}
