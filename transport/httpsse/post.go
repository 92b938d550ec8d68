package httpsse

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/protocol"
)

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
	c := e.lookupSettled(id)
	if c == nil {
		if owner := e.ownerOf(id); owner != "" {
			e.forwardPost(ctx, owner, id, who, body)
			return
		}
		jsonError(ctx, fasthttp.StatusBadRequest, e.notFound(id, msgConnNotFoundPost))
		return
	}
	if tp := ctx.Request.Header.Peek(HeaderTraceparent); len(tp) > 0 {
		msg.Traceparent = string(tp) // a trace the prompt's _meta may not name
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
	if e.refuseNew(ctx) {
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
		if e.closing() {
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

// isJSON accepts application/json with any parameters.
func isJSON(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return bytes.EqualFold(bytes.TrimSpace(ct), []byte("application/json"))
}
