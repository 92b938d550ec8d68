package httpsse

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"
)

// DefaultDrainTimeout bounds the drain (IAC_CODE_DRAIN_TIMEOUT).
const DefaultDrainTimeout = 20 * time.Second

// msgDraining answers the requests a draining pod refuses: nothing was
// done, the same request succeeds on another pod.
const msgDraining = "Server is draining: send the request to another server"

// edgePhase is where the edge stands in its life. It only moves forward,
// through enter.
type edgePhase uint32

const (
	// edgeServing: the pod takes any request; GET /ready answers 200.
	edgeServing edgePhase = iota
	// edgeDraining: SIGTERM came. GET /ready answers 503 (the load
	// balancer moves on), new connections are refused with a 503 nothing
	// was done for, and everything else is served, on the listener still
	// open, while the mesh hands this pod's turns over (Cluster.Drain).
	edgeDraining
	// edgeClosing: Shutdown began: the listener stops, every connection is
	// closed, new connections and streams are refused (503).
	edgeClosing
)

// current is the edge's phase now.
func (e *Edge) current() edgePhase { return edgePhase(e.phase.Load()) }

// closing: Shutdown began.
func (e *Edge) closing() bool { return e.current() >= edgeClosing }

// enter moves the edge to phase p and reports whether it did (false when
// it is there or past it already).
func (e *Edge) enter(p edgePhase) bool {
	for {
		was := e.phase.Load()
		if edgePhase(was) >= p {
			return false
		}
		if e.phase.CompareAndSwap(was, uint32(p)) {
			return true
		}
	}
}

// Drain is the first part of a graceful stop: readiness answers draining
// and new connections are refused while the listener goes on serving the
// others; in cluster mode the mesh hands this pod's running turns over to
// other pods, for at most timeout. Shutdown follows. Without a mesh there
// is nothing to hand over and Drain returns at once.
func (e *Edge) Drain(timeout time.Duration) {
	if !e.enter(edgeDraining) {
		return
	}
	if e.cluster == nil {
		return
	}
	e.log.Info().Dur("budget", timeout).Msg("draining: readiness answers 503, new connections are refused, running turns are handed over")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	e.cluster.Drain(ctx)
}

// refuseNew answers a request that would open a new connection on a pod
// that is draining or closing (or a stream of a connection held by another
// pod, see get), and reports whether it did. The 503 says
// nothing was done: a load balancer or client may send it elsewhere
// (Retry-After), and the TCP connection is closed so that a pooling proxy
// picks another pod for the next one.
func (e *Edge) refuseNew(ctx *fasthttp.RequestCtx) bool {
	switch e.current() {
	case edgeServing:
		return false
	case edgeDraining:
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
		ctx.SetConnectionClose()
		jsonError(ctx, fasthttp.StatusServiceUnavailable, msgDraining)
	default:
		jsonError(ctx, fasthttp.StatusServiceUnavailable, msgShuttingDown)
	}
	return true
}

// ready answers GET /ready: 200 while serving, 503 {"status":"draining"}
// from SIGTERM on (GET /health stays 200: the process is alive).
func (e *Edge) ready(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("application/json")
	if e.current() == edgeServing {
		ctx.SetBodyString(`{"status":"ready"}`)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	ctx.SetBodyString(`{"status":"draining"}`)
}
