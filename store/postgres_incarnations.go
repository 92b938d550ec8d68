package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrUnknownIncarnation: no incarnation with that id was registered.
var ErrUnknownIncarnation = errors.New("unknown incarnation")

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
