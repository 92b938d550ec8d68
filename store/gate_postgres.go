package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/iac-code/iac-code/llm"
)

// ModelGate is the shared store's llm.Gate: the model requests of every
// process on the database queue in iac_model_queue (see migration 0005),
// at most limit running per key, the next slot going to the waiting person
// served least recently. A waiting request polls (one short transaction
// every gatePoll); a process renews its rows every gateTTL/3 while it has
// any, so the slots of a process that died free themselves after gateTTL.
type ModelGate struct {
	pg    *PGStore
	limit int
	self  string
	ttl   time.Duration
	poll  time.Duration

	mu   sync.Mutex
	live int // rows of this gate (renewed while > 0)

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// Timing of ModelGate.
const (
	gateTTL  = 30 * time.Second
	gatePoll = 50 * time.Millisecond
)

var _ llm.Gate = (*ModelGate)(nil)

// ModelGate returns a gate of this database letting limit requests per
// key run at once. The store's Close closes it.
func (s *PGStore) ModelGate(limit int) *ModelGate {
	g := &ModelGate{pg: s, limit: max(limit, 1), self: uuid.NewString(), ttl: gateTTL, poll: gatePoll,
		stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	s.gates = append(s.gates, g)
	s.mu.Unlock()
	go g.renewLoop()
	return g
}

// Close stops renewing; rows still held expire.
func (g *ModelGate) Close() {
	g.closeOnce.Do(func() {
		close(g.stop)
		<-g.done
	})
}

func (g *ModelGate) renewLoop() {
	defer close(g.done)
	t := time.NewTicker(g.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		g.mu.Lock()
		live := g.live
		g.mu.Unlock()
		if live == 0 {
			continue
		}
		ctx, cancel := opCtx()
		_, err := g.pg.pool.Exec(ctx, "UPDATE iac_model_queue SET expires = now() + $2 WHERE holder = $1", g.self, g.ttl)
		cancel()
		if err != nil {
			g.pg.log.Warn().Err(g.pg.dbErr("renew model slots", err)).Msg("model gate: rows not renewed")
		}
	}
}

func (g *ModelGate) track(d int) {
	g.mu.Lock()
	g.live += d
	g.mu.Unlock()
}

// Enter implements llm.Gate.
func (g *ModelGate) Enter(ctx context.Context, key, person string, waiting func(llm.Wait)) (func(), error) {
	ticket, err := g.queue(ctx, key, person)
	if err != nil {
		return nil, err
	}
	g.track(1)
	notified := false
	for {
		state, ahead, paused, err := g.step(ctx, key, ticket)
		if err != nil {
			g.leave(key, ticket)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		switch state {
		case "running":
			var once sync.Once
			return func() { once.Do(func() { g.leave(key, ticket) }) }, nil
		case "gone": // expired while this process could not renew it
			if ticket, err = g.queue(ctx, key, person); err != nil {
				g.track(-1)
				return nil, err
			}
			continue
		}
		if !notified && waiting != nil {
			notified = true
			waiting(llm.Wait{Ahead: ahead, PausedUntil: paused})
		}
		t := time.NewTimer(g.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			g.leave(key, ticket)
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// queue adds a waiting row for person.
func (g *ModelGate) queue(ctx context.Context, key, person string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	var ticket int64
	err := g.pg.pool.QueryRow(ctx, `INSERT INTO iac_model_queue (key, person, holder, expires)
		VALUES ($1, $2, $3, now() + $4) RETURNING ticket`, key, person, g.self, g.ttl).Scan(&ticket)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return 0, err
		}
		return 0, g.pg.dbErr("queue model request", err)
	}
	return ticket, nil
}

// step runs the key's queue one step and reports on ticket.
func (g *ModelGate) step(ctx context.Context, key string, ticket int64) (state string, ahead int, paused time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	var until *time.Time
	err = g.pg.pool.QueryRow(ctx, "SELECT state, ahead, paused_until FROM iac_model_gate_step($1, $2, $3, $4)",
		key, ticket, g.limit, g.ttl).Scan(&state, &ahead, &until)
	if err != nil {
		return "", 0, time.Time{}, g.pg.dbErr("model gate", err)
	}
	if until != nil {
		paused = *until
	}
	return state, ahead, paused, nil
}

// leave deletes ticket's row and lets the next request of the key run.
func (g *ModelGate) leave(key string, ticket int64) {
	defer g.track(-1)
	ctx, cancel := opCtx()
	defer cancel()
	if _, err := g.pg.pool.Exec(ctx, "DELETE FROM iac_model_queue WHERE ticket = $1", ticket); err != nil {
		g.pg.log.Warn().Err(g.pg.dbErr("free model slot", err)).Msg("model gate: slot freed only when it expires")
		return
	}
	if _, _, _, err := g.step(ctx, key, 0); err != nil {
		g.pg.log.Warn().Err(err).Msg("model gate: next request starts on its own poll")
	}
}

// Pause implements llm.Gate: the later of the pauses wins.
func (g *ModelGate) Pause(ctx context.Context, key string, until time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	_, err := g.pg.pool.Exec(ctx, `INSERT INTO iac_model_pauses AS p (key, until) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET until = greatest(p.until, EXCLUDED.until)`, key, until)
	return g.pg.dbErr("pause model key", err)
}
