package httpsse

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/iac-code/iac-code/protocol"
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
	case "/ready":
		route = routeReady
	case "/metrics":
		route = routeMetrics
	}
	if !e.guard.admit(ctx) {
		return nil
	}
	// /health and /ready answer without credentials: kubelet and
	// load-balancer probes carry none, and their constant bodies tell no
	// more than the 401 (realm "iac-code") an unauthenticated request gets
	// anyway.
	who := ""
	if route != routeHealth && route != routeReady {
		var ok bool
		if who, ok = e.identify(ctx); !ok {
			return nil
		}
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
	case "/ready":
		if !ctx.IsGet() && !ctx.IsHead() {
			ctx.Response.Header.Set("Allow", "GET, HEAD")
			jsonError(ctx, fasthttp.StatusMethodNotAllowed, "Method not allowed")
			return nil
		}
		e.ready(ctx)
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
