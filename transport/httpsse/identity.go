package httpsse

import (
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/iac-code/iac-code/transport/auth"
)

// identify decides the principal of a request, once, from its credential
// (authorization: the Authorization header, or on a WebSocket upgrade the
// acp.bearer subprotocol entry; never from the body): auth.Default when the edge
// has no authentication. On a refused credential it answers 401 itself and
// reports false; the audit line names the reason, never the credential.
// Every transport of the edge (SSE, WebSocket) calls it per HTTP request.
func (e *Edge) identify(ctx *fasthttp.RequestCtx) (principal string, ok bool) {
	if e.authn == nil {
		return auth.Default, true
	}
	p, err := e.authn.Authenticate(authorization(ctx))
	if err != nil {
		e.audit(ctx, "").Str("method", string(ctx.Method())+" "+string(ctx.Path())).
			Str("conn", string(ctx.Request.Header.Peek(HeaderConnectionID))).
			Str("outcome", "unauthenticated").Str("reason", err.Error()).Msg("authentication failed")
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="iac-code"`)
		jsonError(ctx, fasthttp.StatusUnauthorized, msgUnauthorized)
		return "", false
	}
	return p, true
}

// owns reports whether principal who may use connection c; if not, the
// 403 reply, and an audit line. "" (a forwarding pod of an older version)
// counts as auth.Default.
func (e *Edge) owns(c *conn, who, route, method string) (Reply, bool) {
	if who == "" {
		who = auth.Default
	}
	if c.principal == who {
		return Reply{}, true
	}
	c.log.Info().Bool("audit", true).Str("principal", who).Str("method", route+" "+method).
		Str("outcome", "forbidden").Msg("request on another user's connection refused")
	return Reply{fasthttp.StatusForbidden, msgForbiddenConn}, false
}

// audit starts an audit line about a request.
func (e *Edge) audit(ctx *fasthttp.RequestCtx, who string) *zerolog.Event {
	ev := e.log.Info().Bool("audit", true).Str("remote", ctx.RemoteAddr().String())
	if who != "" {
		ev = ev.Str("principal", who)
	}
	return ev
}

func (e *Edge) auditRefusal(ctx *fasthttp.RequestCtx, who, conn, method, outcome string) {
	e.audit(ctx, who).Str("conn", conn).Str("method", method).Str("outcome", outcome).Msg("request refused")
}

// admitUser counts a new connection of who, unless who holds
// MaxConnectionsPerUser already.
func (e *Edge) admitUser(who string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n := e.cfg.MaxConnectionsPerUser; n > 0 && e.perUser[who] >= n {
		return false
	}
	e.perUser[who]++
	return true
}

// leaveUser uncounts a connection of who that was admitted but never opened.
func (e *Edge) leaveUser(who string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.leaveUserLocked(who)
}

// leaveUserLocked uncounts a closed connection of who. e.mu held.
func (e *Edge) leaveUserLocked(who string) {
	if e.perUser[who] <= 1 {
		delete(e.perUser, who)
	} else {
		e.perUser[who]--
	}
}

// stillAllowed is, for a stream (or WebSocket) opened by who with the
// request's credential (authorization), the re-check of that credential its writer makes at
// every keep-alive: a token removed from the tokens file (or a JWT past its
// exp) ends the open stream too, not only the next request. nil without
// authentication. The header is copied: fasthttp reuses the request.
func (e *Edge) stillAllowed(ctx *fasthttp.RequestCtx, who string) func() bool {
	if e.authn == nil {
		return nil
	}
	h := append([]byte(nil), authorization(ctx)...)
	return func() bool {
		p, err := e.authn.Authenticate(h)
		return err == nil && p == who
	}
}
