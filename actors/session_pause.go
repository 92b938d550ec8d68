package actors

import (
	"context"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// Pausing the running turns of a process that drains (durable turns, issue
// 29): each session's turn pauses at its next step boundary (turn_pause.go),
// then the session lets go of its lease keeping the turn recorded
// (store.TurnKeeper.Pause) and stops, without answering the prompt or
// telling its clients the turn was cancelled: another process adopts the
// session and resumes the turn from its history (Server.Adopt,
// session_resume.go). Its clients follow it there: those of other pods
// through their stubs (session_follow.go), those of this pod through the
// stub the session becomes (session_pause_stub.go).

type (
	// pauseRequest asks the session to pause its running turn (ending
	// pause); cut: the deadline passed, the turn still mid-step stops now.
	// Answered pauseAnswer once the session let go (or at once when no turn
	// runs); a cut is not answered (the pause it cuts is).
	pauseRequest struct{ cut bool }
	pauseAnswer  struct{ paused bool }
)

func (*pauseRequest) IgnoreDeadLetterLogging() {}
func (*pauseAnswer) IgnoreDeadLetterLogging()  {}

// pauseCutGrace bounds how long PauseTurns waits for the turns it cut at
// its deadline: their tools stop (toolStopGrace) and the lease is let go.
const pauseCutGrace = toolStopGrace + 5*time.Second

// PauseTurns pauses every running turn of this process at its next step
// boundary, concurrently, each session letting go of its lease keeping its
// turn recorded (see Adopt); when ctx is done first, the turns still
// mid-step are cut there and paused. It returns the ids of the sessions
// paused, and tells each to paused (when not nil) as soon as it is, so
// that it can be handed over without waiting for the slowest turn, with
// its MCP servers' configuration (mcpServers, nil when none: for
// AdoptHanded, in memory only: it holds the client's secrets). A turn
// that ends meanwhile (its last answer, a cancel, an error) ends as usual
// and is not listed. Sub-agents' turns are steps of their parent's: its
// agent tool call runs to its end, or is cut with it. The prompt is
// answered by the process that resumes the turn, to the connection that
// sent it, wherever that connection follows the session from (a stub's
// leg: session_follow.go, session_pause_stub.go).
func (s *Server) PauseTurns(ctx context.Context, paused func(sessionID string, mcpServers []byte)) []string {
	s.deps.shares.draining.Store(true)
	var running []string
	s.deps.active.m.Range(func(k, _ any) bool {
		running = append(running, k.(string))
		return true
	})
	if len(running) == 0 {
		return nil
	}
	wait := time.Hour
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl) + pauseCutGrace
	}
	type answer struct {
		id     string
		paused bool
	}
	answers := make(chan answer, len(running))
	var wg sync.WaitGroup
	for _, id := range running {
		f := s.sys.Root.RequestFuture(actor.NewPID(s.sys.Address(), sessionActorName(id)), &pauseRequest{}, wait)
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := f.Result()
			a, _ := res.(*pauseAnswer)
			answers <- answer{id: id, paused: err == nil && a != nil && a.paused}
		}()
	}
	go func() {
		wg.Wait()
		close(answers)
	}()
	var ids []string
	cut := ctx.Done()
	for {
		select {
		case a, ok := <-answers:
			if !ok {
				return ids
			}
			parcel := s.deps.parcels.take(a.id)
			if a.paused {
				ids = append(ids, a.id)
				if paused != nil {
					paused(a.id, parcel)
				}
			}
		case <-cut:
			cut = nil
			for _, id := range running {
				s.sys.Root.Send(actor.NewPID(s.sys.Address(), sessionActorName(id)), &pauseRequest{cut: true})
			}
		}
	}
}

// pauseFor serves a pauseRequest of from: the running turn is asked to
// pause (the session ends, to pause); a cut makes the pausing turn stop
// now. Anything else has nothing to pause: answered at once.
func (s *session) pauseFor(ctx actor.Context, m *pauseRequest, from *actor.PID) {
	if m.cut {
		if s.turn.pausing() {
			ctx.Send(s.turn.pid, &pauseTurn{cut: true})
		}
		return
	}
	if !s.turn.running() || s.turn.cancelling() || s.turn.pausing() || s.lease.fenced != nil ||
		!s.become(phase{kind: phaseEnding, why: endPause, pauser: from}) {
		if from != nil {
			ctx.Send(from, &pauseAnswer{})
		}
		return
	}
	if s.phase.left == nil {
		s.phase.left = make(chan struct{})
		s.deps.leaving.Store(s.id, s.phase.left)
	}
	s.cancelHeldPrompt(ctx)
	s.cancelQueued(ctx, nil, nil)
	s.answerPendingStarts(ctx)
	s.turn.state = turnPausing
	ctx.Send(s.turn.pid, &pauseTurn{})
}

// pausedTurn: the turn paused at a step boundary (or was cut). Its prompt
// is not answered and its mark stays recorded: the session lets go of its
// lease keeping it (store.TurnKeeper.Pause), and ends, or stays as the
// stub its clients of this pod follow the session through
// (session_pause_stub.go).
func (s *session) pausedTurn(ctx actor.Context, m *turnPaused) {
	if !s.turn.running() {
		return
	}
	if !s.phase.is(phaseEnding, endPause) {
		// A close during the pause won (its cancel crossed the pause): the
		// turn ends here, cancelled.
		s.endTurn(ctx, &turnFinished{stopReason: protocol.StopCancelled, usage: m.usage})
		return
	}
	prompt := s.turn.end()
	s.releaseTurnCount()
	s.withdrawAsked(ctx) // asked again by the next holder
	s.dropPermissionAsks(ctx)
	s.syncStore()
	s.meta.Usage = s.meta.Usage.Add(m.usage)
	s.saveMeta()
	s.forgetTurn()
	s.turn.soFar = turnSoFar{}
	s.answerDrainers(ctx)
	s.pauseLease()
	if s.phase.paused {
		s.leaveMCPParcel() // handed over with the session (PauseTurns)
	}
	if s.stayForClients(ctx, prompt) {
		return
	}
	s.finishEnding(ctx)
}

// pauseLease lets go of the lease keeping the turn recorded: the session
// is paused (phase.paused) once it did.
func (s *session) pauseLease() {
	keeper, ok := s.store.(store.TurnKeeper)
	if !ok || s.lease.fenced != nil || s.lease.acquiring() || !s.lease.writable() {
		return
	}
	s.flushMeta()
	if err := keeper.Pause(); err != nil {
		s.log.Error().Err(err).Msg("pause the session's turn")
		return
	}
	s.lease.letGo()
	s.phase.paused = true
	s.deps.Metrics.TurnsPaused.Add(1)
	s.log.Info().Msg("turn paused: the session let go of its lease keeping the turn, for another process to resume it")
}
