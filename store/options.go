package store

import (
	"time"

	"github.com/rs/zerolog"
)

// Option configures New, NewPostgres and Open.
type Option func(*options)

type options struct {
	log zerolog.Logger
	now func() time.Time
	// Shared store only.
	leaseTTL, leaseRenew time.Duration
	incarnation          string
	// File store only.
	lockWait time.Duration
}

// Lease defaults of the shared store.
const (
	DefaultLeaseTTL   = 10 * time.Second
	DefaultLeaseRenew = 3 * time.Second
)

func newOptions(opts []Option) options {
	o := options{log: zerolog.Nop(), now: time.Now, leaseTTL: DefaultLeaseTTL, leaseRenew: DefaultLeaseRenew}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WithLogger sets the logger that receives warnings (skipped lines, repaired
// tails, unreadable metas, lease renewal failures). Default: no logging.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

// WithClock replaces time.Now for the timestamps of metas (tests). Leases
// always run on the database's clock.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithLeaseTTL sets how long a session lease lasts without renewal: the time
// after which a dead process's sessions can be taken over (default 10 s).
func WithLeaseTTL(d time.Duration) Option { return func(o *options) { o.leaseTTL = d } }

// WithLeaseRenew sets how often the leases of open sessions are renewed; it
// must be shorter than the TTL (default 3 s).
func WithLeaseRenew(d time.Duration) Option { return func(o *options) { o.leaseRenew = d } }

// WithIncarnation sets the id that owns this process's leases (default: a
// random uuid). It must be unique per process start: a restarted process
// that reused its id would inherit the leases of its previous life.
func WithIncarnation(id string) Option { return func(o *options) { o.incarnation = id } }

// WithLockWait makes the file store wait up to d for another process to let
// go of a session it holds between turns (default 0: fail at once). A holder
// running a turn fails the wait at once: InUseError.Turn.
func WithLockWait(d time.Duration) Option { return func(o *options) { o.lockWait = d } }
