package httpsse

import (
	"container/list"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// freshSlack is (at most; a quarter of a small cap) how far below the server's connection cap the listener
// keeps the connections it hands over: closing a silent connection frees
// its fasthttp worker a moment later, and the newcomer must not meet the
// cap (503) meanwhile.
const freshSlack = 8

// freshListener makes room at the connection cap as nginx does: when a new
// connection would reach it, the oldest connection that has not yet sent a
// whole request is closed. A flood of sockets that never speak then cannot
// hold every slot: a real client's connection is served, and only its own
// request makes it safe from eviction (see served).
type freshListener struct {
	net.Listener
	cap   int
	slack int
	log   zerolog.Logger

	mu    sync.Mutex
	open  int
	fresh list.List // of *trackedConn, oldest first
	// pending counts evicted connections fasthttp has not closed yet.
	pending int
	// evicted counts the connections closed to make room; lastLog
	// rate-limits the warning about it.
	evicted int64
	lastLog time.Time
}

// trackedConn is an accepted connection counted by its listener until it
// is closed.
type trackedConn struct {
	net.Conn
	l *freshListener
	// elem is its place in l.fresh while it has sent no whole request;
	// counted: it is in l.open (until closed or evicted). Both l.mu.
	elem    *list.Element
	counted bool
	evicted bool
	// isServed is set once it sent a request (fast path of served).
	isServed atomic.Bool
}

func newFreshListener(ln net.Listener, maxConns int, log zerolog.Logger) *freshListener {
	slack := min(freshSlack, maxConns/4)
	return &freshListener{Listener: ln, cap: max(maxConns-slack, 1), slack: slack, log: log}
}

func (l *freshListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &trackedConn{Conn: nc, l: l}
	var victims []*trackedConn
	l.mu.Lock()
	// An evicted connection still holds its fasthttp worker until fasthttp
	// closes it: it counts until then, and evicting is only for room not
	// being made yet.
	for l.open-l.pending >= l.cap {
		front := l.fresh.Front()
		if front == nil {
			break
		}
		v := front.Value.(*trackedConn)
		l.fresh.Remove(front)
		v.elem, v.evicted = nil, true
		l.pending++
		l.evicted++
		victims = append(victims, v)
	}
	warn := len(victims) > 0 && time.Since(l.lastLog) >= acceptLogEvery
	if warn {
		l.lastLog = time.Now()
	}
	n := l.evicted
	l.mu.Unlock()
	for _, v := range victims {
		_ = v.Conn.Close() // fasthttp's read fails, and it closes the tracked conn
	}
	if warn {
		l.log.Warn().Int("max_connections", l.cap+l.slack).Int64("closed_silent", n).
			Msg("connection cap reached: closing the oldest connections that sent no request yet")
	}
	l.mu.Lock()
	// Wait (bounded) until fasthttp let go of them, so the newcomer finds
	// a worker.
	deadline := time.Now().Add(time.Second)
	for l.open >= l.cap && l.pending > 0 && time.Now().Before(deadline) {
		l.mu.Unlock()
		time.Sleep(200 * time.Microsecond)
		l.mu.Lock()
	}
	l.open++
	c.counted = true
	c.elem = l.fresh.PushBack(c)
	l.mu.Unlock()
	return c, nil
}

// served: the connection sent a whole request; it is never evicted.
func (l *freshListener) served(nc net.Conn) {
	c, ok := nc.(*trackedConn)
	if !ok || c.isServed.Swap(true) {
		return
	}
	l.mu.Lock()
	if c.elem != nil {
		l.fresh.Remove(c.elem)
		c.elem = nil
	}
	l.mu.Unlock()
}

// SyscallConn is the accepted connection's descriptor, for the stream's
// direct writes and peer probe (rawConnOf); nil, nil when it has none, as
// rawConnOf says of a connection that is no syscall.Conn.
func (c *trackedConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, nil
	}
	return sc.SyscallConn()
}

// SetKeepAlive and SetKeepAlivePeriod let fasthttp turn TCP keep-alive on
// (Server.TCPKeepalive), as on the bare connection.
func (c *trackedConn) SetKeepAlive(on bool) error {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		return tc.SetKeepAlive(on)
	}
	return nil
}

func (c *trackedConn) SetKeepAlivePeriod(d time.Duration) error {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		return tc.SetKeepAlivePeriod(d)
	}
	return nil
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	l := c.l
	l.mu.Lock()
	if c.elem != nil {
		l.fresh.Remove(c.elem)
		c.elem = nil
	}
	if c.counted {
		c.counted = false
		l.open--
		if c.evicted {
			l.pending--
		}
	}
	l.mu.Unlock()
	return err
}
