package actors

import (
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
)

// The session's phase: what it is doing with its conversation, read in one
// place (s.phase) and changed by one function (become), which refuses an
// illegal transition. Each phase has its step (one handler per phase); the
// work every phase shares is done by Receive around it. What a phase cannot
// serve yet waits in one stash and runs again once it can (session_stash.go).
//
//	opening ──▶ live ──▶ ending{close | last detach | deleted elsewhere | hand-off | retire | pause} ──▶ stopped
//	   │ ╲                 ▲  │ retire refused: back to live       │ pause: its clients here follow it
//	   │  ╲──▶ failed ─────┘  │                                    ▼
//	   ╰──▶ stub (another pod holds the session, session_remote.go) ──▶ stopped
//	          ╰──▶ live | failed: asked to adopt the session, it took it (session_stub_adopt.go)
//
// docs/architecture.md draws it with what triggers each transition.

// phaseKind is the session's phase.
type phaseKind uint8

const (
	// phaseOpening: the store entry is being opened off the actor
	// (startOpen); messages that need it wait in the stash.
	phaseOpening phaseKind = iota
	// phaseLive: the session serves its clients.
	phaseLive
	// phaseStub: another pod holds the session; this actor relays to the
	// proxy connection there (session_remote.go).
	phaseStub
	// phaseFailed: the store entry could not be opened; every request is
	// answered with why until the connection retires the session.
	phaseFailed
	// phaseEnding: the session lets go (why says for what); it stops once
	// its running turn has ended. Ending to retire serves as live does
	// while the connection decides.
	phaseEnding
	// phaseStopped: the actor stopped or is stopping.
	phaseStopped
)

var phaseNames = [...]string{"opening", "live", "stub", "failed", "ending", "stopped"}

func (k phaseKind) String() string { return phaseNames[k] }

// endReason is why a session ends.
type endReason uint8

const (
	endNone endReason = iota
	// endClose: session/close (or session/delete) from its only client.
	endClose
	// endLastDetach: the last attached connection went away.
	endLastDetach
	// endDeletedElsewhere: another connection deletes the session.
	endDeletedElsewhere
	// endHandOff: another process takes the session (Server.HandOff).
	endHandOff
	// endRetire: idle; the connection is asked to forget it (retireRequest).
	endRetire
	// endPause: the process drains (Server.PauseTurns): the running turn
	// pauses at its next step boundary, and the session lets go of its
	// lease keeping the turn recorded, for another process to resume it
	// (session_pause.go).
	endPause
	// endUnattended: a session with no client (Server.Adopt) is idle: its
	// resumed turn ended, or it had none to resume.
	endUnattended
)

var endReasonNames = [...]string{"", "close", "last detach", "deleted elsewhere", "hand-off", "retire", "pause", "unattended"}

func (r endReason) String() string { return endReasonNames[r] }

// phase is the session's phase with the state only that phase has; become
// sets it whole, so that entering a phase resets its state.
type phase struct {
	kind phaseKind
	// why: the ending's reason.
	why endReason
	// failErr: failed; the answer to every request; cause: the store's
	// error (Server.Adopt returns it).
	failErr *protocol.Error
	cause   error
	// closeID, closeConn: ending to close; the session/close answered once
	// the session stopped (a stub's legs keep their own, session_stub.go).
	closeID   protocol.RawMessage
	closeConn *actor.PID
	// askers: ending; the askers of a handOff, answered once the session
	// let go of its lease, whatever the ending's reason.
	askers []*actor.PID
	// left: ending for good, and stopped after it; closed once the actor
	// stopped (Server.HandOff waits on it).
	left chan struct{}
	// pauser: ending to pause (and any ending after it); Server.PauseTurns,
	// answered once the session let go; paused: the turn paused (its mark
	// kept with the lease let go of), rather than ended here.
	pauser *actor.PID
	paused bool
	// reattach: stopped; the attaches it took and cannot serve, given back
	// to their connections once the actor is gone (attachAgain).
	reattach []*attach
	// hearing: stopped after a hand-off or a pause told its connections it
	// left (tellLeft): those yet to say they heard it (leftHeard). The
	// actor stops once all have: a request one passed on before it heard
	// is answered "moved" here, not lost with the stopped actor's mailbox.
	hearing []*actor.PID
}

func (p phase) String() string {
	if p.kind == phaseEnding {
		return "ending(" + p.why.String() + ")"
	}
	return p.kind.String()
}

// is reports whether the session is in phase k (and, for an ending, for
// one of whys).
func (p phase) is(k phaseKind, whys ...endReason) bool {
	return p.kind == k && (len(whys) == 0 || slices.Contains(whys, p.why))
}

// serving: live, or idle and asked to retire (which serves as live).
func (p phase) serving() bool { return p.kind == phaseLive || p.is(phaseEnding, endRetire) }

// lettingGo: ending for good (not a retire the connection may refuse).
func (p phase) lettingGo() bool { return p.kind == phaseEnding && p.why != endRetire }

// legalPhases are the phases each phase may become.
var legalPhases = [...][]phaseKind{
	phaseOpening: {phaseLive, phaseStub, phaseFailed, phaseStopped},
	phaseLive:    {phaseEnding, phaseStopped},
	phaseStub:    {phaseLive, phaseFailed, phaseStopped},
	phaseFailed:  {phaseEnding, phaseStopped},
	phaseEnding:  {phaseEnding, phaseLive, phaseStub, phaseStopped},
	phaseStopped: nil,
}

// legal reports whether the session may go from phase from to to. An
// ending to retire may become live again (the connection refused) or any
// other ending; a hand-off or a pause may become a close (the close is
// answered, the askers too; a pausing turn is cancelled by the close); no
// other ending changes its reason. A pause may become the stub its
// clients of this pod follow the session through (session_pause_stub.go).
func legal(from, to phase) bool {
	if !slices.Contains(legalPhases[from.kind], to.kind) {
		return false
	}
	if to.kind == phaseEnding && to.why == endNone {
		return false
	}
	if from.kind != phaseEnding {
		return true
	}
	switch to.kind {
	case phaseLive:
		return from.why == endRetire
	case phaseStub:
		return from.why == endPause
	case phaseEnding:
		return from.why == endRetire || (from.why == endHandOff || from.why == endPause) && to.why == endClose
	}
	return true
}

// become moves the session to phase to, and reports whether it did: an
// illegal transition is logged as an error and refused. The askers of a
// hand-off and the pauser stay with an ending that changes its reason, and
// left with the session that stops after a hand-off.
func (s *session) become(to phase) bool {
	from := s.phase
	if !legal(from, to) {
		s.log.Error().Stringer("from", from).Stringer("to", to).Msg("illegal session phase transition refused")
		return false
	}
	if from.kind == phaseEnding {
		if to.kind == phaseEnding {
			to.askers = append(from.askers, to.askers...)
			if to.pauser == nil {
				to.pauser = from.pauser
			}
		}
		if to.left == nil {
			to.left = from.left
		}
	}
	s.phase = to
	return true
}

// stop makes the session stop (it stops after the message being served).
func (s *session) stop(ctx actor.Context) {
	s.become(phase{kind: phaseStopped})
	ctx.Stop(ctx.Self())
}

// Receive does the work of every phase around the phase's step.
func (s *session) Receive(ctx actor.Context) {
	defer s.crashing(ctx)
	s.inHand = requestInHand{}
	switch ctx.Message().(type) {
	case *idleTick, *releaseTick:
	default:
		s.lastActive = time.Now()
	}
	if a, ok := ctx.Message().(*attach); ok && ctx.Sender() != nil {
		// Taken: answered here, or, once stopped, given back when the
		// actor is gone (attachAgain).
		ctx.Send(ctx.Sender(), &attachTaken{id: s.id, reqID: a.reqID})
	}
	s.step(ctx, envelope{msg: ctx.Message(), sender: ctx.Sender()})
	if s.lease.fenced != nil {
		s.stopWriting(ctx)
	}
	s.releaseBetweenTurns()
}

// step serves one message in the session's phase (a message of the stash
// too, once its phase can serve it).
func (s *session) step(ctx actor.Context, e envelope) {
	switch e.msg.(type) {
	case *actor.Started:
		s.deps.Metrics.Sessions.Add(1)
		s.open(ctx)
		return
	case *actor.Stopped:
		if s.phase.kind == phaseStub {
			s.stepStub(ctx, e)
			s.become(phase{kind: phaseStopped})
			return
		}
		s.stopped(ctx)
		return
	}
	if s.stepMove(ctx, e) {
		return
	}
	if s.postpone(ctx, e) {
		return
	}
	switch s.phase.kind {
	case phaseOpening:
		s.stepOpening(ctx, e)
	case phaseLive:
		s.stepLive(ctx, e)
	case phaseStub:
		s.stepStub(ctx, e)
	case phaseFailed:
		s.stepFailed(ctx, e)
	case phaseEnding:
		s.stepEnding(ctx, e)
	case phaseStopped:
		s.stepStopped(ctx, e)
	}
}

// stepStopped: nothing more is served (the actor stops, or waits for its
// connections to hear it left), but every request is answered: as the
// connection answers one for a session that left ("moved", the client
// follows it), or not found (closed, deleted); Adopt, which waits, is
// told the session is ending, and a drain that it is idle.
func (s *session) stepStopped(ctx actor.Context, e envelope) {
	switch m := e.msg.(type) {
	case *adoptTurn:
		ctx.Send(m.reply, &adoptAnswer{err: fmt.Errorf("session %s is ending on this process", s.id)})
	case *sessionRequest:
		why := protocol.ErrSessionNotFound(s.id)
		if s.phase.is(phaseStopped, endHandOff, endPause) {
			why = errSessionMoved()
		}
		s.respondTo(ctx, m.conn, m.id, nil, why)
	case *drain:
		if m.from != nil {
			ctx.Send(m.from, &sessionIdle{sessionID: s.id, seq: m.seq})
		}
	case *attach:
		s.phase.reattach = append(s.phase.reattach, m)
		ctx.Send(m.conn, &attachHeld{id: s.id, reqID: m.reqID})
	case *leftHeard:
		s.heard(ctx, m.conn)
	case *detach:
		s.heard(ctx, m.conn) // a connection that went before it heard
	case *leftUnheard:
		if len(s.phase.hearing) > 0 {
			s.phase.hearing = nil
			ctx.Stop(ctx.Self())
		}
	}
}

// stepOpening: the store entry's Open came back; what else reaches an
// opening session (the cancels the stash lets through) is served as live.
func (s *session) stepOpening(ctx actor.Context, e envelope) {
	if m, ok := e.msg.(*opened); ok {
		s.openedStore(ctx, m)
		return
	}
	s.stepLive(ctx, e)
}

// stepFailed: requests and loads are answered with the error of the open;
// a hand-off has nothing to let go of; the rest (drains, detaches, the
// connection's retire) is served as live.
func (s *session) stepFailed(ctx actor.Context, e envelope) {
	switch m := e.msg.(type) {
	case *attach:
		s.respondTo(ctx, m.conn, m.reqID, nil, s.phase.failErr)
	case *adoptTurn:
		s.adoptFailed(ctx, m, s.phase.cause)
	case *handOff:
		if e.sender != nil {
			ctx.Send(e.sender, &handedOff{})
		}
	default:
		s.stepLive(ctx, e)
	}
}

// stepEnding: a hand-off asked of a session that ends anyway is answered
// once it let go (finishEnding); the rest is served as live (requests of
// the connections still attached, the turn's end).
func (s *session) stepEnding(ctx actor.Context, e envelope) {
	if _, ok := e.msg.(*handOff); ok && s.phase.lettingGo() {
		s.phase.askers = append(s.phase.askers, e.sender)
		return
	}
	s.stepLive(ctx, e)
}

// letGo ends the session for good (to is an ending): at once when no turn
// runs, else once the cancelled turn has ended (endTurn). A session ending
// already goes on as it was.
func (s *session) letGo(ctx actor.Context, to phase) {
	if s.phase.lettingGo() && !legal(s.phase, to) || !s.become(to) {
		return
	}
	if to.closeID != nil {
		// Kept: answered once the session stopped (finishEnding, or
		// stopped after a crash), not by crashing.
		s.inHand.settled(to.closeConn, to.closeID)
	}
	if s.phase.left == nil {
		// A handOff that reaches the actor once it is stopping is dropped
		// unanswered; Server.HandOff waits on left instead.
		s.phase.left = make(chan struct{})
		s.deps.leaving.Store(s.id, s.phase.left)
	}
	if s.turn.running() {
		s.cancelTurn(ctx)
		return
	}
	s.finishEnding(ctx)
}

// finishEnding is the end of an ending, its turn over (or paused): the
// lease is let go of (before anyone hears it: another process may take the
// session at once), the close and every hand-off asked meanwhile are
// answered, a hand-off's or a pause's clients are told the session left,
// the pause is answered, and the actor stops.
func (s *session) finishEnding(ctx actor.Context) {
	p := s.phase
	if !s.lease.acquiring() && s.store != nil {
		s.closeStore()
	}
	var told []*actor.PID
	switch p.why {
	case endClose:
		s.respondTo(ctx, p.closeConn, p.closeID, struct{}{}, nil)
		s.phase.closeID, s.phase.closeConn = nil, nil // answered: not again as the actor stops
	case endHandOff:
		s.cancelQueued(ctx, nil, nil)
		told = s.tellLeft(ctx)
		s.log.Info().Msg("session handed over to another pod")
	case endPause:
		told = s.tellLeft(ctx)
	}
	for _, a := range p.askers {
		if a != nil {
			ctx.Send(a, &handedOff{})
		}
	}
	if p.pauser != nil {
		ctx.Send(p.pauser, &pauseAnswer{paused: p.paused})
	}
	if len(told) == 0 {
		s.stop(ctx)
		return
	}
	s.become(phase{kind: phaseStopped, why: p.why, hearing: told})
	root, self := ctx.ActorSystem().Root, ctx.Self()
	time.AfterFunc(leftHearingWait, func() { root.Send(self, &leftUnheard{}) })
}

// leftHearingWait bounds the wait for the connections to hear the session
// left: each answers at once, unless it is gone (its detach answers then).
const leftHearingWait = 5 * time.Second

// tellLeft tells every attached connection that the session went to
// another process: its later requests for it are answered "moved". It
// returns those of this process, which say they heard it (leftHeard).
func (s *session) tellLeft(ctx actor.Context) []*actor.PID {
	var told []*actor.PID
	for _, c := range s.clients.list {
		ctx.Send(c.pid, &sessionLeft{id: s.id, pid: ctx.Self()})
		if c.pid.Address == ctx.Self().Address {
			told = append(told, c.pid)
		}
	}
	return told
}

// heard: conn heard the session left, or went; the actor stops once every
// connection told has.
func (s *session) heard(ctx actor.Context, conn *actor.PID) {
	i := slices.IndexFunc(s.phase.hearing, func(p *actor.PID) bool { return p.Equal(conn) })
	if i < 0 {
		return
	}
	s.phase.hearing = slices.Delete(s.phase.hearing, i, i+1)
	if len(s.phase.hearing) == 0 {
		ctx.Stop(ctx.Self())
	}
}
