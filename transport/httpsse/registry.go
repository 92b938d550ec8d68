package httpsse

import (
	"time"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/iac-code/iac-code/actors"
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

// lookupSettled is lookup, waiting for a move of the connection under way
// to end (then it is found here no more, or again if the move failed).
func (e *Edge) lookupSettled(id []byte) *conn {
	c := e.lookup(id)
	if c != nil && c.waitMove() {
		c = e.lookup(id)
	}
	return c
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

// delete handles DELETE /acp. Closing an unknown connection succeeds
// (idempotent), as in the original.
func (e *Edge) delete(ctx *fasthttp.RequestCtx, who string) {
	id := ctx.Request.Header.Peek(HeaderConnectionID)
	if len(id) == 0 {
		jsonError(ctx, fasthttp.StatusBadRequest, msgMissingConnID)
		return
	}
	if c := e.lookupSettled(id); c != nil {
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
		// Closing from here on: detachSocket arms no timer after this.
		if c.state == stateOpen {
			c.state = stateClosing
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
		if c.moved && e.cluster != nil {
			e.cluster.ForgetMoved(c.id)
		}
		if reason == reasonUnused {
			c.log.Debug().Str("reason", reason).Msg("connection closed")
		} else {
			c.log.Info().Str("reason", reason).Msg("connection closed")
		}
	})
}
