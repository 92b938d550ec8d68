package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
)

// sessionRecord is everything a connection keeps about one session (it kept
// one map per item before): the record exists while any of it is set, and
// goes with the last (tidy).
type sessionRecord struct {
	// live is the session's actor while this connection uses it; sent
	// counts the requests forwarded to it (see retireRequest).
	live *actor.PID
	sent int
	// known: opened here and not closed; an evicted one comes back from
	// disk transparently at its next request, with the MCP servers it was
	// opened with (servers).
	known   bool
	servers []protocol.McpServerConfig
	// stopping is the actor this connection closed or let retire, until
	// its Terminated: the actor still holds its name (and store handle)
	// while it stops, and a message queued to it then is dropped without a
	// dead letter. Requests for the session wait in deferred and are
	// dispatched again once the actor is gone, so a load right after a
	// close, or a prompt racing an idle eviction, is never lost.
	stopping *actor.PID
	deferred []*protocol.Message
	// checking: the session's owner is being read from the store, with
	// what runs once it is known (checkOwner); its requests wait in
	// deferred meanwhile, as for stopping.
	checking func(actor.Context, bool)
	// attaching: the attaches sent to a live session not yet answered by
	// it nor opened anew, in the order sent, each in its state
	// (connection_attach.go): a drain waits for them.
	attaching []*attachRequest
	// settling counts the Terminated of its actors whose messages sent
	// before they stopped are still queued (sessionGone, behind them).
	settling int
	// idleWait: a drain waits for the session's turn of this connection:
	// the seq of the last drain sent to its actor (0: none), which its
	// sessionIdle of that seq ends.
	idleWait uint64
	// deletingLive: a session/delete of it, live on other connections,
	// waits for it to end there (session_delete.go).
	deletingLive bool
	// moved: handed over to another process (cluster pod): its requests
	// are answered as for a session moved to another connection, until
	// this connection loads it again.
	moved bool
}

// movedAway: the session went to another process; the connection knows
// it no more, and its requests are answered "moved" until it loads it
// again (moved).
func (r *sessionRecord) movedAway() { r.known, r.servers, r.moved = false, nil, true }

// empty: the record holds nothing.
func (r *sessionRecord) empty() bool {
	return r.live == nil && r.sent == 0 && !r.known && r.servers == nil && r.stopping == nil && len(r.deferred) == 0 &&
		r.checking == nil && len(r.attaching) == 0 && r.settling == 0 && r.idleWait == 0 && !r.deletingLive && !r.moved
}

// sessionRecords are a connection's records, by session id.
type sessionRecords map[string]*sessionRecord

// get is the record of id, nil when there is none.
func (rs sessionRecords) get(id string) *sessionRecord { return rs[id] }

// of is the record of id, made when there is none.
func (rs sessionRecords) of(id string) *sessionRecord {
	r := rs[id]
	if r == nil {
		r = &sessionRecord{}
		rs[id] = r
	}
	return r
}

// tidy drops the record of id once it holds nothing.
func (rs sessionRecords) tidy(id string) {
	if r := rs[id]; r != nil && r.empty() {
		delete(rs, id)
	}
}

// live is the actor of session id live on this connection.
func (rs sessionRecords) live(id string) (*actor.PID, bool) {
	if r := rs[id]; r != nil && r.live != nil {
		return r.live, true
	}
	return nil, false
}

// liveCount counts the sessions live on this connection.
func (rs sessionRecords) liveCount() int {
	n := 0
	for _, r := range rs {
		if r.live != nil {
			n++
		}
	}
	return n
}

// waiting reports whether a drain still waits for something of a session:
// its turn, an owner check, a deferred request, an attach its actor did not
// take yet or gives back (the load is answered once opened anew), an actor
// let go of until it is gone and what it sent before it went is handled.
func (rs sessionRecords) waiting() bool {
	for _, r := range rs {
		if r.idleWait != 0 || r.checking != nil || len(r.deferred) > 0 || len(r.attaching) > 0 ||
			r.stopping != nil || r.settling > 0 {
			return true
		}
	}
	return false
}

// forget: the connection no longer uses session id's actor, which is gone.
// A drain no longer waits for its turn: an actor that crashed (or stopped
// with the drain still in its mailbox) answers no sessionIdle; what it sent
// before it went is waited for still (settling).
func (rs sessionRecords) forget(id string) {
	if r := rs[id]; r != nil {
		r.live, r.sent, r.idleWait = nil, 0, 0
		rs.tidy(id)
	}
}

// close: the session is closed (or deleted) here: not known any more.
func (rs sessionRecords) close(id string) {
	if r := rs[id]; r != nil {
		r.known, r.servers = false, nil
		rs.tidy(id)
	}
}

// defer keeps m for when session id is not busy any more.
func (rs sessionRecords) postpone(id string, m *protocol.Message) {
	r := rs.of(id)
	r.deferred = append(r.deferred, m)
}

// takeDeferred returns the requests waiting for session id, and forgets them.
func (rs sessionRecords) takeDeferred(id string) []*protocol.Message {
	r := rs[id]
	if r == nil {
		return nil
	}
	waiting := r.deferred
	r.deferred = nil
	rs.tidy(id)
	return waiting
}
