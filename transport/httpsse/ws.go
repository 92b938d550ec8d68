package httpsse

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/protocol"
)

// WebSocket on /acp (RFD "Streamable HTTP & WebSocket Transport"): GET /acp
// with Upgrade: websocket is answered 101 with Acp-Connection-Id, and the
// socket is then one ACP connection: one JSON-RPC message per text frame in
// both directions, binary frames ignored, initialize first (the connection
// actor refuses anything before it). Host, Origin and the bearer token are
// decided by serve before the upgrade, exactly as for POST.
//
// The connection is an ordinary conn of the edge whose only stream is the
// socket: the actor's frames go through the same outbox (conn.Send), so the
// buffer bounds, the overflow close, shutdown and the metrics are those of
// SSE. The socket's writer takes its events like a stream writer; its
// reader delivers frames to the actor like POSTs. Written events are not
// kept for replay (a WebSocket cannot resume: a client reconnects with a
// new connection and session/load).

// WebSocket subprotocols: wsSubprotocol is echoed when offered (browsers
// and the ws package fail a handshake that offered protocols and got none
// back); a "acp.bearer.<token>" entry carries the token of a browser, which
// cannot set Authorization, and is never echoed.
const (
	wsSubprotocol  = "acp"
	wsBearerPrefix = "acp.bearer."
)

// wsWriteWait bounds the write of a control frame (ping, close).
const wsWriteWait = 5 * time.Second

// reasonWebSocket: the client closed its WebSocket (or it died).
const reasonWebSocket = "websocket_closed"

// isWebSocketUpgrade: the request asks for a WebSocket (the upgrader checks
// the rest of the handshake).
func isWebSocketUpgrade(h *fasthttp.RequestHeader) bool {
	return bytes.EqualFold(bytes.TrimSpace(h.Peek(fasthttp.HeaderUpgrade)), []byte("websocket"))
}

// authorization is the request's credential as an Authorization header
// value: the header itself or, on a WebSocket upgrade without one (a
// browser cannot set headers there), "Bearer <token>" from a
// Sec-WebSocket-Protocol entry acp.bearer.<token>. Every credential check
// of the edge reads it, so a socket is authorized exactly as a POST.
func authorization(ctx *fasthttp.RequestCtx) []byte {
	h := &ctx.Request.Header
	if v := h.Peek(fasthttp.HeaderAuthorization); len(v) > 0 || !ctx.IsGet() || !isWebSocketUpgrade(h) {
		return v
	}
	for _, p := range bytes.Split(h.Peek("Sec-WebSocket-Protocol"), []byte(",")) {
		p = bytes.TrimSpace(p)
		if len(p) > len(wsBearerPrefix) && bytes.EqualFold(p[:len(wsBearerPrefix)], []byte(wsBearerPrefix)) {
			return append([]byte("Bearer "), p[len(wsBearerPrefix):]...)
		}
	}
	return nil
}

func newUpgrader(cfg Config) *websocket.FastHTTPUpgrader {
	return &websocket.FastHTTPUpgrader{
		HandshakeTimeout: 10 * time.Second,
		Subprotocols:     []string{wsSubprotocol},
		// Origin was checked against --allowed-origins before (edgeGuard);
		// the library's same-origin default would refuse listed origins.
		CheckOrigin: func(*fasthttp.RequestCtx) bool { return true },
		// Buffers only while a frame is written: an idle socket holds none.
		WriteBufferPool: &sync.Pool{},
		Error: func(ctx *fasthttp.RequestCtx, status int, reason error) {
			ctx.Response.Header.Del(HeaderConnectionID)
			ctx.Response.Header.Set("Sec-WebSocket-Version", "13")
			jsonError(ctx, status, reason.Error())
		},
	}
}

// upgrade answers GET /acp with Upgrade: websocket, admitted and
// authenticated already (who): the connection limits are decided before the
// 101 too. The connection actor starts once the 101 is on the wire.
func (e *Edge) upgrade(ctx *fasthttp.RequestCtx, who string) {
	if e.refuseNew(ctx) {
		return
	}
	if !e.admitUser(who) {
		e.auditRefusal(ctx, who, "", "websocket upgrade", "too_many_connections")
		tooManyConns(ctx, e.cfg.MaxConnectionsPerUser)
		return
	}
	if e.streams.Add(1) > int64(e.cfg.MaxStreams) {
		e.streams.Add(-1)
		e.leaveUser(who)
		jsonError(ctx, fasthttp.StatusServiceUnavailable, "Too many open streams")
		return
	}
	// Counted before the 101 goes out, so a client that sees the 101 sees
	// its socket in /metrics too.
	e.met.websockets.Add(1)
	id := e.newConnID()
	ident := actors.Identity{Principal: who, Remote: ctx.RemoteAddr().String()}
	allowed := e.stillAllowed(ctx, who)
	ctx.Response.Header.Set(HeaderConnectionID, id)
	// fasthttp skips the hijack handler when writing the 101 fails, and
	// closes the connection instead (see connState): the stream count and
	// the principal's connection must still be given back.
	nc := ctx.Conn()
	var once sync.Once
	opened := false
	release := func() {
		once.Do(func() {
			if !opened {
				e.leaveUser(who)
			}
			e.streams.Add(-1)
			e.met.websockets.Add(-1)
			e.late.Done()
		})
	}
	e.late.Add(1)
	e.lateRuns.Store(nc, release)
	err := e.upgrader.Upgrade(ctx, func(ws *websocket.Conn) {
		e.lateRuns.Delete(nc)
		defer release()
		opened = true // closeConn gives the principal's connection back
		e.serveWebSocket(id, ident, allowed, ws)
	})
	if err != nil {
		e.lateRuns.Delete(nc)
		release()
	}
}

// serveWebSocket runs one WebSocket connection until the socket ends, then
// closes the ACP connection, unless its running turns go on detached
// (detach.go).
func (e *Edge) serveWebSocket(id string, who actors.Identity, allowed func() bool, ws *websocket.Conn) {
	c := e.openConn(id, nil, true, who)
	c.log.Debug().Str("remote", ws.RemoteAddr().String()).Msg("websocket open")
	nc := ws.NetConn()
	if u, ok := nc.(interface{ UnsafeConn() net.Conn }); ok {
		// fasthttp's hijacked conn ignores Close until the handler returns;
		// the writer and endGrace must be able to end a stuck socket.
		nc = u.UnsafeConn()
	}
	st := c.attachSocket(nc)
	sock := newWSSocket(ws, nc, e.cfg.wsDeadAfter())
	written := make(chan struct{})
	stop := make(chan struct{})
	var revoked atomic.Bool
	go func() {
		defer close(written)
		if !e.writeWebSocket(st, sock, stop, allowed) {
			revoked.Store(true)
		}
		// The reader must not wait for a peer the writer gave up on; after
		// a close frame it waits wsLinger at most (socketClosing).
		if !sock.closing() {
			_ = nc.Close()
		}
	}()
	e.readWebSocket(c, sock)
	// The socket is done: a writer blocked on a peer that stopped reading
	// (no write deadline after the hijack) must not hold it, the handler
	// and the stream slot while the connection goes on detached.
	_ = nc.Close()
	if revoked.Load() || !e.detachSocket(c) {
		e.closeConn(c, reasonWebSocket, false, e.cfg.CloseTimeout)
	}
	close(stop)
	st.wake()
	// The library's buffers go back to its pool when this handler returns.
	<-written
}

// readWebSocket delivers the client's text frames to the connection actor
// until the socket fails, closes, sends a frame over MaxBodySize (the
// library then closes with 1009) or goes silent for longer than
// wsDeadAfter (a dead peer; the writer's pings keep a live one talking).
// Once the server's close frame is out it delivers nothing more and reads
// until the peer's close frame, or wsLinger (socketClosing).
func (e *Edge) readWebSocket(c *conn, sock *wsSocket) {
	ws := sock.ws
	sock.alive()
	ws.SetPongHandler(func(string) error { sock.alive(); return nil })
	ping := ws.PingHandler()
	ws.SetPingHandler(func(data string) error { sock.alive(); return ping(data) })
	ws.SetReadLimit(int64(e.cfg.MaxBodySize))
	tooLarge := func() {
		c.log.Info().Int("limit", e.cfg.MaxBodySize).Msg("websocket message too large: closed with 1009")
		sock.closeSent() // the library sent the 1009
		sock.drain()
	}
	for {
		kind, r, err := ws.NextReader()
		if err != nil {
			if errors.Is(err, websocket.ErrReadLimit) {
				tooLarge()
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				if sock.closing() {
					c.log.Debug().Dur("linger", wsLinger).Msg("websocket peer did not answer the close frame")
				} else {
					c.log.Info().Dur("silent_for", sock.dead).Msg("websocket peer does not answer pings: closed")
				}
			}
			return
		}
		sock.alive()
		if sock.closing() || kind != websocket.TextMessage {
			if _, err := io.Copy(io.Discard, r); err != nil {
				return
			}
			continue
		}
		data, err := io.ReadAll(r)
		if err != nil {
			if errors.Is(err, websocket.ErrReadLimit) {
				tooLarge()
			}
			return
		}
		c.touch()
		e.settle(c)
		deliverFrame(c, data)
	}
}

// deliverFrame hands one text frame to the actor: what post does with a
// body, with JSON-RPC errors (the socket has no status codes) for what
// post answers 400 or 501.
func deliverFrame(c *conn, data []byte) {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' && protocol.Valid(t) {
		c.actor.Reject(nil, protocol.NewError(protocol.CodeInvalidRequest, "JSON-RPC batches are not supported", nil))
		return
	}
	msg, perr := protocol.Decode(data)
	if perr != nil {
		var id protocol.RawMessage
		if msg != nil {
			id = msg.ID
		}
		c.actor.Reject(id, perr)
		return
	}
	c.trackPrompt(msg)
	c.actor.Deliver(msg)
}

// attachSocket makes a WebSocket the connection stream of a new conn. It
// has no direct writes (raw nil): frames are written by writeWebSocket.
func (c *conn) attachSocket(nc net.Conn) *stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &stream{c: c, sl: c.main, nc: nc, wakeCh: make(chan struct{}, 1), done: make(chan struct{})}
	c.main.stream = st
	c.open++
	c.hadStream = true
	return st
}

// writeWebSocket is the socket's writer: every event its slot receives
// becomes one text frame; a ping goes out every WSPingInterval, after
// allowed (nil: no authentication) confirmed the credential the socket was
// opened with. When the server ends the stream it sends a close frame
// saying why. It returns false when the credential was revoked (the socket
// is then closed with 1008, and its turns are not kept).
//
// The writer sleeps on its stream's wake channel alone: the stream's end
// (stream.end), the socket's end (stop, then a wake) and the ping timer
// all wake it there and leave the reason to be read after. A select over
// four channels cost more per event than writing the frame (under
// cachegrind about 2,900 instructions of an event's ~45,000, most of
// WebSocket's excess over SSE; see docs/performance.md).
func (e *Edge) writeWebSocket(st *stream, sock *wsSocket, stop <-chan struct{}, allowed func() bool) (ok bool) {
	c, ws := st.c, sock.ws
	defer func() {
		c.detach(st)
	}()
	var pingDue atomic.Bool
	interval := e.cfg.WSPingInterval
	pinger := time.AfterFunc(interval, func() {
		pingDue.Store(true)
		st.wake()
	})
	defer pinger.Stop()
	// sendPing sends the ping that is due and arms the next.
	sendPing := func() bool {
		pingDue.Store(false)
		if allowed != nil && !allowed() {
			c.log.Info().Msg("websocket credential no longer valid: closed")
			sock.sendClose(websocket.ClosePolicyViolation, "credential no longer valid")
			ok = false
			return false
		}
		pinger.Reset(interval)
		return ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(wsWriteWait)) == nil
	}
	ok = true
	var batch []event
	for {
		<-st.wakeCh
		select {
		case <-stop: // the socket is gone; the connection may go on detached
			return
		default:
		}
		if pingDue.Load() && !sendPing() {
			return
		}
		for more := true; more; {
			h := c.take(st, batch)
			batch = h.batch
			if h.skip {
				break
			}
			for i := range batch {
				if err := ws.WriteMessage(websocket.TextMessage, batch[i].data); err != nil {
					return
				}
				batch[i] = event{}
			}
			e.met.eventsSent.Add(uint64(len(batch)))
			if h.end {
				code, text := c.closeCode()
				sock.sendClose(code, text)
				return
			}
			more = c.release(st)
			// A long burst must not starve the pings a silent client's
			// pongs (and so its read deadline) depend on.
			if pingDue.Load() && !sendPing() {
				return
			}
		}
	}
}

// closeCode is the WebSocket close code and reason for the end of the
// connection's stream.
func (c *conn) closeCode() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.reason {
	case reasonOverflow:
		return websocket.ClosePolicyViolation, "event buffer overflow: the client did not read its messages"
	case reasonShutdown:
		return websocket.CloseGoingAway, "server shutting down"
	case reasonUnused:
		return websocket.ClosePolicyViolation, "no message after the upgrade"
	default:
		return websocket.CloseNormalClosure, ""
	}
}
