package llm

import (
	"context"
	"sync"
	"time"
)

// LocalGate is the Gate of one process: n requests at a time per key.
// Waiters are taken person by person: the next slot goes to the waiting
// person served least recently (first come first within a person), so
// someone with many requests queued is passed by everyone else's next
// one. A pause holds every request of its key until it ends.
type LocalGate struct {
	n   int
	now func() time.Time

	mu   sync.Mutex
	keys map[string]*gateKey
}

// gateKey is the queue of one key.
type gateKey struct {
	running int
	// waiting in arrival order.
	waiting []*gateWaiter
	// served: each person's number in the order of starts (fairness).
	served map[string]uint64
	starts uint64
	paused time.Time
	timer  *time.Timer
}

type gateWaiter struct {
	person  string
	granted chan struct{}
}

// NewLocalGate lets n requests per key through at once (n >= 1).
func NewLocalGate(n int) *LocalGate {
	return &LocalGate{n: max(n, 1), now: time.Now, keys: map[string]*gateKey{}}
}

var _ Gate = (*LocalGate)(nil)

func (g *LocalGate) key(k string) *gateKey {
	q := g.keys[k]
	if q == nil {
		q = &gateKey{served: map[string]uint64{}}
		g.keys[k] = q
	}
	return q
}

// Enter implements Gate.
func (g *LocalGate) Enter(ctx context.Context, key, person string, waiting func(Wait)) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g.mu.Lock()
	q := g.key(key)
	w := &gateWaiter{person: person, granted: make(chan struct{})}
	q.waiting = append(q.waiting, w)
	g.dispatch(key, q)
	var (
		granted = isClosed(w.granted)
		notice  Wait
	)
	if !granted {
		notice = Wait{Ahead: len(q.waiting) - 1 + q.running}
		if g.now().Before(q.paused) {
			notice.PausedUntil = q.paused
		}
	}
	g.mu.Unlock()
	release := func() { g.release(key) }
	if granted {
		return release, nil
	}
	if waiting != nil {
		waiting(notice)
	}
	select {
	case <-w.granted:
		return release, nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if isClosed(w.granted) { // granted meanwhile: give it on
		q.running--
		g.dispatch(key, q)
	} else {
		for i, o := range q.waiting {
			if o == w {
				q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
				break
			}
		}
	}
	return nil, ctx.Err()
}

// Pause implements Gate.
func (g *LocalGate) Pause(_ context.Context, key string, until time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.key(key)
	if until.After(q.paused) {
		q.paused = until
	}
	return nil
}

func (g *LocalGate) release(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.keys[key]
	q.running--
	g.dispatch(key, q)
}

// dispatch grants free slots to the next waiters (g.mu held). While the
// key is paused, a timer dispatches again at the pause's end.
func (g *LocalGate) dispatch(key string, q *gateKey) {
	for q.running < g.n && len(q.waiting) > 0 {
		if d := q.paused.Sub(g.now()); d > 0 {
			if q.timer == nil {
				q.timer = time.AfterFunc(d, func() {
					g.mu.Lock()
					defer g.mu.Unlock()
					q.timer = nil
					g.dispatch(key, q)
				})
			}
			return
		}
		i := q.next()
		w := q.waiting[i]
		q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
		q.starts++
		q.served[w.person] = q.starts
		q.running++
		close(w.granted)
	}
	if q.running == 0 && len(q.waiting) == 0 && q.timer == nil && !g.now().Before(q.paused) && len(g.keys) > 64 {
		delete(g.keys, key) // keep the map small; fairness restarts
	}
}

// next is the index of the waiter to serve: the first of the waiting
// person served least recently (never served first).
func (q *gateKey) next() int {
	best := 0
	for i := 1; i < len(q.waiting); i++ {
		if q.served[q.waiting[i].person] < q.served[q.waiting[best].person] {
			best = i
		}
	}
	return best
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
