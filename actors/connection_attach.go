package actors

import (
	"slices"

	"github.com/iac-code/iac-code/protocol"
)

// The attaches a connection sent to a session's live actor (a load or a
// resume of a session open elsewhere on this process) are kept in the
// session's record (sessionRecord.attaching) until the actor took one to
// answer it, or the connection opened the session anew for it. A drain of
// the connection waits for them (sessionRecords.waiting): the load is
// answered before the connection goes.

// attachState is where a kept attach stands.
type attachState uint8

const (
	// attachSent: sent, not yet taken. Taken (attachTaken), the actor
	// answers it and it is no longer kept; never taken (dropped with a
	// stopping actor's mailbox, or a dead letter), it is opened anew once
	// the actor is gone (sessionGone).
	attachSent attachState = iota
	// attachComingBack: the actor took it once stopped (its attachTaken,
	// then attachHeld): it gives it back once gone (attachAgain), and it
	// is opened anew then.
	attachComingBack
)

// keep keeps a, sent to the session's actor.
func (r *sessionRecord) keep(a *attachRequest) {
	a.state = attachSent
	r.attaching = append(r.attaching, a)
}

// taken: the actor took the attach of reqID; it answers it.
func (r *sessionRecord) taken(reqID protocol.RawMessage) {
	r.drop(attachSent, reqID)
}

// held: the actor took the attach of reqID once stopped (its attachTaken
// came first) and gives it back once gone: it is kept again till then.
func (r *sessionRecord) held(id string, reqID protocol.RawMessage) {
	r.attaching = append(r.attaching, &attachRequest{id: id, reqID: reqID, state: attachComingBack})
}

// givenBack: the actor, gone, gave back the attach of reqID, which is
// opened anew.
func (r *sessionRecord) givenBack(reqID protocol.RawMessage) {
	r.drop(attachComingBack, reqID)
}

// untaken are the attaches sent that the actor did not say it took.
func (r *sessionRecord) untaken() []*attachRequest {
	var out []*attachRequest
	for _, a := range r.attaching {
		if a.state == attachSent {
			out = append(out, a)
		}
	}
	return out
}

// reopened: the untaken attach a is opened anew.
func (r *sessionRecord) reopened(a *attachRequest) bool {
	i := slices.Index(r.attaching, a)
	if i < 0 {
		return false
	}
	r.attaching = slices.Delete(r.attaching, i, i+1)
	return true
}

// drop forgets the first attach of reqID in state in.
func (r *sessionRecord) drop(in attachState, reqID protocol.RawMessage) {
	key := protocol.IDKey(reqID)
	if i := slices.IndexFunc(r.attaching, func(a *attachRequest) bool {
		return a.state == in && protocol.IDKey(a.reqID) == key
	}); i >= 0 {
		r.attaching = slices.Delete(r.attaching, i, i+1)
	}
}
