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
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/protocol"
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
)

// Error texts of the JSON bodies ({"error":"…"}).
const (
	msgConnNotFoundPost = "Connection not found. Send 'initialize' first or provide a valid Acp-Connection-Id header."
	msgConnNotFound     = "Connection not found. Provide a valid Acp-Connection-Id header."
	msgMissingConnID    = "Missing Acp-Connection-Id header."
	msgInvalidJSON      = "Invalid JSON"
	msgUnauthorized     = "Unauthorized"
	msgForbiddenConn    = "Forbidden: this connection belongs to another user"
	msgTooManyConns     = "Too many connections for this user"
	msgTooLarge         = "Request body too large"
	msgContentType      = "Content-Type must be application/json"
	msgInitTimeout      = "Initialize timeout"
	msgShuttingDown     = "Server is shutting down"
)

// Close reasons (metric label and log field).
const (
	reasonDelete      = "delete"
	reasonIdle        = "idle"
	reasonOverflow    = "overflow"
	reasonShutdown    = "shutdown"
	reasonInitTimeout = "initialize_timeout"
	reasonUnused      = "unused"
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
	cluster    Cluster
	remotes    map[uint64]*stream
	nextHandle uint64

	streams atomic.Int64
	// late counts the streams that run from the hijack handler (see route),
	// which fasthttp's graceful shutdown does not wait for; lateRuns holds
	// their writers by net.Conn until the hijack handler or the close of
	// the connection (connState) starts them.
	// fresh is Serve's listener, which evicts silent connections at the cap.
	fresh    *freshListener
	late     sync.WaitGroup
	lateRuns sync.Map
	closing  atomic.Bool
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

		cluster: cfg.Cluster,
		remotes: map[uint64]*stream{},
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
// Shutdown. Running out of descriptors does not end it (see
// resilientListener).
func (e *Edge) Serve(ln net.Listener) error {
	go e.reaper()
	e.fresh = newFreshListener(newResilientListener(ln, e.log), e.cfg.MaxConnections, e.log)
	return e.hs.Serve(e.fresh)
}

// Serve runs the edge on cfg.Host:cfg.Port until ctx is cancelled, then shuts
// it down gracefully: stop accepting, cancel running turns, flush their last
// events to the streams, close the streams. It returns within
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
	e.log.Info().Msg("shutting down")
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
// streams and waits for the HTTP server to finish, or for ctx.
func (e *Edge) Shutdown(ctx context.Context) error {
	e.closing.Store(true)
	e.quitOnce.Do(func() { close(e.quit) })
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
	late := make(chan struct{})
	go func() { e.late.Wait(); close(late) }()
	select {
	case <-late:
	case <-ctx.Done():
	}
	return err
}

// connState starts the writer of a late stream whose hijack handler will
// not run: fasthttp closed its connection instead (see route).
func (e *Edge) connState(nc net.Conn, state fasthttp.ConnState) {
	if state != fasthttp.StateClosed {
		return
	}
	if run, ok := e.lateRuns.LoadAndDelete(nc); ok {
		go run.(func())()
	}
}

// Handler is the edge's request handler (routes, auth, metrics). On a
// server other than Serve's, which lacks the edge's ConnState hook, a stream
// GET pipelined on a connection that fails before the stream starts stays
// attached until the connection is closed.
func (e *Edge) Handler() fasthttp.RequestHandler { return e.route }

func (e *Edge) snapshot() []*conn {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]*conn, 0, len(e.conns))
	for _, c := range e.conns {
		out = append(out, c)
	}
	return out
}

// lookup finds a connection of this pod for an HTTP request. A WebSocket
// connection is not one: its messages travel on its socket only.
func (e *Edge) lookup(id []byte) *conn {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if c := e.conns[string(id)]; c != nil && !c.ws {
		return c
	}
	return nil
}

// notFound is the 400 text for an unknown connection id: the reason it was
// closed when the server closed it recently, else def.
func (e *Edge) notFound(id []byte, def string) string {
	if len(id) == 0 {
		return def
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if why, ok := e.tombs[string(id)]; ok {
		return why
	}
	return def
}

const maxTombs = 4096

var tombText = map[string]string{
	reasonOverflow:    "Connection closed by the server: the client did not read its event stream and its buffer overflowed.",
	reasonIdle:        "Connection closed by the server after being idle (no stream, no request). Its sessions are kept; initialize again and load them.",
	reasonInitTimeout: "Connection closed by the server: initialize was not answered in time.",
	reasonUnused:      "Connection closed by the server: it opened no stream and sent nothing after initialize. Initialize again.",
}

func (e *Edge) route(ctx *fasthttp.RequestCtx) {
	stream := e.serve(ctx)
	switch {
	case stream == nil:
	case ctx.ConnRequestNum() > 1:
		// The response to a request pipelined before this GET may still be
		// in fasthttp's write buffer, which it flushes only after this
		// handler returns: the stream's head must not overtake it. The
		// hijack handler runs after that flush.
		// fasthttp skips the hijack handler and closes the connection when
		// that flush fails: the writer must still run (and find the socket
		// closed), or the attached stream would never detach.
		nc := ctx.Conn()
		var once sync.Once
		run := func() {
			once.Do(func() {
				defer e.late.Done()
				stream()
			})
		}
		e.late.Add(1)
		e.lateRuns.Store(nc, run)
		ctx.Hijack(func(net.Conn) {
			e.lateRuns.Delete(nc)
			run()
		})
	default:
		stream()
	}
}

// serve answers a request, or returns the writer of the event stream a GET
// opened, which route runs once the request is accounted for (the request
// duration of a GET is the time until its stream starts).
func (e *Edge) serve(ctx *fasthttp.RequestCtx) (stream func()) {
	if e.fresh != nil {
		// A whole request came (fasthttp's StateActive is its first byte):
		// the connection is no longer one to evict for room.
		e.fresh.served(ctx.Conn())
	}
	start := time.Now()
	route := routeOther
	defer func() { e.met.observe(route, ctx, start) }()
	path := ctx.Path()
	switch string(path) {
	case "/acp":
		switch {
		case ctx.IsPost():
			route = routePost
		case ctx.IsGet():
			route = routeGet
		case ctx.IsDelete():
			route = routeDelete
		}
	case "/health":
		route = routeHealth
	case "/metrics":
		route = routeMetrics
	}
	if !e.guard.admit(ctx) {
		return nil
	}
	who, ok := e.identify(ctx)
	if !ok {
		return nil
	}
	switch string(path) {
	case "/acp":
		switch route {
		case routePost:
			e.post(ctx, who)
		case routeGet:
			return e.get(ctx, who)
		case routeDelete:
			e.delete(ctx, who)
		default:
			ctx.Response.Header.Set("Allow", "GET, POST, DELETE")
			jsonError(ctx, fasthttp.StatusMethodNotAllowed, "Method not allowed")
		}
	case "/health":
		if !ctx.IsGet() && !ctx.IsHead() {
			ctx.Response.Header.Set("Allow", "GET, HEAD")
			jsonError(ctx, fasthttp.StatusMethodNotAllowed, "Method not allowed")
			return nil
		}
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"healthy"}`)
	case "/metrics":
		if !ctx.IsGet() && !ctx.IsHead() {
			ctx.Response.Header.Set("Allow", "GET, HEAD")
			jsonError(ctx, fasthttp.StatusMethodNotAllowed, "Method not allowed")
			return nil
		}
		e.met.serve(ctx)
	default:
		jsonError(ctx, fasthttp.StatusNotFound, "Not found")
	}
	return nil
}

// post handles POST /acp: initialize synchronously, everything else 202.
func (e *Edge) post(ctx *fasthttp.RequestCtx, who string) {
	if !isJSON(ctx.Request.Header.ContentType()) {
		jsonError(ctx, fasthttp.StatusUnsupportedMediaType, msgContentType)
		return
	}
	body := ctx.PostBody()
	if len(body) > e.cfg.MaxBodySize {
		jsonError(ctx, fasthttp.StatusRequestEntityTooLarge, msgTooLarge)
		return
	}
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '[' && protocol.Valid(t) {
		ctx.SetStatusCode(fasthttp.StatusNotImplemented)
		ctx.SetContentType("application/json")
		ctx.SetBody(protocol.EncodeError(nil, protocol.NewError(protocol.CodeInvalidRequest,
			"JSON-RPC batches are not supported", nil)))
		return
	}
	msg, perr := protocol.Decode(body)
	if perr != nil {
		if perr.Code == protocol.CodeParseError {
			jsonError(ctx, fasthttp.StatusBadRequest, msgInvalidJSON)
		} else {
			jsonError(ctx, fasthttp.StatusBadRequest, "Invalid JSON-RPC message: "+detail(perr))
		}
		return
	}
	if protocol.CanonicalMethod(msg.Method) == protocol.MethodInitialize {
		e.initialize(ctx, msg, who)
		return
	}
	id := ctx.Request.Header.Peek(HeaderConnectionID)
	c := e.lookup(id)
	if c == nil {
		if owner := e.ownerOf(id); owner != "" {
			e.forwardPost(ctx, owner, id, who, body)
			return
		}
		jsonError(ctx, fasthttp.StatusBadRequest, e.notFound(id, msgConnNotFoundPost))
		return
	}
	r := e.postTo(c, who, ctx.Request.Header.Peek(HeaderSessionID), msg)
	if r.Status != fasthttp.StatusAccepted {
		e.replyError(ctx, r)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusAccepted)
}

// postTo delivers a POSTed message to its connection (of this pod, the
// POST possibly forwarded by another pod): 202 or an error. A principal
// other than the connection's gets 403 and nothing is delivered.
func (e *Edge) postTo(c *conn, who string, sid []byte, msg *protocol.Message) Reply {
	if r, ok := e.owns(c, who, "post", msg.Method); !ok {
		return r
	}
	c.touch()
	e.settle(c)
	if len(sid) > 0 {
		if !validSessionID(sid) {
			return Reply{fasthttp.StatusBadRequest, "Invalid Acp-Session-Id header"}
		}
		if p := paramsSessionID(msg); p != "" && p != string(sid) {
			return Reply{fasthttp.StatusBadRequest, "Mismatched Acp-Session-Id"}
		}
		if err := c.split(string(sid)); err != nil {
			return connReply(err)
		}
	}
	if e.cluster != nil && msg.IsRequest() {
		target := string(sid)
		if target == "" {
			target = paramsSessionID(msg)
		}
		c.trackRequest(msg.ID, target)
	}
	c.trackPrompt(msg)
	c.actor.Deliver(msg)
	return Reply{Status: fasthttp.StatusAccepted}
}

func connReply(err error) Reply {
	if errors.Is(err, errTooManySessions) {
		return Reply{fasthttp.StatusBadRequest, "Too many session streams on this connection"}
	}
	return Reply{fasthttp.StatusBadRequest, msgConnNotFound}
}

func (e *Edge) connError(ctx *fasthttp.RequestCtx, err error) { e.replyError(ctx, connReply(err)) }

func detail(e *protocol.Error) string {
	if m, ok := e.Data.(map[string]string); ok && m["error"] != "" {
		return m["error"]
	}
	return e.Message
}

// paramsSessionID reads params.sessionId, if any.
func paramsSessionID(m *protocol.Message) string {
	if len(m.Params) == 0 || m.Params[0] != '{' {
		return ""
	}
	var p protocol.SessionIDParams
	if protocol.Unmarshal(m.Params, &p) != nil {
		return ""
	}
	return p.SessionID
}

// initialize creates a connection of principal who and answers in the
// POST body.
func (e *Edge) initialize(ctx *fasthttp.RequestCtx, msg *protocol.Message, who string) {
	if msg.ID == nil {
		jsonError(ctx, fasthttp.StatusBadRequest, "initialize must be a request (with an id)")
		return
	}
	if e.closing.Load() {
		jsonError(ctx, fasthttp.StatusServiceUnavailable, msgShuttingDown)
		return
	}
	if !e.admitUser(who) {
		e.auditRefusal(ctx, who, "", "initialize", "too_many_connections")
		tooManyConns(ctx, e.cfg.MaxConnectionsPerUser)
		return
	}
	w := &initWait{id: msg.ID, ch: make(chan []byte, 1)}
	c := e.openConn(e.newConnID(), w, false, actors.Identity{Principal: who, Remote: ctx.RemoteAddr().String()})
	c.log.Debug().Str("remote", ctx.RemoteAddr().String()).Msg("connection open")
	if !e.holdInit {
		c.actor.Deliver(msg)
	}

	timer := time.NewTimer(e.cfg.InitializeTimeout)
	defer timer.Stop()
	var body []byte
	select {
	case body = <-w.ch:
	case <-timer.C:
	case <-e.quit:
	}
	if body == nil {
		c.mu.Lock()
		if c.init == nil { // answered just now
			body = <-w.ch
		}
		c.init = nil
		c.mu.Unlock()
	}
	if body == nil {
		if e.closing.Load() {
			jsonError(ctx, fasthttp.StatusServiceUnavailable, msgShuttingDown)
			return
		}
		c.log.Warn().Dur("timeout", e.cfg.InitializeTimeout).Msg("initialize not answered in time")
		jsonError(ctx, fasthttp.StatusGatewayTimeout, msgInitTimeout)
		go e.closeConn(c, reasonInitTimeout, false, e.cfg.CloseTimeout)
		return
	}
	c.touch()
	ctx.Response.Header.Set(HeaderConnectionID, c.id)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// tooManyConns answers 429 to a principal at its connection limit.
func tooManyConns(ctx *fasthttp.RequestCtx, limit int) {
	ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "5")
	jsonError(ctx, fasthttp.StatusTooManyRequests, fmt.Sprintf("%s (limit %d); close one with DELETE /acp", msgTooManyConns, limit))
}

// newConnID is the id of a new connection; in cluster mode it names this
// pod, so that any pod finds the connection.
func (e *Edge) newConnID() string {
	if e.cluster != nil {
		return e.cluster.Incarnation() + "." + uuid.NewString()
	}
	return uuid.NewString()
}

// openConn starts the connection actor of a new connection of who
// (admitted by admitUser already) and registers it, unused until its first
// stream or request after initialize (w, for the synchronous initialize
// POST) or first frame (a WebSocket, ws).
func (e *Edge) openConn(id string, w *initWait, ws bool, who actors.Identity) *conn {
	c := &conn{e: e, main: &slot{}, init: w, ws: ws, principal: who.Principal}
	c.touch()
	c.actor = e.srv.ConnectAs(id, who, c)
	c.id = c.actor.ID
	c.log = e.log.With().Str("conn", c.id).Logger()
	e.mu.Lock()
	e.conns[c.id] = c
	evict := e.addUnusedLocked(c)
	e.mu.Unlock()
	for _, old := range evict {
		go e.closeConn(old, reasonUnused, false, e.cfg.CloseTimeout)
	}
	return c
}

// get handles GET /acp: the connection stream, or a session stream with
// Acp-Session-Id.
func (e *Edge) get(ctx *fasthttp.RequestCtx, who string) (stream func()) {
	h := &ctx.Request.Header
	if isWebSocketUpgrade(h) {
		e.upgrade(ctx, who)
		return nil
	}
	id := h.Peek(HeaderConnectionID)
	if len(id) == 0 {
		jsonError(ctx, fasthttp.StatusBadRequest, msgConnNotFound)
		return nil
	}
	c := e.lookup(id)
	owner := ""
	if c == nil {
		if owner = e.ownerOf(id); owner == "" {
			jsonError(ctx, fasthttp.StatusBadRequest, e.notFound(id, msgConnNotFound))
			return nil
		}
	} else {
		if r, ok := e.owns(c, who, "get", ""); !ok {
			e.replyError(ctx, r)
			return nil
		}
		c.touch()
	}
	if !acceptsEventStream(h.Peek(fasthttp.HeaderAccept)) {
		jsonError(ctx, fasthttp.StatusNotAcceptable, "Accept must allow text/event-stream")
		return nil
	}
	sid := h.Peek(HeaderSessionID)
	if len(sid) > 0 && !validSessionID(sid) {
		jsonError(ctx, fasthttp.StatusBadRequest, "Invalid Acp-Session-Id header")
		return nil
	}
	last, err := parseLastEventID(h.Peek(HeaderLastEventID))
	if err != nil {
		jsonError(ctx, fasthttp.StatusBadRequest, "Invalid Last-Event-ID header")
		return nil
	}
	if e.closing.Load() {
		jsonError(ctx, fasthttp.StatusServiceUnavailable, msgShuttingDown)
		return nil
	}
	if e.streams.Add(1) > int64(e.cfg.MaxStreams) {
		e.streams.Add(-1)
		jsonError(ctx, fasthttp.StatusServiceUnavailable, "Too many open streams")
		return nil
	}
	if owner != "" {
		return e.remoteGet(ctx, owner, id, sid, who, last)
	}
	e.settle(c)
	st, reject, replaced, err := c.attach(string(sid), last, ctx.Conn())
	if err != nil {
		e.streams.Add(-1)
		e.connError(ctx, err)
		return nil
	}
	setStreamHeaders(ctx)
	if reject != nil {
		e.streams.Add(-1)
		c.log.Info().Str("session", string(sid)).Uint64("last_event_id", *last).Msg("Last-Event-ID cannot be replayed")
		ctx.SetBody(reject)
		return nil
	}
	if last != nil || replaced {
		e.met.reconnects.Inc()
	}
	st.allowed = e.stillAllowed(ctx, who)
	head := e.takeOver(ctx)
	return func() { st.run(head) }
}

func setStreamHeaders(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	ctx.SetConnectionClose()
}

// takeOver makes the GET's connection the stream's: it returns the response
// head, which the stream writes itself, with no Content-Length (the body
// ends with the connection) and no chunked framing. After the handler
// (which runs the stream) returns, fasthttp writes nothing and closes the
// connection. On a connection's first request the handler's goroutine is
// the stream's writer, so the stream still counts in the server's
// Concurrency and graceful shutdown; on a reused one it is the hijack
// handler's (see route), which counts in neither (Shutdown waits for it,
// and MaxStreams still caps it).
func (e *Edge) takeOver(ctx *fasthttp.RequestCtx) (head []byte) {
	h := &ctx.Response.Header
	h.SetContentLength(-2)
	h.SetConnectionClose()
	h.SetServer(e.hs.Name)
	head = h.AppendBytes(nil)
	_ = ctx.SetWriteDeadline(time.Time{}) // the stream must outlive WriteTimeout
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {})
	return head
}

// delete handles DELETE /acp. Closing an unknown connection succeeds
// (idempotent), as in the original.
func (e *Edge) delete(ctx *fasthttp.RequestCtx, who string) {
	id := ctx.Request.Header.Peek(HeaderConnectionID)
	if len(id) == 0 {
		jsonError(ctx, fasthttp.StatusBadRequest, msgMissingConnID)
		return
	}
	if c := e.lookup(id); c != nil {
		if r, ok := e.owns(c, who, "delete", ""); !ok {
			e.replyError(ctx, r)
			return
		}
		e.closeConn(c, reasonDelete, true, e.cfg.CloseTimeout)
	} else if owner := e.ownerOf(id); owner != "" {
		if r := e.cluster.Delete(owner, string(id), who); r.Status != fasthttp.StatusOK {
			e.replyError(ctx, r)
			return
		}
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
}

// closeConn ends a connection once: it leaves the registry (later requests
// get 400), its running turns are cancelled and answered (those answers still
// reach the streams when drain is set), the actor stops, and the streams end.
// The sessions stay with the session store.
func (e *Edge) closeConn(c *conn, reason string, drain bool, timeout time.Duration) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		if c.detachTimer != nil {
			c.detachTimer.Stop() // it would keep c (and its buffer) for DetachedTurnMax
		}
		c.mu.Unlock()
		e.mu.Lock()
		delete(e.conns, c.id)
		e.leaveUserLocked(c.principal)
		if why, ok := tombText[reason]; ok {
			if len(e.tombOrder) >= maxTombs {
				delete(e.tombs, e.tombOrder[0])
				e.tombOrder = e.tombOrder[1:]
			}
			e.tombs[c.id] = why
			e.tombOrder = append(e.tombOrder, c.id)
		}
		e.mu.Unlock()
		e.settle(c)
		c.mu.Lock()
		if c.state == stateOpen {
			c.state = stateClosing
		}
		if c.reason == "" {
			c.reason = reason
		}
		c.init = nil
		c.mu.Unlock()
		c.actor.Close(timeout)
		c.mu.Lock()
		c.state = stateClosed
		c.endStreamsLocked(nil, drain)
		c.mu.Unlock()
		e.met.closed.WithLabelValues(reason).Inc()
		if reason == reasonUnused {
			c.log.Debug().Str("reason", reason).Msg("connection closed")
		} else {
			c.log.Info().Str("reason", reason).Msg("connection closed")
		}
	})
}

// reaper closes connections idle for longer than IdleTimeout, unused ones
// after UnusedTimeout, and cancels the turns of connections whose stream
// has been gone for longer than ReplayMaxAge.
func (e *Edge) reaper() {
	every := min(e.cfg.IdleTimeout/4, e.cfg.UnusedTimeout/4, e.cfg.ReplayMaxAge/2, 30*time.Second)
	t := time.NewTicker(max(every, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-e.quit:
			return
		case now := <-t.C:
			e.reapUnused(now.Add(-e.cfg.UnusedTimeout).UnixNano())
			cutoff := now.Add(-e.cfg.IdleTimeout).UnixNano()
			// Turns outlive their client for DetachedTurnMax (detach.go);
			// without it, nobody could receive what they produce once the
			// replay window is over.
			keep, why := e.cfg.ReplayMaxAge, "stream gone for longer than the replay window: cancelling running turns"
			if e.cfg.detachEnabled() {
				keep, why = e.cfg.DetachedTurnMax, "stream gone for longer than IAC_CODE_DETACHED_TURN_MAX: cancelling running turns"
			}
			abandoned := now.Add(-keep).UnixNano()
			detachedCutoff := now.Add(-max(e.cfg.IdleTimeout, keep+e.cfg.CloseTimeout)).UnixNano()
			for _, c := range e.snapshot() {
				if c.idleSince(cutoff, detachedCutoff) {
					go e.closeConn(c, reasonIdle, false, e.cfg.CloseTimeout)
				} else if c.abandoned(abandoned) {
					c.log.Info().Dur("after", keep).Msg(why)
					e.met.abandoned.Inc()
					c.actor.CancelTurns()
				}
			}
		}
	}
}

// addUnusedLocked queues a new connection as unused and returns the oldest
// unused ones beyond MaxUnused, to close. e.mu held.
func (e *Edge) addUnusedLocked(c *conn) []*conn {
	e.unused = append(e.unused, c)
	e.unusedN++
	var evict []*conn
	for e.unusedN > e.cfg.MaxUnused && len(e.unused) > 0 {
		old := e.unused[0]
		e.unused[0] = nil
		e.unused = e.unused[1:]
		if old.settled.CompareAndSwap(false, true) {
			e.unusedN--
			evict = append(evict, old)
		}
	}
	e.compactUnusedLocked()
	return evict
}

// settle marks c used (or closed): it leaves the unused count.
func (e *Edge) settle(c *conn) {
	if c.settled.CompareAndSwap(false, true) {
		e.mu.Lock()
		e.unusedN--
		e.compactUnusedLocked()
		e.mu.Unlock()
	}
}

// compactUnusedLocked drops settled connections from the queue once they
// are most of it, so it stays proportional to the unused ones.
func (e *Edge) compactUnusedLocked() {
	if len(e.unused) < 2*e.unusedN+64 {
		return
	}
	kept := e.unused[:0]
	for _, c := range e.unused {
		if !c.settled.Load() {
			kept = append(kept, c)
		}
	}
	clear(e.unused[len(kept):])
	e.unused = kept
}

// reapUnused closes, oldest first, the unused connections created before
// cutoff (the queue is in creation order).
func (e *Edge) reapUnused(cutoff int64) {
	e.mu.Lock()
	var expired []*conn
	for len(e.unused) > 0 {
		c := e.unused[0]
		if !c.settled.Load() {
			if c.lastActive.Load() >= cutoff || c.initPending() {
				break
			}
			if !c.settled.CompareAndSwap(false, true) {
				continue
			}
			e.unusedN--
			expired = append(expired, c)
		}
		e.unused[0] = nil
		e.unused = e.unused[1:]
	}
	e.mu.Unlock()
	for _, c := range expired {
		go e.closeConn(c, reasonUnused, false, e.cfg.CloseTimeout)
	}
}

// isJSON accepts application/json with any parameters.
func isJSON(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return bytes.EqualFold(bytes.TrimSpace(ct), []byte("application/json"))
}

// acceptsEventStream is lenient: a missing Accept, */*, text/* and
// text/event-stream all qualify (curl sends */*); q=0 excludes a range.
func acceptsEventStream(accept []byte) bool {
	if len(bytes.TrimSpace(accept)) == 0 {
		return true
	}
	for _, r := range bytes.Split(accept, []byte(",")) {
		params := bytes.Split(r, []byte(";"))
		mt := bytes.ToLower(bytes.TrimSpace(params[0]))
		if string(mt) != "*/*" && string(mt) != "text/*" && string(mt) != "text/event-stream" {
			continue
		}
		excluded := false
		for _, p := range params[1:] {
			k, v, _ := bytes.Cut(bytes.TrimSpace(p), []byte("="))
			if bytes.EqualFold(k, []byte("q")) {
				if q, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64); err == nil && q == 0 {
					excluded = true
				}
			}
		}
		if !excluded {
			return true
		}
	}
	return false
}

// validSessionID accepts 1–256 visible ASCII characters.
func validSessionID(id []byte) bool {
	if len(id) == 0 || len(id) > 256 {
		return false
	}
	for _, b := range id {
		if b < 0x21 || b > 0x7e {
			return false
		}
	}
	return true
}

func jsonError(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(protocol.MustMarshal(struct {
		Error string `json:"error"`
	}{msg}))
}

// errorHandler answers requests fasthttp could not parse: 413 for bodies
// over MaxBodySize (Content-Length or actual size), JSON bodies throughout.
func errorHandler(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var netErr *net.OpError
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		jsonError(ctx, fasthttp.StatusRequestEntityTooLarge, msgTooLarge)
	case errors.As(err, &small):
		jsonError(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, "Request headers too large")
	case errors.As(err, &netErr) && netErr.Timeout():
		jsonError(ctx, fasthttp.StatusRequestTimeout, "Request timeout")
	default:
		jsonError(ctx, fasthttp.StatusBadRequest, "Malformed HTTP request")
	}
}

// fasthttpLogger routes fasthttp's own messages to zerolog at debug level.
type fasthttpLogger struct{ log zerolog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug().Str("lib", "fasthttp").Msg(fmt.Sprintf(format, args...))
}
