package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
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
	gates      []*ModelGate

	takeovers atomic.Int64
	stop      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var _ Backend = (*PGStore)(nil)

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

// Close implements Backend: it stops renewing, releases every lease of this
// incarnation (handles still open can no longer write), declares the
// incarnation dead when it was registered, and closes the connections. The
// sessions can be opened elsewhere at once.
func (s *PGStore) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.stopped
		s.mu.Lock()
		gates := s.gates
		s.mu.Unlock()
		for _, g := range gates {
			g.Close()
		}
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
