package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
)

// The session's one stash (Erlang gen_statem's postpone): a message its
// phase cannot serve yet — the store entry is being opened, or its handle
// taken back (session_acquire.go) — waits here, in order, and is stepped
// again once the session can serve it (unstash, after the transition).
// A cancel of prompts is served at once and answers the stashed prompts it
// is of cancelled; session/close and a leaving connection's drain and
// detach wait too, after cancelling their prompts (see session_acquire.go).

// envelope is a message as the session received it, with its sender (a
// handOff is answered to it).
type envelope struct {
	msg    any
	sender *actor.PID
	// counted: a sessionRequest counted in its connection's seen already
	// (it asked for the store handle: acquire).
	counted bool
	// respond answers the request that asked for the store handle with an
	// error of the Acquire (acquiring.trigger).
	respond func(ctx actor.Context, e *protocol.Error)
}

// request is the session request e carries, nil for another message.
func (e *envelope) request() *sessionRequest {
	r, _ := e.msg.(*sessionRequest)
	return r
}

// cannotServeYet: the store entry or handle is on its way; messages that
// need it wait.
func (s *session) cannotServeYet() bool { return s.lease.acquiring() }

// postpone stashes e when the session cannot serve it yet, and reports
// whether it did. A cancel of prompts answers the stashed ones cancelled
// first, then is served as usual.
func (s *session) postpone(ctx actor.Context, e envelope) bool {
	if !s.cannotServeYet() {
		return false
	}
	switch m := e.msg.(type) {
	case *sessionRequest:
		switch m.method {
		case protocol.MethodSessionCancel:
			s.cancelStashed(ctx, nil, nil)
			return false
		case protocol.MethodSessionClose:
			s.cancelStashed(ctx, nil, nil)
		}
	case *attach, *handOff, *deleteLive, *adoptTurn:
	case *legFrame:
		// A frame of the proxy the pod holding the session made for this
		// one while Share was under way (the answer to the load): for the
		// stub this session becomes once it has the proxy's pid.
	case *cancelTurns:
		s.cancelStashed(ctx, m.conn, m.requestID)
		return false
	case *drain:
		// A closing connection's prompts are cancelled at once; its other
		// requests (a load, a set_mode) are answered before it hears the
		// session is idle, as they were before it.
		if m.from == nil {
			m.from = s.conn
		}
		s.cancelStashed(ctx, m.from, nil)
	case *detach:
		s.cancelStashed(ctx, m.conn, nil)
	default:
		return false
	}
	s.stash = append(s.stash, stashed(e))
	return true
}

// stashed is e on the heap: only a stashed message costs an allocation
// (postpone sees every message, each chunk of a turn too).
func stashed(e envelope) *envelope { return &e }

// unstash steps the stashed messages in order until the session cannot
// serve the next one yet (it started another Acquire). Those left once it
// stopped are answered as a stopped session answers (stepStopped).
func (s *session) unstash(ctx actor.Context) {
	for !s.cannotServeYet() && len(s.stash) > 0 {
		e := s.stash[0]
		s.stash[0] = nil
		s.stash = s.stash[1:]
		s.step(ctx, *e)
	}
}

// unstashOne takes e out of the stash.
func (s *session) unstashOne(e *envelope) {
	for i, x := range s.stash {
		if x == e {
			s.stash = append(s.stash[:i], s.stash[i+1:]...)
			return
		}
	}
}

// cancelStashed answers the stashed prompts cancelled that a cancel of
// conn's prompts (every connection's when conn is nil), or of the one with
// requestID, is of.
func (s *session) cancelStashed(ctx actor.Context, conn *actor.PID, requestID protocol.RawMessage) {
	kept := s.stash[:0]
	for _, e := range s.stash {
		if r := e.request(); r != nil && r.method == protocol.MethodSessionPrompt && cancels(r, conn, requestID) {
			if call := s.lease.acq; call != nil && call.trigger == e {
				call.trigger = nil
			}
			s.answerCancelled(ctx, r)
			continue
		}
		kept = append(kept, e)
	}
	clear(s.stash[len(kept):])
	s.stash = kept
}
