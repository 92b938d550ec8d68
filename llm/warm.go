package llm

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// A session's first model call used to dial the model host: the connect
// (and, over TLS, the handshake) was on the path of the developer's first
// prompt, and in a burst of prompts every one of them waited for its own
// connection. A provider now keeps a few connections dialled ahead, one
// per session opened (Warm), for the transport to take when it would
// otherwise dial (warmConns.DialContext). They carry no request and no
// credential until the transport sends one on them.

// warmTTL is how long a connection dialled ahead waits to be used before
// it is closed: a session that was opened and not prompted in that time
// does not hold a socket to the provider (whose servers close idle
// connections too, typically after a minute).
const warmTTL = 30 * time.Second

// maxWarmModelConns bounds the connections dialled ahead and not yet used:
// the sessions of a burst of opens (a team's morning, a pod taking over
// another's sessions) beyond it dial at their first prompt, as before.
const maxWarmModelConns = 512

// warmDialTimeout bounds a dial ahead; it is no one's request.
const warmDialTimeout = 10 * time.Second

// warmConns is the transport's dialer with the connections dialled ahead
// for one address: the model host, or the proxy the transport reaches it
// through.
type warmConns struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	addr string // "" when it cannot be known: Warm does nothing
	ttl  time.Duration
	max  int

	mu      sync.Mutex
	idle    []warmConn // dialled ahead, oldest first
	dialing int
	// open counts the transport's connections (dialled here, not closed),
	// busy the model calls in flight: open-busy is about how many wait idle
	// in the transport's pool (one call per HTTP/1.1 connection).
	open, busy int
	// wanted counts the sessions opened that have not called the model
	// yet (Warm, less calls begun and connections expired unused).
	wanted int
	// multiplexed: the host answered over HTTP/2, where one connection
	// carries every call: while one is open, none is dialled ahead.
	multiplexed bool
	expiry      *time.Timer
}

type warmConn struct {
	conn net.Conn
	at   time.Time
}

// newWarmConns wraps dial for a transport that sends requests to base
// through proxy (the transport's Proxy, may be nil).
func newWarmConns(dial func(ctx context.Context, network, addr string) (net.Conn, error), base string, proxy func(*http.Request) (*url.URL, error)) *warmConns {
	return &warmConns{dial: dial, addr: dialAddr(base, proxy), ttl: warmTTL, max: maxWarmModelConns}
}

// dialAddr is the address a transport with proxy dials to send a request
// to base: the proxy's, or base's own; "" when it cannot tell.
func dialAddr(base string, proxy func(*http.Request) (*url.URL, error)) string {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return ""
	}
	if proxy != nil {
		pu, err := proxy(&http.Request{Method: http.MethodPost, URL: u, Header: http.Header{}})
		if err != nil {
			return ""
		}
		if pu != nil {
			u = pu
		}
	}
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		case "socks5", "socks5h":
			port = "1080"
		default:
			return ""
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// Warm dials a connection ahead for a session just opened, unless enough
// are ready: idle in the transport's pool or dialled ahead for the
// sessions that have not called the model yet. It does not wait for the
// dial.
func (w *warmConns) Warm() {
	if w == nil || w.addr == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wanted < w.max {
		w.wanted++
	}
	if w.multiplexed && w.open > 0 {
		return
	}
	ready := max(w.open-w.busy, 0) + len(w.idle) + w.dialing
	if ready >= w.wanted || len(w.idle)+w.dialing >= w.max {
		return
	}
	w.dialing++
	go w.dialOne()
}

func (w *warmConns) dialOne() {
	ctx, cancel := context.WithTimeout(context.Background(), warmDialTimeout)
	conn, err := w.dial(ctx, "tcp", w.addr)
	cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dialing--
	if err != nil {
		return // the first call dials, and reports what is wrong
	}
	w.idle = append(w.idle, warmConn{conn: conn, at: time.Now()})
	if w.expiry == nil {
		w.expiry = time.AfterFunc(w.ttl, w.expire)
	}
}

// expire closes the connections dialled ahead that waited warmTTL: their
// sessions did not call the model in time.
func (w *warmConns) expire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	n := 0
	for n < len(w.idle) && now.Sub(w.idle[n].at) >= w.ttl {
		w.idle[n].conn.Close()
		n++
	}
	w.idle = append(w.idle[:0], w.idle[n:]...)
	w.wanted = max(w.wanted-n, 0)
	w.expiry = nil
	if len(w.idle) > 0 {
		w.expiry = time.AfterFunc(w.idle[0].at.Add(w.ttl).Sub(now), w.expire)
	}
}

// DialContext is the transport's dialer: a connection dialled ahead for
// addr if one is still open, else a new one.
func (w *warmConns) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if addr == w.addr {
		for {
			conn := w.take()
			if conn == nil {
				break
			}
			// The provider may have closed it meanwhile: a request sent on
			// it would fail, and the transport retries only on reused
			// connections.
			if peerClosed(conn) {
				conn.Close()
				continue
			}
			return w.opened(conn), nil
		}
	}
	conn, err := w.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return w.opened(conn), nil
}

// take is the newest connection dialled ahead (the least likely to have
// been closed by the provider), or nil.
func (w *warmConns) take() net.Conn {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.idle) == 0 {
		return nil
	}
	c := w.idle[len(w.idle)-1]
	w.idle = w.idle[:len(w.idle)-1]
	return c.conn
}

func (w *warmConns) opened(conn net.Conn) net.Conn {
	w.mu.Lock()
	w.open++
	w.mu.Unlock()
	return &countedConn{Conn: conn, w: w}
}

// began counts a model call until ended: the session it was warmed for
// has called.
func (w *warmConns) began() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.busy++
	w.wanted = max(w.wanted-1, 0)
	w.mu.Unlock()
}

func (w *warmConns) ended() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.busy--
	w.mu.Unlock()
}

// answered notes the protocol a call was answered with.
func (w *warmConns) answered(resp *http.Response) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.multiplexed = resp.ProtoMajor >= 2
	w.mu.Unlock()
}

// countedConn is a transport's connection, counted open until closed.
type countedConn struct {
	net.Conn
	w    *warmConns
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.w.mu.Lock()
		c.w.open--
		c.w.mu.Unlock()
	})
	return c.Conn.Close()
}
