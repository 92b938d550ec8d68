package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/acpclient"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/marker"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/stats"
)

// sink gathers what all connections of a run measure.
type sink struct {
	hist *stats.Histogram
	// first is the time from sending a prompt to its first chunk at the
	// client; firstModel the part until the model wrote it, firstPost the
	// part until the POST was answered.
	first, firstModel, firstPost *stats.Histogram
	rate                         *stats.Rate
	events                       atomic.Int64
	chunks                       atomic.Int64
	prog                         *progress
	// progChunks feeds the progress bar with chunks (else events).
	progChunks bool
}

func newSink(start time.Time, span time.Duration, prog *progress, progChunks bool) *sink {
	return &sink{hist: stats.NewHistogram(), first: stats.NewHistogram(), firstModel: stats.NewHistogram(), firstPost: stats.NewHistogram(), rate: stats.NewRate(start, span), prog: prog, progChunks: progChunks}
}

// hconn is one ACP connection over HTTP+SSE with its connection stream,
// driven by one goroutine: it POSTs and then reads its stream until the
// answer arrives. With dropEvery set it drops the stream at random moments
// (exponentially distributed, that mean) and resumes it with Last-Event-ID.
type hconn struct {
	h  *acpclient.HTTP
	id string
	st *acpclient.Stream
	// ws, when set, carries everything instead of POSTs and st (--ws).
	ws       *acpclient.WS
	ids      marker.IDs
	nextID   int64
	deadline time.Time
	// posted is when the last POST was answered.
	posted time.Time

	dropEvery    time.Duration
	reconnectMax time.Duration
	rnd          *rand.Rand
	nextDrop     time.Time
	reconnects   int64
}

// dialConn initializes a connection and opens its stream.
func dialConn(ctx context.Context, h *acpclient.HTTP, deadline time.Time) (*hconn, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	id, _, err := h.Initialize(ctx)
	if err != nil {
		return nil, err
	}
	c := &hconn{h: h, id: id, deadline: deadline, nextID: 1}
	if c.st, err = h.OpenStream(ctx, id, "", nil); err != nil {
		_ = h.Delete(context.Background(), id)
		return nil, err
	}
	return c, nil
}

// dialWSConn opens a WebSocket connection and initializes it.
func dialWSConn(ctx context.Context, h *acpclient.HTTP, deadline time.Time) (*hconn, error) {
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	ws, err := acpclient.DialWS(dctx, h.Addr, h.Token)
	if err != nil {
		return nil, err
	}
	c := &hconn{h: h, id: ws.ID, ws: ws, deadline: deadline}
	if _, err := c.call(ctx, func(id int64) []byte { return acpclient.Initialize(id) }, nil); err != nil {
		_ = ws.Close()
		return nil, fmt.Errorf("initialize: %w", err)
	}
	return c, nil
}

// enableDrops starts random stream drops.
func (c *hconn) enableDrops(every, reconnectMax time.Duration, seed uint64) {
	c.dropEvery, c.reconnectMax = every, reconnectMax
	c.rnd = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c.scheduleDrop()
}

func (c *hconn) scheduleDrop() {
	d := time.Duration(c.rnd.ExpFloat64() * float64(c.dropEvery))
	c.nextDrop = time.Now().Add(max(d, time.Millisecond))
}

// call POSTs a request and reads the stream until its response.
func (c *hconn) call(ctx context.Context, build func(id int64) []byte, onMsg func(m *acpclient.Msg, now time.Time)) (*acpclient.Msg, error) {
	c.nextID++
	id := c.nextID
	var err error
	if c.ws != nil {
		err = c.ws.Send(build(id))
	} else {
		pctx, cancel := context.WithDeadline(ctx, c.deadline)
		err = c.h.Post(pctx, c.id, build(id))
		cancel()
	}
	c.posted = time.Now()
	if err != nil {
		return nil, err
	}
	m, err := c.readUntil(ctx, id, onMsg)
	if err != nil {
		return nil, err
	}
	if m.Err != nil {
		return m, m.Err
	}
	return m, nil
}

// readUntil reads events until the response to id.
func (c *hconn) readUntil(ctx context.Context, id int64, onMsg func(m *acpclient.Msg, now time.Time)) (*acpclient.Msg, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dl := c.deadline
		if c.dropEvery > 0 {
			if !time.Now().Before(c.nextDrop) {
				if err := c.reconnect(ctx); err != nil {
					return nil, err
				}
				continue
			}
			if c.nextDrop.Before(dl) {
				dl = c.nextDrop
			}
		}
		ev, err := c.next(dl)
		if err != nil {
			var ne net.Error
			if c.dropEvery > 0 && errors.As(err, &ne) && ne.Timeout() && time.Now().Before(c.deadline) {
				continue // drop time: reconnect at the top
			}
			return nil, err
		}
		now := time.Now()
		if ev.HasID {
			c.ids.Add(ev.ID) // a repeat is counted; the message is still checked
		}
		m := acpclient.Parse(ev.Data)
		if m.Kind == acpclient.KindResponse && m.ID == id {
			m.Data = append([]byte(nil), m.Data...)
			return &m, nil
		}
		if m.Kind == acpclient.KindRequest {
			return nil, fmt.Errorf("unexpected server request %s", ev.Data)
		}
		if onMsg != nil {
			onMsg(&m, now)
		}
	}
}

// next reads the next event of the stream or message of the WebSocket.
func (c *hconn) next(deadline time.Time) (*acpclient.Event, error) {
	if c.ws == nil {
		_ = c.st.SetReadDeadline(deadline)
		return c.st.Next()
	}
	_ = c.ws.SetReadDeadline(deadline)
	data, err := c.ws.Next()
	if err != nil {
		return nil, err
	}
	return &acpclient.Event{Type: "message", Data: data}, nil
}

// reconnect drops the stream, waits a little and resumes after the last
// event id received (0 when none: replay everything buffered).
func (c *hconn) reconnect(ctx context.Context) error {
	_ = c.st.Close()
	if c.reconnectMax > 0 {
		pause := time.Duration(c.rnd.Int64N(int64(c.reconnectMax)))
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	last, _ := c.ids.Last()
	octx, cancel := context.WithDeadline(ctx, c.deadline)
	defer cancel()
	st, err := c.h.OpenStream(octx, c.id, "", &last)
	if err != nil {
		return fmt.Errorf("reconnect: %w", err)
	}
	c.st = st
	c.reconnects++
	c.scheduleDrop()
	return nil
}

// newSession creates a session and returns its id.
func (c *hconn) newSession(ctx context.Context, cwd string) (string, error) {
	m, err := c.call(ctx, func(id int64) []byte { return acpclient.NewSession(id, cwd) }, nil)
	if err != nil {
		return "", err
	}
	return acpclient.SessionID(m.Result)
}

// prompt runs one prompt whose answer streams n marked chunks, and checks
// them.
func (c *hconn) prompt(ctx context.Context, sid string, n int, s *sink) (marker.Check, error) {
	tr := marker.NewTracker()
	sent := time.Now().UnixNano()
	first := true
	m, err := c.call(ctx, func(id int64) []byte { return acpclient.Prompt(id, sid, "stream") }, func(m *acpclient.Msg, now time.Time) {
		s.events.Add(1)
		s.rate.Add(now, 1)
		if !s.progChunks {
			s.prog.add(1)
		}
		if m.Kind != acpclient.KindUpdate || !acpclient.IsMessageChunk(m.Data) {
			return
		}
		nowNS := now.UnixNano()
		k := marker.Scan(m.Data, func(seq, ts int64) {
			tr.Add(seq)
			s.hist.Record(nowNS - ts)
			if first {
				first = false
				s.first.Record(nowNS - sent)
				s.firstModel.Record(ts - sent)
				s.firstPost.Record(c.posted.UnixNano() - sent)
			}
		})
		s.chunks.Add(int64(k))
		if s.progChunks {
			s.prog.add(int64(k))
		}
	})
	check := tr.Finish(int64(n))
	if err != nil {
		return check, err
	}
	if sr := acpclient.StopReason(m.Result); sr != "end_turn" {
		return check, fmt.Errorf("stopReason %q", sr)
	}
	return check, nil
}

// closeSession sends session/close and waits for its answer.
func (c *hconn) closeSession(ctx context.Context, sid string) error {
	_, err := c.call(ctx, func(id int64) []byte { return acpclient.CloseSession(id, sid) }, nil)
	return err
}

// close deletes the connection and drops the stream.
func (c *hconn) close(ctx context.Context) error {
	if c.ws != nil {
		return c.ws.Close()
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := c.h.Delete(dctx, c.id)
	if c.st != nil {
		_ = c.st.Close()
	}
	return err
}

// errKey names an error class for the error table.
func errKey(op string, err error) string {
	var se *acpclient.StatusError
	var re *acpclient.RPCError
	var ne net.Error
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("%s: HTTP %d", op, se.Status)
	case errors.As(err, &re):
		return fmt.Sprintf("%s: JSON-RPC %d", op, re.Code)
	case errors.Is(err, acpclient.ErrStreamError):
		return op + ": error event"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return op + ": timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return op + ": stream ended"
	case errors.Is(err, syscall.ECONNRESET):
		return op + ": connection reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return op + ": connection refused"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return op + ": no local port"
	case errors.Is(err, syscall.EMFILE):
		return op + ": too many open files"
	}
	s := err.Error()
	if len(s) > 80 {
		s = s[:80]
	}
	return op + ": " + s
}
