// Package httpsse is the HTTP+SSE edge: ACP over POST/GET/DELETE /acp with
// Server-Sent Events, wired to the same connection actors as stdio.
//
// One ACP connection is created per initialize POST. Its connection actor
// writes into the connection's outbox (conn.Send), which numbers every frame
// and buffers it in the slot of the stream it belongs to: the connection
// stream, or the stream of a session the client split off with
// Acp-Session-Id (http-transport.md §7). GET streams replay from the buffer
// by Last-Event-ID and then follow it live. See README.md for the contract.
package httpsse

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/transport/auth"
)

// Header names.
const (
	HeaderConnectionID = "Acp-Connection-Id"
	HeaderSessionID    = "Acp-Session-Id"
	HeaderLastEventID  = "Last-Event-ID"
	// HeaderProtocolVersion is sent by clients after initialize; it is not
	// read (the version is settled by initialize) but a browser's preflight
	// must allow it, or every later request of a web client is refused.
	HeaderProtocolVersion = "Acp-Protocol-Version"
	// HeaderTraceparent is W3C trace context: a prompt whose _meta names
	// no traceparent joins this one's trace (docs/operations.md#tracing).
	HeaderTraceparent = "Traceparent"
)

// Edge is the HTTP+SSE transport of one actors.Server.
type Edge struct {
	srv *actors.Server
	cfg Config
	log zerolog.Logger
	hs  *fasthttp.Server
	met *metrics
	// authn decides the principal of each request; nil: no authentication.
	authn auth.Authenticator
	guard *edgeGuard
	// upgrader answers WebSocket upgrades of GET /acp (ws.go).
	upgrader *websocket.FastHTTPUpgrader

	mu    sync.RWMutex
	conns map[string]*conn
	// perUser counts the open connections of each principal (e.mu).
	perUser map[string]int
	// tombs remembers why recently closed connections ended (overflow,
	// idle), so their next request gets a clear 400; bounded FIFO.
	tombs     map[string]string
	tombOrder []string

	// unused lists connections in creation order until they are used (a
	// stream or a request after initialize) or closed; unusedN counts the
	// ones still unused. See settle.
	unused  []*conn
	unusedN int

	// holdInit (tests only) withholds initialize from the actor.
	holdInit bool

	// cluster, in cluster mode, reaches the other pods; remotes are the
	// streams of this pod's connections whose GET is on another pod, by
	// handle (e.mu).
	cluster Cluster
	remotes map[uint64]*stream
	// incoming are the connections moving here from a draining pod, until
	// their commit (move.go). e.mu.
	incoming   map[string]*conn
	nextHandle uint64

	streams atomic.Int64
	// fresh is Serve's listener, which evicts silent connections at the cap.
	// Set under serveMu.
	fresh *freshListener
	// serveMu orders Serve's start against Shutdown: fasthttp's Shutdown
	// closes only the listeners its Serve has registered, and returns at
	// once when there is none yet, so a Serve just starting would go on
	// accepting after Shutdown. Shutdown closes fresh itself, and Serve does
	// not start once the edge is closing. serving counts the Serve calls
	// still running; Shutdown returns after them.
	serveMu sync.Mutex
	serving sync.WaitGroup
	// late counts the streams that run from the hijack handler (see route),
	// which fasthttp's graceful shutdown does not wait for; lateRuns holds
	// their writers by net.Conn until the hijack handler or the close of
	// the connection (connState) starts them.
	late     sync.WaitGroup
	lateRuns sync.Map
	// phase is the edge's edgePhase (lifecycle.go).
	phase    atomic.Uint32
	quit     chan struct{}
	quitOnce sync.Once
	reaped   chan struct{}
}

// New builds an edge; serve it with Serve(listener) or mount Handler.
func New(srv *actors.Server, cfg Config, log zerolog.Logger) *Edge {
	cfg = cfg.withDefaults()
	e := &Edge{
		srv:   srv,
		cfg:   cfg,
		log:   log.With().Str("transport", "http").Logger(),
		conns: map[string]*conn{},
		authn: cfg.Auth,

		perUser: map[string]int{},
		tombs:   map[string]string{},
		quit:    make(chan struct{}),
		reaped:  make(chan struct{}),
		guard:   newEdgeGuard(cfg),

		upgrader: newUpgrader(cfg),

		cluster:  cfg.Cluster,
		remotes:  map[uint64]*stream{},
		incoming: map[string]*conn{},
	}
	if e.authn == nil && cfg.Token != "" {
		e.authn = &auth.Chain{Static: auth.NewStatic(cfg.Token)}
	}
	e.met = newMetrics(e)
	e.hs = &fasthttp.Server{
		Handler:            e.Handler(),
		Name:               "iac-code",
		MaxRequestBodySize: cfg.MaxBodySize,
		// Concurrency counts TCP connections (more get 503 at once): streams
		// are capped at MaxStreams, so StreamHeadroom connections are
		// always left for POSTs.
		Concurrency:     cfg.MaxConnections,
		ReadTimeout:     time.Minute,
		WriteTimeout:    time.Minute, // lifted per stream
		IdleTimeout:     2 * time.Minute,
		TCPKeepalive:    true,
		CloseOnShutdown: true,
		ErrorHandler:    errorHandler,
		ConnState:       e.connState,
		Logger:          fasthttpLogger{e.log},
	}
	if e.cluster != nil {
		e.cluster.Bind(e)
	}
	return e
}

// Serve accepts connections on ln until Shutdown. It returns nil after a
// Shutdown; called after Shutdown began, it closes ln and returns nil at
// once. Running out of descriptors does not end it (see
// resilientListener).
func (e *Edge) Serve(ln net.Listener) error {
	e.serveMu.Lock()
	if e.closing() {
		e.serveMu.Unlock()
		_ = ln.Close()
		return nil
	}
	e.fresh = newFreshListener(newResilientListener(ln, e.log), e.cfg.MaxConnections, e.log)
	e.serving.Add(1)
	e.serveMu.Unlock()
	defer e.serving.Done()
	go e.reaper()
	return e.hs.Serve(e.fresh)
}

// Serve runs the edge on cfg.Host:cfg.Port until ctx is cancelled, then
// drains it (Drain: in cluster mode its running turns go to other pods,
// within cfg.DrainTimeout) and shuts it down gracefully: stop accepting,
// cancel the turns still running, flush their last events to the streams,
// close the streams. It returns within cfg.DrainTimeout +
// cfg.ShutdownTimeout of the cancellation.
func Serve(ctx context.Context, srv *actors.Server, cfg Config, log zerolog.Logger) error {
	cfg = cfg.withDefaults()
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	if err != nil {
		return err
	}
	e := New(srv, cfg, log)
	if e.authn == nil && !isLoopback(cfg.Host) {
		e.log.Warn().Str("host", cfg.Host).
			Msg("HTTP transport bound to a non-loopback address without authentication; set IACCODE_ACP_HTTP_TOKEN")
	}
	if !isLoopback(cfg.Host) && len(cfg.AllowedHosts) == 0 {
		e.log.Info().Msg("Host header not checked on a non-loopback address; --allowed-hosts restricts it")
	}
	e.log.Info().Str("addr", ln.Addr().String()).Bool("auth", e.authn != nil).Int("max_connections", cfg.MaxConnections).
		Int("max_streams", cfg.MaxStreams).Uint64("descriptor_limit", fileLimit()).Msg("listening")
	served := make(chan error, 1)
	go func() { served <- e.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// The listener still serves while the turns are handed over.
	e.Drain(cfg.DrainTimeout)
	e.log.Info().Msg("shutting down")
	if e.cluster != nil {
		// Drain: the SSE connections move to live pods first, while the
		// listener still serves (their clients reconnect elsewhere).
		hctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout*4/10)
		e.HandOverConnections(hctx)
		cancel()
	}
	// Leave a margin for the caller to stop the actor system and exit.
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout*8/10)
	defer cancel()
	err = e.Shutdown(sctx)
	<-served
	e.log.Info().Err(err).Msg("stopped")
	return err
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Shutdown stops accepting connections, closes every ACP connection (running
// turns are cancelled and their answers flushed to the streams), ends the
// streams and waits for the HTTP server to finish and Serve to return, or
// for ctx. A Serve called after it does not start.
func (e *Edge) Shutdown(ctx context.Context) error {
	e.enter(edgeClosing)
	e.quitOnce.Do(func() { close(e.quit) })
	// From here no Serve starts (serveMu); the one that did may not have
	// handed its listener to fasthttp yet.
	e.serveMu.Lock()
	ln := e.fresh
	e.serveMu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	httpDone := make(chan error, 1)
	go func() { httpDone <- e.hs.ShutdownWithContext(ctx) }()

	timeout := e.cfg.CloseTimeout
	if dl, ok := ctx.Deadline(); ok {
		// Leave time for the streams to flush after the turns are answered.
		timeout = min(timeout, time.Until(dl)*6/10)
	}
	var wg sync.WaitGroup
	for _, c := range e.snapshot() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.closeConn(c, reasonShutdown, true, timeout)
		}()
	}
	closed := make(chan struct{})
	go func() { wg.Wait(); close(closed) }()
	select {
	case <-closed:
	case <-ctx.Done():
	}
	err := <-httpDone
	// Serve returns at once on its closed listener.
	served := make(chan struct{})
	go func() { e.serving.Wait(); close(served) }()
	select {
	case <-served:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	late := make(chan struct{})
	go func() { e.late.Wait(); close(late) }()
	select {
	case <-late:
	case <-ctx.Done():
	}
	return err
}

// Handler is the edge's request handler (routes, auth, metrics). On a
// server other than Serve's, which lacks the edge's ConnState hook, a stream
// GET pipelined on a connection that fails before the stream starts stays
// attached until the connection is closed.
func (e *Edge) Handler() fasthttp.RequestHandler { return e.route }

// fasthttpLogger routes fasthttp's own messages to zerolog at debug level.
type fasthttpLogger struct{ log zerolog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug().Str("lib", "fasthttp").Msg(fmt.Sprintf(format, args...))
}
