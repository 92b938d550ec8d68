package httpsse

import (
	"bytes"
	"time"

	"github.com/iac-code/iac-code/protocol"
)

// Detached turns: a client whose stream or socket went away (a laptop that
// sleeps, a train tunnel) does not lose its running turns at once. They
// keep running for DetachedTurnMax after the client was last heard of;
// then they are cancelled. Meanwhile:
//
//   - an SSE connection keeps buffering its events (bounded as always): the
//     client coming back with Last-Event-ID gets every one, a permission
//     request asked meanwhile included, which it can still answer;
//   - a WebSocket connection cannot come back (a new socket is a new
//     connection): its turns run to their end, recorded in the session's
//     history for a later session/load, and its frames are dropped; the
//     connection ends with its last prompt answered. A client that stops
//     reading its socket is treated so too once its buffer is full.
//
// The edge knows which turns run from the session/prompt requests it
// delivered and their answers (pendingPrompts).

// detachEnabled: turns outlive their client (DetachedTurnMax > 0).
func (c Config) detachEnabled() bool { return c.DetachedTurnMax > 0 }

// trackPrompt notes a session/prompt request the edge delivers.
func (c *conn) trackPrompt(m *protocol.Message) {
	if m.ID == nil || protocol.CanonicalMethod(m.Method) != protocol.MethodSessionPrompt {
		return
	}
	c.mu.Lock()
	if c.prompts == nil {
		c.prompts = map[string]struct{}{}
	}
	c.prompts[string(bytes.TrimSpace(m.ID))] = struct{}{}
	c.mu.Unlock()
}

// promptAnsweredLocked forgets the prompt frame answers, if it is one of
// the pending prompts' answers, and reports whether the last one was (c.mu
// held).
func (c *conn) promptAnsweredLocked(frame []byte) (last bool) {
	if len(c.prompts) == 0 {
		return false
	}
	id, ok := responseID(frame)
	if !ok {
		return false
	}
	if _, ok := c.prompts[string(id)]; !ok {
		return false
	}
	delete(c.prompts, string(id))
	return len(c.prompts) == 0
}

// pendingPrompts counts the prompts delivered and not answered yet.
func (c *conn) pendingPrompts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.prompts)
}

// detachOverflowLocked handles a WebSocket client that stopped reading
// while its turns run as one whose socket died: its buffer is dropped, the
// socket is closed (1008) and the turns go on detached (detachSocket, once
// the reader sees the socket end). It reports false when that does not
// apply (the connection is closed as an SSE one). c.mu held.
func (c *conn) detachOverflowLocked() bool {
	if !c.ws || !c.e.cfg.detachEnabled() || len(c.prompts) == 0 || c.state != stateOpen {
		return false
	}
	c.detached = true
	c.e.met.detached.Inc()
	c.reason = reasonOverflow
	c.endStreamsLocked(nil, false)
	c.main.drop()
	c.count, c.bytes = 0, 0
	return true
}

// detachSocket keeps a WebSocket connection whose socket ended while its
// prompts run (see above): it closes once they are answered, or after
// DetachedTurnMax, which cancels them. It reports false when nothing runs
// (the caller closes the connection).
func (e *Edge) detachSocket(c *conn) bool {
	if !e.cfg.detachEnabled() {
		return false
	}
	c.mu.Lock()
	n := len(c.prompts)
	counted := c.detached // by detachOverflowLocked
	c.detached = n > 0 && c.state == stateOpen
	detached := c.detached
	if detached {
		// Armed under the lock that saw the connection open: a closeConn
		// after it stops this timer (before it, none is armed).
		if c.detachTimer != nil {
			c.detachTimer.Stop()
		}
		c.detachTimer = time.AfterFunc(e.cfg.DetachedTurnMax, func() {
			if c.pendingPrompts() > 0 {
				c.log.Info().Dur("after", e.cfg.DetachedTurnMax).Msg("detached turns still running after IAC_CODE_DETACHED_TURN_MAX: cancelling them")
			}
			e.closeConn(c, reasonWebSocket, false, e.cfg.CloseTimeout)
		})
	}
	c.mu.Unlock()
	if !detached {
		return false
	}
	c.log.Info().Int("prompts", n).Dur("max", e.cfg.DetachedTurnMax).Msg("websocket gone: its running turns go on detached")
	if !counted {
		e.met.detached.Inc()
	}
	return true
}
