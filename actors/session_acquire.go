package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
)

// Taking a released store handle back (acquire) may wait: up to a second
// for another process's lock (file store), a database round trip, and in
// cluster mode a takeover, in which another pod hands the session over
// (seconds). The session does it off its goroutine (startAcquire) and goes
// on answering meanwhile: what needs the handle (prompts, set_*, load,
// resume, delete, a handOff) waits in order in s.held and runs once the
// handle is back (or, on an error, the request that asked for it is
// answered with it, and the next one tries again, as they did one after
// the other before); what needs no handle is served at once, and a cancel
// of prompts (session/cancel, $/cancel_request, a connection leaving)
// answers the waiting ones cancelled, as it does queued prompts.
// session/close waits too, after cancelling the prompts: the handle must
// be closed before the close is answered (see closeStore); so do a
// leaving connection's drain and detach, after cancelling its prompts,
// so that its other requests are answered before it goes.

type (
	// acquiring is the one Acquire in flight of a session. mu orders the
	// session's stop with the goroutine's end: a hold that arrives once
	// the session stopped is closed by the goroutine, not leaked.
	acquiring struct {
		mu      sync.Mutex
		stopped bool // the session stopped: the goroutine closes the handle
		sent    bool // the goroutine is done with the handle: acquired sent
		// opened is the handle an Open made (startOpen), once sent.
		opened store.Session
		// trigger answers the request that asked for the handle with an
		// error of Acquire (nil once that request was cancelled).
		trigger *heldMessage
	}
	// acquired is the result of an Acquire made off the actor.
	acquired struct {
		call    *acquiring
		entries []store.Entry
		changed bool
		err     error
	}
	// opened is the result of an Open made off the actor (startOpen):
	// the handle, or proxy when the pod holding the session shares it.
	opened struct {
		call    *acquiring
		store   store.Session
		entries []store.Entry
		err     error
		proxy   *actor.PID
	}
	// heldMessage is a message that waits for the store handle; req is
	// the request it serves (nil for a message of the server), so that a
	// cancel finds the prompts among them; msg is the message as it came,
	// for a stub (the session turned out to be held by another pod).
	heldMessage struct {
		msg     any
		req     *sessionRequest
		run     func(ctx actor.Context)
		respond func(ctx actor.Context, e *protocol.Error)
	}
)

func (*acquired) IgnoreDeadLetterLogging() {}
func (*opened) IgnoreDeadLetterLogging()   {}

// startOpen opens the session's store entry on a goroutine of its own
// (load, resume, restore), which sends the result to the session as
// opened: the store may wait for another process's lock, a pod holding the
// session may share it (Handover.Share) or hand it over (takeOver). The
// messages meanwhile wait as they do for an Acquire.
func (s *session) startOpen(ctx actor.Context) {
	call := &acquiring{}
	s.acq = call
	self, root, st, share := ctx.Self(), ctx.ActorSystem().Root, s.deps.Store, s.shareRequest(ctx)
	handover, log, id := s.deps.Handover, s.log, s.id
	go func() {
		h, entries, err := st.Open(id)
		proxy := share.share(log, err)
		for try := 0; proxy == nil && try < 2 && takeOverSession(handover, log, id, err); try++ {
			h, entries, err = st.Open(id)
		}
		call.mu.Lock()
		defer call.mu.Unlock()
		if call.stopped {
			// A proxy made for a stub that is gone stops by itself: it
			// watches the stub (startShare).
			if err == nil {
				if cerr := h.Close(); cerr != nil {
					log.Error().Err(cerr).Msg("close the store of a session stopped while opening it")
				}
			}
			return
		}
		call.sent = true
		if err == nil {
			call.opened = h
		}
		root.Send(self, &opened{call: call, store: h, entries: entries, err: err, proxy: proxy})
	}()
}

// openedStore takes the result of startOpen: the session goes on opening,
// or becomes the stub of the session another pod holds; then the messages
// that waited run.
func (s *session) openedStore(ctx actor.Context, m *opened) {
	if m.call != s.acq {
		return
	}
	s.acq = nil
	if m.proxy != nil {
		s.remote = m.proxy
		ctx.Watch(m.proxy)
	} else {
		s.store = m.store
		s.openWith(ctx, m.entries, m.err)
	}
	s.runHeld(ctx)
}

// acquire reports whether the store handle is held, so that the request of
// conn with reqID may be served now. A released handle is taken back off
// the actor (startAcquire): the request waits, run serving it once the
// handle is back, and acquire reports false. When another process holds
// the session, the request is answered with an error naming the situation
// and is not served; an explicit load or resume (takeOver) asks that
// process to hand the session over first (cluster mode), a prompt does
// not: the session went elsewhere, as to another connection.
func (s *session) acquire(ctx actor.Context, r *sessionRequest, conn *actor.PID, reqID protocol.RawMessage, takeOver bool, run func(ctx actor.Context)) bool {
	if !s.released {
		return true
	}
	trigger := &heldMessage{req: r, run: run, respond: func(ctx actor.Context, e *protocol.Error) {
		s.respondTo(ctx, conn, reqID, nil, e)
	}}
	s.held = append([]*heldMessage{trigger}, s.held...)
	s.startAcquire(ctx, trigger, takeOver)
	return false
}

// startAcquire calls the store's Acquire (and the takeovers) on a goroutine
// of its own, which sends the result to the session as acquired.
func (s *session) startAcquire(ctx actor.Context, trigger *heldMessage, takeOver bool) {
	call := &acquiring{trigger: trigger}
	s.acq = call
	self, root, st := ctx.Self(), ctx.ActorSystem().Root, s.store
	handover, log, id := s.deps.Handover, s.log, s.id
	go func() {
		entries, changed, err := st.Acquire()
		for try := 0; takeOver && try < 2 && takeOverSession(handover, log, id, err); try++ {
			entries, changed, err = st.Acquire()
		}
		call.mu.Lock()
		defer call.mu.Unlock()
		if call.stopped {
			if cerr := st.Close(); cerr != nil {
				log.Error().Err(cerr).Msg("close the store of a session stopped while taking it back")
			}
			return
		}
		call.sent = true
		root.Send(self, &acquired{call: call, entries: entries, changed: changed, err: err})
	}()
}

// acquiredStore takes the result of startAcquire, then runs the messages
// that waited for it, in order, while no other Acquire is in flight.
func (s *session) acquiredStore(ctx actor.Context, m *acquired) {
	if m.call != s.acq {
		return
	}
	s.acq = nil
	if m.err != nil {
		if t := m.call.trigger; t != nil {
			s.unhold(t)
			t.respond(ctx, s.storeError(m.err, "cannot reopen the session"))
		}
	} else {
		s.reacquired(ctx, m.entries, m.changed)
	}
	s.runHeld(ctx)
}

// reacquired is the session with its handle back.
func (s *session) reacquired(ctx actor.Context, entries []store.Entry, changed bool) {
	s.released = false
	if changed {
		s.log.Info().Int("entries", len(entries)).Msg("session changed by another process; reloaded")
		if repaired, _, rerr := store.RepairSession(s.store, entries); rerr == nil {
			entries = repaired
		} else {
			s.writeFailed(rerr, "repair session history")
		}
		s.entries = entries
		s.adoptMeta()
	}
	s.armRelease(ctx, s.deps.Config.SessionRelease)
}

// runHeld runs the held messages in order until one starts another Acquire
// (the rest wait for that one) or the session stops.
func (s *session) runHeld(ctx actor.Context) {
	for s.acq == nil && len(s.held) > 0 && !(s.closing && s.turn == nil) {
		h := s.held[0]
		s.held[0] = nil
		s.held = s.held[1:]
		if s.remote != nil {
			s.receiveRemote(ctx, h.msg)
			continue
		}
		h.run(ctx)
	}
}

// unhold takes h out of the held messages.
func (s *session) unhold(h *heldMessage) {
	for i, x := range s.held {
		if x == h {
			s.held = append(s.held[:i], s.held[i+1:]...)
			return
		}
	}
}

// hold keeps a message that arrived during an Acquire for after it.
func (s *session) hold(msg any, r *sessionRequest, run func(ctx actor.Context)) {
	s.held = append(s.held, &heldMessage{msg: msg, req: r, run: run})
}

// holdWhileAcquiring holds the message being received when it needs the
// store handle and an Acquire is in flight, and reports whether it did. A
// cancel of prompts answers the held ones cancelled first, then is served
// as usual.
func (s *session) holdWhileAcquiring(ctx actor.Context) bool {
	if s.acq == nil {
		return false
	}
	switch m := ctx.Message().(type) {
	case *sessionRequest:
		switch m.method {
		case protocol.MethodSessionCancel:
			s.cancelHeld(ctx, nil, nil)
			return false
		case protocol.MethodSessionClose:
			s.cancelHeld(ctx, nil, nil)
		}
		s.hold(m, m, func(ctx actor.Context) { s.serveRequest(ctx, m, false) })
	case *attach:
		s.hold(m, nil, func(ctx actor.Context) { s.attachFor(ctx, m) })
	case *handOff:
		from := ctx.Sender()
		s.hold(m, nil, func(ctx actor.Context) { s.handOffTo(ctx, from) })
	case *deleteLive:
		s.hold(m, nil, s.endForDeleteElsewhere)
	case *clusterpb.Relay:
		// A frame of the proxy the pod holding the session made for this
		// one while Share was under way (the answer to the load): for the
		// stub this session becomes once it has the proxy's pid.
		s.hold(m, nil, func(actor.Context) {})
	case *cancelTurns:
		s.cancelHeld(ctx, m.conn, m.requestID)
		return false
	case *drain:
		// A closing connection's prompts are cancelled at once; its other
		// requests (a load, a set_mode) are answered before it hears the
		// session is idle, as they were before it.
		from := m.from
		if from == nil {
			from = s.conn
		}
		s.cancelHeld(ctx, from, nil)
		s.hold(m, nil, func(ctx actor.Context) { s.drainFor(ctx, from) })
	case *detach:
		s.cancelHeld(ctx, m.conn, nil)
		s.hold(m, nil, func(ctx actor.Context) { s.detachClient(ctx, m.conn) })
	default:
		return false
	}
	return true
}

// cancelHeld answers the held prompts cancelled that a cancel of conn's
// prompts (every connection's when conn is nil), or of the one with
// requestID, is of.
func (s *session) cancelHeld(ctx actor.Context, conn *actor.PID, requestID protocol.RawMessage) {
	kept := s.held[:0]
	for _, h := range s.held {
		if r := h.req; r != nil && r.method == protocol.MethodSessionPrompt && cancels(r, conn, requestID) {
			if s.acq != nil && s.acq.trigger == h {
				s.acq.trigger = nil
			}
			s.answerCancelled(ctx, r)
			continue
		}
		kept = append(kept, h)
	}
	clear(s.held[len(kept):])
	s.held = kept
}

// abandonAcquire is the session stopping: it reports whether an Acquire or
// Open is in flight, whose goroutine then closes the handle once it has it
// (else the session closes s.store, which is then the handle an Open sent
// and the session did not take yet).
func (s *session) abandonAcquire() bool {
	call := s.acq
	if call == nil {
		return false
	}
	s.acq = nil
	call.mu.Lock()
	defer call.mu.Unlock()
	if call.sent {
		if call.opened != nil {
			s.store = call.opened
		}
		return false
	}
	call.stopped = true
	return true
}
