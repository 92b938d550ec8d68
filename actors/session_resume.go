package actors

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
)

// Resuming a turn another process left recorded (durable turns, issue 29):
// it paused it (Server.PauseTurns), died, or lost its lease mid-turn. The
// session that takes the lease next finds the turn with
// store.TurnKeeper.PriorTurn and goes on with it from the history
// (store.NextStep, turn_resume.go): a session opened by Server.Adopt with
// no client, and, on a shared store, any session opened or taken back (a
// client's load on any pod). On the file store (one process, nothing to
// resume it) a client's load records the turn interrupted instead
// (session_interrupted.go); Adopt resumes it there too.
//
// The resumed turn keeps the mark (its turn id, prompt connection, first
// seq); its end clears it as any turn's. Its prompt is answered to the
// connection that sent it when that connection is on this process, which
// serves no other pod's clients (promptConnHere). In cluster mode the
// answer is owed only to a claim: a leg of this pod's stub still waiting
// for it (its take, settleOwed) or a client following the session here
// (claimFollow); otherwise its end is recorded, and its answer kept for
// such a claim. A permission it needs is asked of every attached client —
// none at first: the request waits for a client to attach, which is asked
// then (attachClient). No attached client leaving cancels it, as it is
// none of theirs; with no client left at its end the session ends
// (ending(unattended)).

type (
	// adoptTurn asks the session to hold its lease (Server.Adopt), taking
	// it back if released: answered adoptAnswer once it does (a turn left
	// recorded resumed), or with why not; servers are the MCP servers
	// handed over with the session (AdoptHanded).
	adoptTurn struct {
		reply   *actor.PID
		servers []protocol.McpServerConfig
	}
	adoptAnswer struct{ err error }
)

func (*adoptTurn) IgnoreDeadLetterLogging()   {}
func (*adoptAnswer) IgnoreDeadLetterLogging() {}

// adoptWait bounds Adopt: an Open or Acquire, a database round trip or a
// lock's wait.
const adoptWait = 30 * time.Second

// Adopt opens session sessionID here with no client, taking its lease (an
// error that is an *store.InUseError, errors.Is store.ErrInUse, while a
// live holder has it), and resumes the turn left recorded in it, if any
// (see above). A session with no such turn is let go of again at once.
func (s *Server) Adopt(sessionID string) error { return s.AdoptHanded(sessionID, nil) }

// AdoptHanded is Adopt of a session handed over by the pod that paused it,
// with its MCP servers' configuration as PauseTurns gave it (nil: none):
// they are the session's servers here unless it has its own, started
// before the resumed turn's next step (session_adopt_mcp.go).
func (s *Server) AdoptHanded(sessionID string, mcpServers []byte) error {
	if s.deps.Store == nil {
		return errors.New("no session store")
	}
	// The session spawned here answers f once open, whenever that is: a
	// message sent after the spawn could find it gone already (its turn
	// resumed and ended, unattended, meanwhile).
	f := actor.NewFuture(s.sys, adoptWait)
	name := sessionActorName(sessionID)
	servers := parcelServers(mcpServers)
	props := actor.PropsFromProducer(func() actor.Actor {
		ss := newSession(s.deps, sessionID, sessionWho{}, nil, tools.ClientCaps{}, startAdopt, nil, "", "", servers, false)
		ss.adopter = f.PID()
		return ss
	}, actor.WithSupervisor(reportAndStop{}), actor.WithGuardian(s.deps.sessionGuardian),
		actor.WithReceiverMiddleware(keepStack))
	_, err := s.sys.Root.SpawnNamed(props, name)
	if left, ok := s.deps.leaving.Load(sessionID); ok && errors.Is(err, actor.ErrNameExists) {
		// Its actor here is stopping (it paused, closed, ...): once it
		// has, the session is opened anew.
		select {
		case <-left.(chan struct{}):
		case <-time.After(adoptWait):
		}
		_, err = s.sys.Root.SpawnNamed(props, name)
	}
	if errors.Is(err, actor.ErrNameExists) {
		// A session open here already holds or takes back its lease.
		s.sys.Root.RequestWithCustomSender(actor.NewPID(s.sys.Address(), name), &adoptTurn{reply: f.PID(), servers: servers}, f.PID())
	} else if err != nil {
		return err
	}
	res, err := f.Result()
	if err != nil {
		return fmt.Errorf("adopt session %s: %w", sessionID, err)
	}
	a, ok := res.(*adoptAnswer)
	if !ok {
		return fmt.Errorf("adopt session %s: unexpected answer %T", sessionID, res)
	}
	return a.err
}

// adoptFor serves adoptTurn: the lease is held (taken back first when
// released); a session with no client and no turn then ends.
func (s *session) adoptFor(ctx actor.Context, m *adoptTurn) {
	switch {
	case s.phase.kind == phaseFailed:
		s.adoptFailed(ctx, m, s.phase.cause)
		return
	case !s.phase.serving():
		ctx.Send(m.reply, &adoptAnswer{err: fmt.Errorf("session %s is ending on this process", s.id)})
		return
	}
	s.handedServers(ctx, m.servers)
	if !s.acquire(ctx, m, nil, nil, false) {
		return // stepped again with the handle back, or answered its error (adoptFailed)
	}
	ctx.Send(m.reply, &adoptAnswer{})
	s.endUnattended(ctx)
}

// adoptFailed answers m (or the adopter, for nil) with the store's error
// of the Open or Acquire; a session with no client then stops.
func (s *session) adoptFailed(ctx actor.Context, m *adoptTurn, err error) {
	if m != nil {
		ctx.Send(m.reply, &adoptAnswer{err: err})
	} else {
		s.answerAdopter(ctx, err)
	}
	if s.clients.len() == 0 && !s.turn.running() {
		s.stop(ctx)
	}
}

// answerAdopter answers Server.Adopt of a session it spawned (startAdopt),
// once: it is open (its turn resumed), or it could not be.
func (s *session) answerAdopter(ctx actor.Context, err error) {
	if s.adopter != nil {
		ctx.Send(s.adopter, &adoptAnswer{err: err})
		s.adopter = nil
	}
}

// endUnattended ends a session that has no client and is idle (adopted,
// its turn over, or none left): nobody is there to use it. One keeping the
// answer of its resumed turn for the client following it here waits for
// that client, or the end of the follow window (session_followlog.go).
func (s *session) endUnattended(ctx actor.Context) {
	if s.clients.len() == 0 && s.quiet() && !s.followers.owesAnswers() {
		s.letGo(ctx, phase{kind: phaseEnding, why: endUnattended})
	}
}

// priorToResume is the turn left recorded in the session that this
// session resumes, nil when none: on the file store only an adopted
// session resumes it (a load records it interrupted).
func (s *session) priorToResume() *store.RunningTurn {
	keeper, ok := s.store.(store.TurnKeeper)
	if !ok || s.lease.fenced != nil {
		return nil
	}
	prior := keeper.PriorTurn()
	if _, local := s.store.(store.TurnMarker); local && s.start != startAdopt {
		return nil
	}
	return prior
}

// resumeTurn goes on with the turn prior, left recorded in the session:
// its next step is read from the history (the session's entries, not
// repaired), its mark recorded again under this lease.
func (s *session) resumeTurn(ctx actor.Context, prior *store.RunningTurn) {
	if s.owner == "" {
		s.owner = s.meta.Owner
	}
	first := prior.FirstSeq
	if first <= 0 {
		first = lastPromptSeq(s.entries)
	}
	step := store.NextStep(s.entries, first)
	promptConn := s.promptConnHere(prior.Conn)
	turnID := s.turn.claim(turnPrompt{id: protocol.RawMessage(prior.PromptRequest), conn: promptConn, client: recordedClient(prior.Conn)})
	s.deps.turns.acquire(s.owner, 0) // taken on elsewhere: not refused for a limit here
	s.countTurn()
	started := prior.StartedAt.UTC()
	s.turn.soFar = turnSoFar{active: &ActiveTurn{State: turnRunningState, StartedAt: started.Format(time.RFC3339Nano), PromptRequest: prior.PromptRequest,
		started: started, conn: prior.Conn, firstSeq: first, id: prior.ID}}
	s.deps.active.m.Store(s.id, s.turn.soFar.active)
	s.deps.Metrics.TurnsResumed.Add(1)
	next := "ask the model"
	switch {
	case step.Done:
		next = "record its end"
	case step.Call != nil:
		next = fmt.Sprintf("go on with %d recorded results, %d cut calls", len(step.Results), len(step.Started))
		s.messageRecorded(step.Call) // its calls are replayed from the history
	}
	s.log.Info().Str("turn", prior.ID).Int64("first_seq", first).Bool("answered_here", promptConn != nil).
		Str("next", next).Msg("turn resumed: another process left it recorded")
	if step.Done {
		// Its last reply is recorded: only its end is left.
		s.turn.run(nil)
		s.endTurn(ctx, &turnFinished{stopReason: protocol.StopEndTurn})
		return
	}
	opts := s.turnOptions(turnID)
	opts.resume = &step
	opts.mcpHold = s.holdResume(ctx, prior)
	s.spawnTurn(ctx, opts)
	s.resumed(s.turn.pid)
	s.markTurn(true)
}

// promptConnHere is the connection of this process that a resumed turn,
// whose prompt came from the connection named conn, answers directly: that
// connection when it is here and this process serves no other pod's
// clients (no Handover: no stub). In cluster mode a connection of this pod
// is owed a resumed turn's answer only where a leg of a stub here still
// waits for it — the stub taking the session (settleOwed) or following it
// (claimFollow, the answer kept for it: nil). The store's record names
// whose prompt it is, not a debt of its own: a stub that ended (holder
// gone, answerUnanswered) answered the prompt already, cancelled, and its
// connection loading the session again, or this pod adopting it, must not
// answer it a second time; a stub made beside the session for a moved-in
// connection is answered through its follow, after the turn's updates it
// passes on.
func (s *session) promptConnHere(conn string) *actor.PID {
	if s.deps.Handover != nil {
		return nil
	}
	c, _ := s.deps.conns.Load(conn)
	pid, _ := c.(*actor.PID)
	return pid
}

// lastPromptSeq is the seq of the history's last user message (a turn
// recorded without its first seq starts there).
func lastPromptSeq(entries []store.Entry) int64 {
	for i := len(entries) - 1; i >= 0; i-- {
		if e := &entries[i]; e.Kind == store.KindMessage && e.Message.Role == llm.RoleUser {
			return e.Seq
		}
	}
	return 0
}

// connections are this process's connection actors by connection id: a
// resumed turn's prompt is answered to its connection when it is here
// (promptConnHere).
type connections struct{ sync.Map }
