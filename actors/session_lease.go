package actors

import (
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/rs/zerolog"
)

// The session's store lease: the handle let go of between turns or after
// SessionRelease without activity (and taken back by acquire,
// session_acquire.go), a handle fenced by another process's takeover, and
// the hand-off of the session to another process (Server.HandOff).

// takeOverSession asks the process named by an in-use error to hand
// session id over (cluster mode), and reports whether it did, so that
// opening it again may succeed. A round trip to another pod: called off the
// session actor, by the goroutine of an Open or Acquire (startOpen,
// startAcquire).
func takeOverSession(h Handover, log zerolog.Logger, id string, err error) bool {
	var inUse *store.InUseError
	if h == nil || !errors.As(err, &inUse) || errors.Is(err, store.ErrFenced) || inUse.Owner == "" {
		return false
	}
	start := time.Now()
	if herr := h.TakeOver(id, inUse.Owner); herr != nil {
		log.Info().Err(herr).Str("holder", inUse.Owner).Msg("session not handed over")
		return false
	}
	log.Info().Str("from", inUse.Owner).Dur("took", time.Since(start)).Msg("session handed over by another pod")
	return true
}

// leaseState is the state of the session's store lease.
type leaseState uint8

const (
	// leaseHeld: the handle holds its descriptors and lock (or there is
	// no handle yet: s.store nil).
	leaseHeld leaseState = iota
	// leaseReleased: the handle let go of its descriptors and lock (after
	// SessionRelease without activity, or between turns for a file
	// store); acquire takes them back.
	leaseReleased
	// leaseAcquiring: an Open or Acquire is in flight off the actor
	// (session_acquire.go); messages that need the handle wait.
	leaseAcquiring
	// leaseFenced: a write found the session taken over by another process
	// (shared store, ErrFenced); nothing more is written until stopWriting
	// has let go of the handle.
	leaseFenced
)

// storeLease is the session's store lease; only this file writes its
// fields. (A closed lease is the session ending: its phase says so.)
type storeLease struct {
	state leaseState
	// fenced: leaseFenced; the answer to what needed the write.
	fenced *protocol.Error
	// acq: leaseAcquiring; the Open or Acquire in flight, back the state
	// it leaves the lease in when it fails.
	acq  *acquiring
	back leaseState
	// timer sends the next releaseTick, armed while it runs.
	timer *time.Timer
	armed bool
}

func (l *storeLease) released() bool  { return l.state == leaseReleased }
func (l *storeLease) acquiring() bool { return l.acq != nil }

// writable: the session may write its store entry.
func (l *storeLease) writable() bool { return l.state == leaseHeld }

// await: call is in flight.
func (l *storeLease) await(call *acquiring) { l.back, l.state, l.acq = l.state, leaseAcquiring, call }

// settle reports whether call is the one in flight, and ends it: the handle
// is held when it succeeded.
func (l *storeLease) settle(call *acquiring, held bool) bool {
	if call != l.acq {
		return false
	}
	l.acq, l.state = nil, l.back
	if held {
		l.state = leaseHeld
	}
	return true
}

// abandon ends the call in flight without its result (the session stops).
func (l *storeLease) abandon() *acquiring {
	call := l.acq
	if call != nil {
		l.acq, l.state = nil, l.back
	}
	return call
}

// letGo: the handle let go of its descriptors and lock.
func (l *storeLease) letGo() { l.state, l.fenced = leaseReleased, nil }

// fence: the session was taken over; e answers what needed the write.
func (l *storeLease) fence(e *protocol.Error) {
	if l.fenced == nil {
		l.state, l.fenced = leaseFenced, e
	}
}

// unfence forgets a fence without letting go (the session ends anyway).
func (l *storeLease) unfence() {
	if l.state == leaseFenced {
		l.state = leaseHeld
	}
	l.fenced = nil
}

func (l *storeLease) stopTimer() {
	if l.timer != nil {
		l.timer.Stop()
	}
}

// armRelease sends the session a releaseTick after d, once at a time.
func (s *session) armRelease(ctx actor.Context, d time.Duration) {
	if s.lease.armed {
		return
	}
	s.lease.armed = true
	self, root := ctx.Self(), ctx.ActorSystem().Root
	s.lease.timer = time.AfterFunc(d, func() { root.Send(self, &releaseTick{}) })
}

// releaseTicked: the release timer fired.
func (s *session) releaseTicked(ctx actor.Context) {
	s.lease.armed = false
	s.releaseIfIdle(ctx)
}

// releaseIfIdle lets go of the store handle (descriptors, cross-process
// lock) once nothing has happened for SessionRelease and no turn runs, so
// an idle session costs no descriptor and another process may take it.
func (s *session) releaseIfIdle(ctx actor.Context) {
	if !s.holdsStore() {
		return
	}
	period := s.deps.Config.SessionRelease
	if !s.quiet() {
		s.armRelease(ctx, period)
		return
	}
	if left := period - time.Since(s.lastActive); left > 0 {
		s.armRelease(ctx, left)
		return
	}
	s.flushMeta()
	if err := s.store.Release(); err != nil {
		s.log.Error().Err(err).Msg("release session store")
	}
	s.lease.letGo()
}

// releaseBetweenTurns lets go of a file store's lock as soon as the session
// is idle (store.TurnMarker): another process on the same home that asks
// for the session gets it at once, and the next request here takes it
// back, reloading what that process wrote (acquire). No turn, held or
// queued prompt, or start waiting for MCP servers may be in progress.
func (s *session) releaseBetweenTurns() {
	if !s.holdsStore() || !s.quiet() {
		return
	}
	if _, ok := s.store.(store.TurnMarker); !ok {
		return
	}
	s.flushMeta()
	if err := s.store.Release(); err != nil {
		s.log.Error().Err(err).Msg("release session store")
	}
	s.lease.letGo()
}

// writeFailed reports a failed store write. A session taken over by another
// process (ErrFenced: its lease lapsed, another process has it now) is
// fenced: it writes nothing more, and what needed the write is answered
// with the error (see stopWriting); anything else is logged.
func (s *session) writeFailed(err error, what string) {
	if !errors.Is(err, store.ErrFenced) {
		s.log.Error().Err(err).Msg(what)
		return
	}
	if s.lease.fenced == nil {
		s.lease.fence(s.storeError(err, what))
	}
}

// stopWriting lets go of a fenced session: a running turn is cancelled (its
// prompt is answered with the error, see endTurn); then the handle is
// released, so that the next request takes the session back with what the
// other process wrote, or answers -32010 naming it while it holds it.
func (s *session) stopWriting(ctx actor.Context) {
	if s.turn.running() {
		s.cancelTurn(ctx)
		return
	}
	if s.store == nil || !s.phase.serving() {
		s.lease.unfence()
		return
	}
	if err := s.store.Release(); err != nil {
		s.log.Error().Err(err).Msg("release session store")
	}
	s.lease.letGo()
}

// handOffTo lets go of the session for another process once its running
// turn ended, then answers from (see finishEnding).
func (s *session) handOffTo(ctx actor.Context, from *actor.PID) {
	s.cancelHeldPrompt(ctx)
	s.cancelQueued(ctx, nil, nil)
	s.answerPendingStarts(ctx)
	s.letGo(ctx, phase{kind: phaseEnding, why: endHandOff, askers: []*actor.PID{from}})
}
