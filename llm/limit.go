package llm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"
)

// Gate lets model requests through at most a fixed number at a time per
// provider key, taking the people who wait in turn, so one busy person
// cannot starve the others; a provider's "wait" (429 with Retry-After)
// pauses the key for everyone. LocalGate is one process's; the shared
// store's spans every pod on the database.
type Gate interface {
	// Enter waits for a slot of key for person and returns the func that
	// gives it back (call it exactly once). waiting, when not nil, is
	// called once, from Enter's goroutine, when the request cannot go at
	// once. When ctx ends first, Enter returns ctx.Err() and holds nothing.
	Enter(ctx context.Context, key, person string, waiting func(Wait)) (release func(), err error)
	// Pause holds back every request of key until until.
	Pause(ctx context.Context, key string, until time.Time) error
}

// Wait describes why a request waits.
type Wait struct {
	// Ahead counts the requests before this one in the queue (0: unknown).
	Ahead int
	// PausedUntil is set while the provider asked to wait.
	PausedUntil time.Time
}

// Caller is who a model request is made for: the person whose turn is
// fairly queued, and how the turn tells its client it waits.
type Caller struct {
	Person string
	// Waiting is called once when a request has to wait for the limit.
	Waiting func(Wait)
}

type callerKey struct{}

// WithCaller returns ctx carrying c for the model requests made with it.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

func callerOf(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	if c == nil {
		return &Caller{}
	}
	return c
}

// LimitKey names a provider key in a Gate without the key itself: the
// provider and a digest of its base URL and API key.
func LimitKey(cfg Config) string {
	sum := sha256.Sum256([]byte(cfg.BaseURL + "\x00" + cfg.APIKey))
	return cfg.Provider + ":" + hex.EncodeToString(sum[:8])
}

// Limit configures WithLimit.
type Limit struct {
	Gate Gate
	Key  string
	// Waited, when set, is told how long each request that had to wait
	// waited (metrics); paused: the provider's pause was among the reasons.
	Waited func(d time.Duration, paused bool)
	// Paused, when set, is told of each pause a 429 started (metrics).
	Paused func(d time.Duration)
}

// WithLimit makes every call of p enter l.Gate first and hold its slot
// until the call returns; a 429 with Retry-After pauses the key for every
// process on the gate. Apply it inside WithRetry: each attempt queues
// again, behind the pause.
func WithLimit(p Provider, l Limit) Provider {
	return &limitProvider{inner: p, l: l}
}

type limitProvider struct {
	inner Provider
	l     Limit
}

// Warm implements Warmer.
func (lp *limitProvider) Warm() { warm(lp.inner) }

func (lp *limitProvider) Stream(ctx context.Context, req *Request, emit func(Event)) error {
	caller := callerOf(ctx)
	var (
		start   time.Time
		waited  bool
		paused  bool
		notices = caller.Waiting
	)
	release, err := lp.l.Gate.Enter(ctx, lp.l.Key, caller.Person, func(w Wait) {
		if !waited { // the wait began at the first notice, not the last
			waited, start = true, time.Now()
		}
		paused = !w.PausedUntil.IsZero()
		if notices != nil {
			notices(w)
		}
	})
	if err != nil {
		return err
	}
	if waited && lp.l.Waited != nil {
		lp.l.Waited(time.Since(start), paused)
	}
	err = lp.inner.Stream(ctx, req, emit)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.Status == 429 && apiErr.RetryAfter > 0 {
		// Recorded before the slot is given back, so no request of the
		// key slips in between.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if perr := lp.l.Gate.Pause(pctx, lp.l.Key, time.Now().Add(apiErr.RetryAfter)); perr == nil && lp.l.Paused != nil {
			lp.l.Paused(apiErr.RetryAfter)
		}
		cancel()
	}
	release()
	return err
}
