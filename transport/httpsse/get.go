package httpsse

import (
	"bytes"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

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
	c := e.lookupSettled(id)
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
	// A stream this pod would serve for a connection held elsewhere (one
	// of another pod, or one of its own that moved during the drain) ends
	// when a draining pod exits, and its client reconnects once more: it
	// is refused at once instead, and the client resumes on another pod
	// with the same Last-Event-ID, nothing taken here. The pod's own
	// connections are served until they move.
	if owner != "" && e.refuseNew(ctx) {
		return nil
	}
	if e.closing() {
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
