package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// RetryPolicy configures WithRetry and the providers' stream idle timeout.
// Zero fields take the DefaultRetryPolicy values.
type RetryPolicy struct {
	// Attempts is the number of tries, the first included (1 = no retries).
	Attempts int
	// BaseDelay is the wait before the first retry; it doubles per retry up
	// to MaxDelay. Each wait is jittered to between half and all of it.
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// MaxRetryAfter caps how long a server's Retry-After is honoured: a
	// longer one fails the call at once (with the server's reason) rather
	// than leaving the prompt hanging.
	MaxRetryAfter time.Duration
	// IdleTimeout aborts a request whose server sends nothing for that long
	// (while waiting for the response headers or between stream chunks);
	// the call then fails with ErrIdleTimeout, which is retryable. < 0
	// disables it; 0 is 90 s, or 5 min for the local presets (ollama,
	// lmstudio), which may load a model before answering.
	IdleTimeout time.Duration

	// Jitter returns a number in [0, 1); nil uses math/rand/v2.
	Jitter func() float64
	// Sleep waits d or until ctx ends (returning ctx.Err()); nil uses a timer.
	// Tests inject one to record delays without waiting.
	Sleep func(ctx context.Context, d time.Duration) error
	// OnRetry, when set, is called before each wait (tests, metrics).
	OnRetry func(RetryInfo)
	// Log receives one warning per retry (nil = New's Config.Log).
	Log *zerolog.Logger
}

// RetryInfo describes one retry about to happen.
type RetryInfo struct {
	Attempt int // the attempt that failed, from 1
	Delay   time.Duration
	Err     error
}

// DefaultRetryPolicy: 5 attempts, 1 s doubling to at most 32 s, Retry-After
// honoured up to 60 s, streams idle for 90 s retried.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{
		Attempts:      5,
		BaseDelay:     time.Second,
		MaxDelay:      32 * time.Second,
		MaxRetryAfter: 60 * time.Second,
		IdleTimeout:   90 * time.Second,
	}
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy()
	if p.Attempts <= 0 {
		p.Attempts = d.Attempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = d.BaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = d.MaxDelay
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = d.MaxRetryAfter
	}
	if p.IdleTimeout == 0 {
		p.IdleTimeout = d.IdleTimeout
	}
	if p.Jitter == nil {
		p.Jitter = rand.Float64
	}
	if p.Sleep == nil {
		p.Sleep = sleepCtx
	}
	return p
}

// idleTimeout is the effective idle timeout (0 = disabled).
func (p RetryPolicy) idleTimeout() time.Duration {
	switch {
	case p.IdleTimeout < 0:
		return 0
	case p.IdleTimeout == 0:
		return DefaultRetryPolicy().IdleTimeout
	}
	return p.IdleTimeout
}

// backoff is the jittered wait before retry n (n = 1 for the first).
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.BaseDelay
	for i := 1; i < n && d < p.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, p.MaxDelay)
	return d/2 + time.Duration(p.Jitter()*float64(d/2))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// IsRetryable reports failures worth another try: HTTP 408, 409, 429 and
// 5xx, connection errors, and streams cut short or idle. Cancellation,
// missing credentials and other 4xx are final.
func IsRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrNoCredentials) {
		return false
	}
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		s := apiErr.Status
		return s == 408 || s == 409 || s == 429 || s >= 500
	}
	if errors.Is(err, ErrStreamInterrupted) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

// RetryError is the final error of a call that was retried.
type RetryError struct {
	Attempts int
	Err      error
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("%v (gave up after %d attempts)", e.Err, e.Attempts)
}

func (e *RetryError) Unwrap() error { return e.Err }

// WithRetry retries p's failed calls with exponential backoff and jitter,
// honouring Retry-After.
//
// Streamed output is never duplicated: the wrapper forwards events as they
// come, and once it has forwarded one the client sees (text, thinking, a
// tool call) a later failure is final — the caller shows what came and
// reports the error. Events before that (a redacted thinking block, usage)
// are held back and dropped with a failed attempt, so a retry starts clean.
// Retries themselves emit nothing; each is logged at warn level.
func WithRetry(p Provider, policy RetryPolicy) Provider {
	policy = policy.withDefaults()
	if policy.Log == nil {
		nop := zerolog.Nop()
		policy.Log = &nop
	}
	return &retryProvider{inner: p, policy: policy}
}

type retryProvider struct {
	inner  Provider
	policy RetryPolicy
}

// visible reports events the client is shown.
func visible(t EventType) bool {
	switch t {
	case EventTextDelta, EventThinkingDelta, EventToolCallStart, EventToolCallArgs:
		return true
	}
	return false
}

// Warm implements Warmer.
func (r *retryProvider) Warm() { warm(r.inner) }

func (r *retryProvider) Stream(ctx context.Context, req *Request, emit func(Event)) error {
	pol := &r.policy
	for attempt := 1; ; attempt++ {
		committed := false
		var held []Event
		err := r.inner.Stream(ctx, req, func(ev Event) {
			switch {
			case committed:
				emit(ev)
			case visible(ev.Type):
				committed = true
				for _, h := range held {
					emit(h)
				}
				held = nil
				emit(ev)
			default:
				held = append(held, ev)
			}
		})
		if err == nil {
			for _, h := range held {
				emit(h)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if committed || !IsRetryable(err) {
			return r.final(err, attempt)
		}
		if attempt >= pol.Attempts {
			return r.final(err, attempt)
		}
		delay := pol.backoff(attempt)
		var apiErr *APIError
		if errors.As(err, &apiErr) && apiErr.RetryAfter > 0 {
			if apiErr.RetryAfter > pol.MaxRetryAfter {
				pol.Log.Warn().Err(err).Dur("retry_after", apiErr.RetryAfter).Int("attempt", attempt).
					Msg("model call failed; the server asks to wait longer than we retry for")
				return r.final(err, attempt)
			}
			delay = max(delay, apiErr.RetryAfter)
		}
		pol.Log.Warn().Err(err).Int("attempt", attempt).Int("attempts", pol.Attempts).Dur("delay", delay).
			Msg("model call failed; retrying")
		if pol.OnRetry != nil {
			pol.OnRetry(RetryInfo{Attempt: attempt, Delay: delay, Err: err})
		}
		if err := pol.Sleep(ctx, delay); err != nil {
			return err
		}
	}
}

func (r *retryProvider) final(err error, attempts int) error {
	if attempts <= 1 {
		return err
	}
	return &RetryError{Attempts: attempts, Err: err}
}

// idleWatch cancels a request when its server sends nothing for d. Data
// only records when it came; the timer, when it fires, looks at that and
// sleeps again for the rest (a timer reset per read cost ~2 % of the CPU
// of a server streaming to many clients).
type idleWatch struct {
	d       time.Duration
	timer   *time.Timer
	last    atomic.Int64 // monotonic ns (since idleEpoch) of the last data
	fired   atomic.Bool
	stopped atomic.Bool
	cancel  context.CancelFunc
}

var idleEpoch = time.Now()

func idleNow() int64 { return int64(time.Since(idleEpoch)) }

// watchIdle returns a context for one request that idleWatch cancels after
// d without a reset (d <= 0: never). Call stop when the request is done.
func watchIdle(ctx context.Context, d time.Duration) (context.Context, *idleWatch) {
	ctx, cancel := context.WithCancel(ctx)
	w := &idleWatch{d: d, cancel: cancel}
	if d > 0 {
		w.last.Store(idleNow())
		w.timer = time.AfterFunc(d, w.check)
	}
	return ctx, w
}

func (w *idleWatch) check() {
	if w.stopped.Load() {
		return
	}
	if idle := time.Duration(idleNow() - w.last.Load()); idle < w.d {
		w.timer.Reset(w.d - idle)
		return
	}
	w.fired.Store(true)
	w.cancel()
}

func (w *idleWatch) reset() {
	if w.timer != nil {
		w.last.Store(idleNow())
	}
}

func (w *idleWatch) stop() {
	if w.timer != nil {
		w.stopped.Store(true)
		w.timer.Stop()
	}
	w.cancel()
}

// idleError is the error of a request the watch aborted, or nil.
func (w *idleWatch) idleError(name string) error {
	if !w.fired.Load() {
		return nil
	}
	return fmt.Errorf("%s: %w: %w (no data for %v)", name, ErrStreamInterrupted, ErrIdleTimeout, w.d)
}

// body resets the watch on every read that returns data.
func (w *idleWatch) body(r io.Reader) io.Reader {
	if w.timer == nil {
		return r
	}
	return &idleBody{r: r, w: w}
}

type idleBody struct {
	r io.Reader
	w *idleWatch
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.w.reset()
	}
	return n, err
}

// openedStream is what the SDKs' NewStreaming return (and executed, the
// OpenAI request sent with ChatCompletionService.New): we only check the
// request outcome and release it; the body is decoded by our own readers.
type openedStream interface {
	Err() error
	Close() error
}

// streamCall is the part of a streaming model call both protocols share:
// open the request under an idle watch, map request failures, decode the
// body, and turn failures caused by cancel or idleness into those errors.
// warm (may be nil) counts the call and learns the response's protocol.
func streamCall(ctx context.Context, name string, idleTimeout time.Duration, warm *warmConns,
	open func(ctx context.Context, resp **http.Response) openedStream,
	requestError func(error, *http.Response) error,
	decode func(io.Reader) error,
	redact func(error) error,
) error {
	warm.began()
	defer warm.ended()
	rctx, idle := watchIdle(ctx, idleTimeout)
	var resp *http.Response
	stream := open(rctx, &resp)
	defer func() {
		if stream != nil { // not handed to releaseConn
			_ = stream.Close()
			idle.stop()
		}
	}()
	fail := func(err error, mapErr func(error) error) error {
		if ctx.Err() != nil {
			return ctx.Err() // the call failed because ctx ended
		}
		if ierr := idle.idleError(name); ierr != nil {
			return ierr
		}
		return mapErr(err)
	}
	if err := stream.Err(); err != nil {
		return fail(err, func(err error) error { return requestError(err, resp) })
	}
	if resp == nil || resp.Body == nil {
		return errors.New(name + ": no response")
	}
	warm.answered(resp)
	idle.reset()
	if err := decode(idle.body(resp.Body)); err != nil {
		return fail(err, redact)
	}
	// The deferred Close and stop must wait for the drain: it owns them now.
	release := releaseConn(resp.Body, stream, idle)
	stream, idle = nil, nil
	release()
	return nil
}

// Bounds of releaseConn.
const (
	drainMax     = 64 << 10
	drainWait    = 10 * time.Millisecond
	drainTimeout = 2 * time.Second
)

// releaseConn reads what follows the end of a stream ([DONE], message_stop)
// to the end of the body, so the connection goes back to the client's pool:
// a body closed before its end closes the connection, and the next model
// call dials (and over TLS handshakes) again. The returned func waits for
// that up to drainWait (a server ends the response right after the stream's
// end: microseconds); past it, the drain goes on in the background, up to
// drainTimeout, so that a slow or odd server delays the turn by drainWait
// at most and costs at worst the connection.
func releaseConn(body io.Reader, stream openedStream, idle *idleWatch) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = recover() }() // nothing here may take the process down
		t := time.AfterFunc(drainTimeout, idle.cancel)
		_, _ = io.CopyN(io.Discard, body, drainMax)
		t.Stop()
		_ = stream.Close()
		idle.stop()
	}()
	return func() {
		t := time.NewTimer(drainWait)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		}
	}
}
