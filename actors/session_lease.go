package actors

import (
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
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

// armRelease sends the session a releaseTick after d, once at a time.
func (s *session) armRelease(ctx actor.Context, d time.Duration) {
	if s.releaseArmed {
		return
	}
	s.releaseArmed = true
	self, root := ctx.Self(), ctx.ActorSystem().Root
	s.releaseTimer = time.AfterFunc(d, func() { root.Send(self, &releaseTick{}) })
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
	s.released = true
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
	s.released = true
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
	if s.fenced == nil {
		s.fenced = s.storeError(err, what)
	}
}

// stopWriting lets go of a fenced session: a running turn is cancelled (its
// prompt is answered with the error, see endTurn); then the handle is
// released, so that the next request takes the session back with what the
// other process wrote, or answers -32010 naming it while it holds it.
func (s *session) stopWriting(ctx actor.Context) {
	if s.turn != nil {
		s.cancelTurn(ctx)
		return
	}
	if s.store == nil || !s.phase.serving() {
		s.fenced = nil
		return
	}
	if err := s.store.Release(); err != nil {
		s.log.Error().Err(err).Msg("release session store")
	}
	s.released, s.fenced = true, nil
}

// handOffTo lets go of the session for another process once its running
// turn ended, then answers from (see finishEnding).
func (s *session) handOffTo(ctx actor.Context, from *actor.PID) {
	s.cancelHeldPrompt(ctx)
	s.cancelQueued(ctx, nil, nil)
	s.answerPendingStarts(ctx)
	s.letGo(ctx, phase{kind: phaseEnding, why: endHandOff, askers: []*actor.PID{from}})
}
