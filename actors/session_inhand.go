package actors

import (
	"bytes"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
)

// requestInHand is the request the session serves in the message at hand
// (serveRequest: one a connection sent it, or one the stash gives back):
// its connection and id, and whether it is still owed an answer. It is
// not once respondTo answered it, or once something that answers it later
// keeps it: the stash while the store handle is taken back, the prompt
// queue, the MCP-held prompt, the turn slot (handedOff), the ending's
// close (settled).
// A panic serving the message answers it -32603 when still owed
// (crashing): every request with an id gets one answer, never two. Receive
// drops it before each message.
type requestInHand struct {
	req  *sessionRequest
	conn *actor.PID // req.conn, or the session's connection when nil (as respondTo)
	owed bool
}

// take: the session serves r for conn now.
func (h *requestInHand) take(r *sessionRequest, conn *actor.PID) {
	*h = requestInHand{req: r, conn: conn, owed: r.id != nil && conn != nil}
}

// settled: conn's request id is answered (respondTo), or kept by what
// answers it later by its id (the ending's close, letGo).
func (h *requestInHand) settled(conn *actor.PID, id protocol.RawMessage) {
	if h.owed && conn.Equal(h.conn) && bytes.Equal(id, h.req.id) {
		h.owed = false
	}
}

// handedOff: r is kept by what answers it later.
func (h *requestInHand) handedOff(r *sessionRequest) {
	if r == h.req {
		h.owed = false
	}
}

// owedTo is the connection and id of the request in hand while it is owed
// an answer (nil, nil once not).
func (h *requestInHand) owedTo() (*actor.PID, protocol.RawMessage) {
	if !h.owed {
		return nil, nil
	}
	return h.conn, h.req.id
}
