package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// Taking a released store handle back (acquire) may wait: up to a second
// for another process's lock (file store), a database round trip, and in
// cluster mode a takeover, in which another pod hands the session over
// (seconds). The session does it off its goroutine (startAcquire) and goes
// on answering meanwhile: what needs the handle (prompts, set_*, load,
// resume, delete, a handOff) waits in order in the stash and runs once the
// handle is back (or, on an error, the request that asked for it is
// answered with it, and the next one tries again, as they did one after
// the other before); what needs no handle is served at once, and a cancel
// of prompts (session/cancel, $/cancel_request, a connection leaving)
// answers the waiting ones cancelled, as it does queued prompts. They wait
// in the session's stash (session_stash.go).
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
		trigger *envelope
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
		share   *shareCall
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
	s.lease.await(call)
	self, root, st, share := ctx.Self(), ctx.ActorSystem().Root, s.deps.Store, s.shareRequest(ctx)
	handover, log, id := s.deps.Handover, s.log, s.id
	if s.start == startAdopt {
		handover = nil // a live holder keeps its session: Adopt fails
	}
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
		root.Send(self, &opened{call: call, store: h, entries: entries, err: err, proxy: proxy, share: share})
	}()
}

// openedStore takes the result of startOpen: the session goes on opening,
// or becomes the stub of the session another pod holds; then the messages
// that waited run.
func (s *session) openedStore(ctx actor.Context, m *opened) {
	if !s.lease.settle(m.call, m.err == nil && m.proxy == nil) {
		return
	}
	if m.proxy != nil {
		s.becomeStub(ctx, m.share, m.proxy)
	} else {
		if m.share != nil {
			ctx.Stop(m.share.stub) // the leg no proxy writes to
		}
		s.store = m.store
		s.openWith(ctx, m.entries, m.err)
	}
	s.unstash(ctx)
}

// acquire reports whether the store handle is held, so that the request of
// conn with reqID, msg, may be served now. A released handle is taken back
// off the actor (startAcquire): msg waits first in the stash, stepped again
// once the handle is back, and acquire reports false. When another process holds
// the session, the request is answered with an error naming the situation
// and is not served; an explicit load or resume (takeOver) asks that
// process to hand the session over first (cluster mode), a prompt does
// not: the session went elsewhere, as to another connection.
func (s *session) acquire(ctx actor.Context, msg any, conn *actor.PID, reqID protocol.RawMessage, takeOver bool) bool {
	if !s.lease.released() {
		return true
	}
	trigger := &envelope{msg: msg, counted: true, respond: func(ctx actor.Context, e *protocol.Error) {
		s.respondTo(ctx, conn, reqID, nil, e)
	}}
	s.stash = append([]*envelope{trigger}, s.stash...)
	s.startAcquire(ctx, trigger, takeOver)
	return false
}

// startAcquire calls the store's Acquire (and the takeovers) on a goroutine
// of its own, which sends the result to the session as acquired.
func (s *session) startAcquire(ctx actor.Context, trigger *envelope, takeOver bool) {
	call := &acquiring{trigger: trigger}
	s.lease.await(call)
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
	if !s.lease.settle(m.call, m.err == nil) {
		return
	}
	if m.err != nil {
		if t := m.call.trigger; t != nil {
			s.unstashOne(t)
			if a, ok := t.msg.(*adoptTurn); ok {
				s.adoptFailed(ctx, a, m.err)
			} else {
				t.respond(ctx, s.storeError(m.err, "cannot reopen the session"))
			}
		}
	} else {
		s.reacquired(ctx, m.entries, m.changed)
	}
	s.unstash(ctx)
}

// reacquired is the session with its handle back: a turn another process
// left recorded meanwhile resumes, as at an open (openWith).
func (s *session) reacquired(ctx actor.Context, entries []store.Entry, changed bool) {
	prior := s.priorToResume()
	if changed {
		s.log.Info().Int("entries", len(entries)).Msg("session changed by another process; reloaded")
		if prior == nil { // a resumed turn's open calls are its next step
			if repaired, _, rerr := store.RepairSession(s.store, entries); rerr == nil {
				entries = repaired
			} else {
				s.writeFailed(rerr, "repair session history")
			}
		}
		s.entries = entries
		s.adoptMeta()
	}
	s.startFollowLog(ctx)
	s.armRelease(ctx, s.deps.Config.SessionRelease)
	if prior == nil {
		s.recordInterrupted()
		return
	}
	s.resumeTurn(ctx, prior)
}

// abandonAcquire is the session stopping: it reports whether an Acquire or
// Open is in flight, whose goroutine then closes the handle once it has it
// (else the session closes s.store, which is then the handle an Open sent
// and the session did not take yet).
func (s *session) abandonAcquire() bool {
	call := s.lease.abandon()
	if call == nil {
		return false
	}
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
