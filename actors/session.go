package actors

import (
	"cmp"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/tools/sandbox"
)

// startKind says how a session actor comes to life.
type startKind int

const (
	startNew startKind = iota
	startLoad
	startResume
	startFork
	// startRestore brings back an evicted session without answering anything.
	startRestore
	// startAdopt opens a session with no client, to resume the turn left
	// recorded in it (Server.Adopt, session_resume.go).
	startAdopt
)

// The session actor lives in several files, one per concern, each with its
// messages: session_phase.go (its phase, the one transition function and
// the step of each phase: read it first, with docs/architecture.md),
// session_stash.go (messages waiting for a transition), session_inhand.go
// (the request served in the message at hand), session_quiet.go
// (its one definition of idle), session.go (lifecycle, the live step, the
// connection it serves),
// session_attach.go (the connections attached to it, updates to them),
// session_store.go (its store entry), session_lease.go (its store lease:
// released, fenced, handed off), session_acquire.go (its store handle
// opened or taken back off the actor), session_config.go (modes, models,
// config options), session_prompt.go (prompts), session_turn.go (the
// running turn and its end), session_queue.go (prompts waiting for the turn), session_active.go (the
// running turn as a newcomer sees it), session_commands.go (slash
// commands), session_replay.go (history as updates), session_mcp.go and
// session_mcp_prompts.go (MCP servers, their prompts), session_sandbox.go
// (its jail), session_remote.go (a stub of a session another pod holds),
// permission.go (the permission policy), session_permission.go (asking the
// clients).

// Messages of the session actor: its lifecycle and the connections it serves.
type (
	// sessionRequest is a session-scoped JSON-RPC request or notification
	// forwarded by a connection (id nil for notifications).
	sessionRequest struct {
		id     protocol.RawMessage
		method string
		params protocol.RawMessage
		conn   *actor.PID
		// traceparent is the W3C trace context of the request's HTTP
		// headers (see protocol.Message.Traceparent).
		traceparent string
	}
	// retireRequest asks the connection to forget a session (idle eviction,
	// failed start); seen counts the requests the session got from it, so
	// the connection only agrees when none is in flight.
	retireRequest struct {
		id    string
		pid   *actor.PID
		seen  int
		force bool
	}
	retireAnswer struct{ ok bool }
)

func (*retireAnswer) IgnoreDeadLetterLogging() {}
func (*idleTick) IgnoreDeadLetterLogging()     {}
func (*releaseTick) IgnoreDeadLetterLogging()  {}
func (*cancelTurns) IgnoreDeadLetterLogging()  {}

// idleTick is the session's idle timer firing (see armIdle); releaseTick
// its store-release timer (see armRelease).
type (
	idleTick    struct{}
	releaseTick struct{}
)

// session owns one conversation: its history (in memory and on disk), its
// settings and at most one running turn. It is the only writer of its store
// entry.
type session struct {
	deps *Deps
	id   string
	// phase: what the session is doing, changed by become only
	// (session_phase.go).
	phase phase
	// owner is the principal of the connection that opened the session:
	// the owner of a new one; load, resume and fork were checked against
	// the stored owner by that connection (connection.owns).
	owner string
	// who is the connection the session serves now (audit lines).
	who sessionWho
	// conn is the connection whose request the session serves now (the
	// last one that sent it a request or attached); respond answers there.
	conn *actor.PID
	// clients are the attached connections (session_attach.go).
	clients clients
	start   startKind
	// startReq is the JSON-RPC id answered once the session is up.
	startReq protocol.RawMessage
	// adopter is answered adoptAnswer once an adopted session (startAdopt)
	// is open, or could not be (session_resume.go).
	adopter  *actor.PID
	startCwd string
	// startDirs are the additionalDirectories of the request that started
	// the session (the complete list; none when omitted), except a restore,
	// which keeps the stored ones.
	startDirs []string
	// compactionUpdates: the client shows compaction updates (else text);
	// booleanOptions: boolean config options.
	compactionUpdates bool
	booleanOptions    bool
	forkSrc           string
	log               zerolog.Logger

	store store.Session
	meta  store.Meta
	// metaDirty: meta changed since it was last written. A change during
	// a turn (title, mode, remembered permission) is written at the turn's
	// end, with its usage: one metadata write per turn (see changeMeta).
	metaDirty bool
	entries   []store.Entry
	// turn: the turn slot (session_turn.go).
	turn turnSlot
	// drainers are the drains of closing connections waiting for the end
	// of the turn of their prompt (drainFor).
	drainers []*drain
	// queue: prompts waiting for the running turn (session_queue.go).
	queue promptQueue

	// lastActive is when the session last got a message other than a
	// timer tick; idleTimer sends the next idleTick.
	lastActive time.Time
	idleTimer  *time.Timer
	// lease: the store lease (session_lease.go), taken back off the actor
	// (session_acquire.go).
	lease storeLease
	// stash: the messages waiting for the store handle, or for any
	// transition (session_stash.go).
	stash []*envelope
	// inHand: the request served in the message at hand, answered by
	// crashing if still owed (session_inhand.go).
	inHand requestInHand

	// perm: the permission arbiter (session_permission.go).
	perm permissionArbiter

	// mcp: the session's MCP servers (session_mcp.go).
	mcp sessionMCP
	// stub: the stub of a session another pod holds (phase stub,
	// session_stub.go).
	stub *sessionStub
	// movedIn: a stub made for a connection moved here (connection_move.go).
	movedIn *adoptLeg
	// followers: what it sent its clients since this pod took it, for
	// clients following it here (session_followlog.go).
	followers followLog
	// jail contains what the session's tools start, for jailRoots
	// (session_sandbox.go); nil until first needed.
	jail      *sandbox.Jail
	jailRoots []string
}

func newSession(deps *Deps, id string, who sessionWho, conn *actor.PID, caps tools.ClientCaps, kind startKind, reqID protocol.RawMessage, cwd, forkSrc string,
	servers []protocol.McpServerConfig, notices bool) *session {
	s := &session{
		deps:     deps,
		id:       id,
		owner:    who.Principal,
		who:      who,
		conn:     conn,
		start:    kind,
		startReq: reqID,
		startCwd: cwd,
		forkSrc:  forkSrc,
		log:      deps.Log.With().Str("session", id).Logger(),
	}
	s.mcp.start, s.mcp.set = servers, &mcpToolSet{}
	if conn != nil {
		s.clients.add(client{pid: conn, who: who, caps: caps, notices: notices})
	}
	return s
}

// stepLive is the live session's step: what it serves (the steps of the
// other phases hand it what they serve as live).
func (s *session) stepLive(ctx actor.Context, e envelope) {
	switch m := e.msg.(type) {
	case *outbound:
		s.keepSoFar(m)
		s.broadcast(ctx, m)
	case *idleTick:
		idle := s.deps.Config.SessionIdle
		if left := idle - time.Since(s.lastActive); left > 0 {
			s.armIdle(ctx, left)
			return
		}
		// Checked again later if the session stays: busy with a turn, or the
		// connection refused the retire.
		s.armIdle(ctx, idle)
		// A session several connections share stays in memory until they
		// leave: each would have to agree (see retireRequest).
		if s.evictable() && s.become(phase{kind: phaseEnding, why: endRetire}) {
			c := s.clients.only()
			ctx.Send(c.pid, &retireRequest{id: s.id, pid: ctx.Self(), seen: c.seen})
		}
	case *releaseTick:
		s.releaseTicked(ctx)
	case *followWindowOver:
		s.endFollowLog(ctx, m)
	case *mcpAwaitOver:
		s.mcpAwaited(ctx, m)
	case *cancelTurns:
		if s.turn.of(m.conn) && cancelsID(m.requestID, s.turn.prompt.id) {
			s.cancelTurn(ctx)
		}
		if h := s.mcp.held; h != nil && m.conn.Equal(h.conn) &&
			cancelsID(m.requestID, h.id) {
			s.cancelHeldPrompt(ctx)
		}
		s.cancelQueued(ctx, m.conn, m.requestID)
		s.startQueued(ctx)
	case *retireAnswer:
		if m.ok {
			if s.phase.kind != phaseFailed {
				s.log.Debug().Msg("idle session evicted from memory")
			}
			s.stop(ctx)
			return
		}
		if s.phase.is(phaseEnding, endRetire) {
			s.become(phase{kind: phaseLive})
		}
	case *sessionRequest:
		s.serveRequest(ctx, m, e.counted)
	case *acquired:
		s.acquiredStore(ctx, m)
	case *deleteLive:
		s.endForDeleteElsewhere(ctx)
	case *handOff:
		s.handOffTo(ctx, e.sender)
	case *attach:
		s.attachFor(ctx, m)
	case *detach:
		if m.keepTurn {
			s.turn.disown(m.conn)
		}
		s.detachClient(ctx, m.conn, endLastDetach)
	case *messageDone:
		s.record(ctx, m.msg)
		s.messageRecorded(&m.msg)
	case *toolsStarting:
		s.recordToolStarts(ctx, m, e.sender)
	case *toolResultDone:
		s.append(store.ToolResultEntry(m.result))
		s.toolResultRecorded(m.result.ToolCallID)
		if s.lease.fenced == nil && e.sender != nil {
			ctx.Send(e.sender, &toolResultRecorded{})
		}
	case *compacted:
		s.compacted(m)
	case *turnFinished:
		s.endTurn(ctx, m)
	case *pauseRequest:
		s.pauseFor(ctx, m, e.sender)
	case *turnPaused:
		s.pausedTurn(ctx, m)
	case *adoptTurn:
		s.adoptFor(ctx, m)
	case *mcpStatus:
		s.onMCPStatus(ctx, m)
	case *mcpBudget:
		s.onMCPBudget(ctx, m)
	case *mcpPromptGot:
		s.onMCPPromptGot(ctx, m)
	case *childCrashed:
		if m.child.Equal(s.mcp.pid) {
			s.onMCPCrash(ctx, m)
			return
		}
		if s.turn.running() && m.child.Equal(s.turn.pid) {
			errorID := newErrorID()
			s.log.Error().Str("error_id", errorID).Interface("panic", m.reason.value).
				Bytes("stack", m.reason.stack).Msg("turn crashed")
			s.endTurn(ctx, &turnFinished{err: protocol.ErrInternal(fmt.Sprint(m.reason.value), errorID)})
		}
	case *permissionAsk:
		s.decidePermission(ctx, m)
	case *outboundRequest:
		s.forwardRequest(ctx, m)
	case *clientAnswer:
		s.permissionAnswered(ctx, m)
	case *drain:
		s.drainFor(ctx, m)
	case *actor.Terminated:
		s.previewGone(ctx, m.Who) // only tools' actors are watched
	}
}

// serveRequest serves a request of a connection; counted: it was counted
// in the connection's seen before (it waited for the store handle).
func (s *session) serveRequest(ctx actor.Context, m *sessionRequest, counted bool) {
	s.inHand.take(m, cmp.Or(m.conn, s.conn)) // the connection respondTo answers
	c := s.clients.find(m.conn)
	if m.conn != nil && c == nil {
		s.respondTo(ctx, m.conn, m.id, nil, errSessionMoved())
		ctx.Send(m.conn, &sessionMoved{id: s.id, pid: ctx.Self()})
		return
	}
	if c != nil {
		if !counted {
			c.seen++
		}
		s.conn, s.who = m.conn, c.who
	}
	if s.phase.kind == phaseFailed {
		// e.g. a prompt that brought an evicted session back
		s.respondError(ctx, m.id, s.phase.failErr)
		return
	}
	s.handle(ctx, m)
}

// attachFor attaches a connection that loads or resumes the session.
func (s *session) attachFor(ctx actor.Context, m *attach) {
	if !s.acquire(ctx, m, m.conn, m.reqID, true) {
		return
	}
	s.attach(ctx, m)
}

func (s *session) handle(ctx actor.Context, r *sessionRequest) {
	switch r.method {
	case protocol.MethodSessionCancel, protocol.MethodSessionClose:
		// they write nothing: a released handle stays released
	default:
		if !s.acquire(ctx, r, r.conn, r.id, false) {
			s.inHand.handedOff(r) // to the stash
			return
		}
	}
	switch r.method {
	case protocol.MethodSessionPrompt:
		s.prompt(ctx, r)
	case protocol.MethodSessionCancel:
		if s.turn.running() {
			s.cancelTurn(ctx)
		}
		s.cancelHeldPrompt(ctx)
		s.cancelQueued(ctx, nil, nil)
		s.respond(ctx, r.id, struct{}{})
	case protocol.MethodSessionClose, protocol.MethodSessionDelete:
		if r.method == protocol.MethodSessionDelete {
			s.endForDelete(ctx, r.conn)
		} else {
			s.audit(r.method, "ok").Msg("session close")
		}
		if s.closeShared(ctx, r) {
			return
		}
		s.cancelHeldPrompt(ctx)
		s.cancelQueued(ctx, nil, nil)
		s.answerPendingStarts(ctx)
		s.letGo(ctx, phase{kind: phaseEnding, why: endClose, closeID: r.id, closeConn: r.conn})
	case protocol.MethodSessionSetMode:
		var p protocol.SetModeRequest
		if err := protocol.Unmarshal(r.params, &p); err != nil || !validMode(p.ModeID) {
			s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"modeId": "unknown mode"}))
			return
		}
		s.setMode(ctx, r.id, p.ModeID)
	case protocol.MethodSessionSetConfig:
		s.setConfig(ctx, r)
	case protocol.MethodSessionSetModel:
		s.setModel(ctx, r)
	}
}

// armIdle sends the session an idleTick after d (no-op when eviction is
// off). It is our own timer rather than protoactor's ReceiveTimeout, whose
// timer goroutine races with the actor (reported by -race) and which stays
// disarmed after firing once.
func (s *session) armIdle(ctx actor.Context, d time.Duration) {
	if s.deps.Config.SessionIdle <= 0 {
		return
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	s.idleTimer = time.AfterFunc(d, func() { root.Send(self, &idleTick{}) })
}

func (s *session) respond(ctx actor.Context, id protocol.RawMessage, result any) {
	s.respondTo(ctx, s.conn, id, result, nil)
}

func (s *session) respondError(ctx actor.Context, id protocol.RawMessage, e *protocol.Error) {
	s.respondTo(ctx, s.conn, id, nil, e)
}

func (s *session) respondTo(ctx actor.Context, conn *actor.PID, id protocol.RawMessage, result any, e *protocol.Error) {
	if id == nil {
		return
	}
	if conn == nil {
		if conn = s.conn; conn == nil {
			return // a session with no client (Server.Adopt)
		}
	}
	s.inHand.settled(conn, id)
	ctx.Send(conn, &outbound{frame: Frame{Data: answerData(id, result, e), SessionID: s.id}})
}

// answerData is the JSON-RPC answer to id: result, or e when not nil.
func answerData(id protocol.RawMessage, result any, e *protocol.Error) []byte {
	if e != nil {
		return protocol.EncodeError(id, e)
	}
	return protocol.EncodeResult(id, result)
}

// crashing answers, when the message being served panicked, the prompt
// of the session's turn and the request in hand -32603 (with one error
// id), each once: the session's guardian (stopOnCrash) stops the actor,
// whose mailbox, the turn's end with it, is never served, and closing the
// store clears the turn's record, so nothing resumes it. The prompt is
// owed from the slot's claim to its end (endTurn, pausedTurn): a panic in
// endTurn before its answer is a crash mid-turn too. A resumed turn whose
// prompt's connection is not here is answered by no one here (endTurn
// keeps its answer for a follower). The request in hand is owed unless it
// was answered or handed to what answers it as the actor stops (the
// stash, the queue, the held prompt, the phase's close; see
// requestInHand). The panic goes on to the guardian, which logs it with
// its stack.
func (s *session) crashing(ctx actor.Context) {
	r := recover()
	if r == nil {
		return
	}
	p := recovered(r)
	errorID := newErrorID()
	answer := protocol.ErrInternal(fmt.Sprint(p.value), errorID)
	if prompt := s.turn.end(); prompt.id != nil && prompt.conn != nil {
		s.log.Error().Str("error_id", errorID).Interface("panic", p.value).Msg("session crashed; its turn's prompt answered")
		s.respondTo(ctx, prompt.conn, prompt.id, nil, answer)
	}
	if conn, id := s.inHand.owedTo(); id != nil {
		s.log.Error().Str("error_id", errorID).Interface("panic", p.value).Msg("session crashed; the request it served answered")
		s.respondTo(ctx, conn, id, nil, answer)
	}
	panic(p)
}

// stopped is the actor's end, whatever its phase: what it holds is let go
// of (timers, turn slot, store handle, jail) and what waits is answered.
func (s *session) stopped(ctx actor.Context) {
	s.deps.Metrics.Sessions.Add(-1)
	ending := s.phase
	if s.phase.kind != phaseStopped {
		s.become(phase{kind: phaseStopped})
	}
	s.release(ctx)
	// A close the ending kept is answered, its store entry let go of: the
	// session crashed before finishEnding answered it.
	if ending.closeID != nil {
		s.respondTo(ctx, ending.closeConn, ending.closeID, struct{}{}, nil)
	}
	// What the stash still holds (its prompts were answered cancelled) is
	// answered too: a session stopped while it took its handle back.
	for _, e := range s.stash {
		s.stepStopped(ctx, *e)
	}
	s.stash = nil
	// Gone from the registry now: an attach it took and could not serve
	// goes back to its connection, which opens the session anew.
	for _, a := range s.phase.reattach {
		ctx.Send(a.conn, &attachAgain{id: s.id, attach: a})
	}
}

// release lets go of what the session holds (timers, turn slot, store
// handle, jail) and answers what waits: as it stops, or as it becomes the
// stub its clients follow it through (session_pause_stub.go).
func (s *session) release(ctx actor.Context) {
	s.releaseTurnCount()
	s.forgetTurn()
	s.answerAdopter(ctx, fmt.Errorf("session %s stopped before it was open", s.id))
	if left := s.phase.left; left != nil {
		s.deps.leaving.CompareAndDelete(s.id, left)
		close(left)
	}
	if s.idleTimer != nil {
		s.idleTimer.Stop()
	}
	s.lease.stopTimer()
	if !s.abandonAcquire() && s.store != nil {
		s.closeStore()
	}
	s.store = nil
	s.lease.unfence()
	s.cancelStashed(ctx, nil, nil)
	// A close, a detach or a pause answered them already; a crash did not.
	s.cancelHeldPrompt(ctx)
	s.cancelQueued(ctx, nil, nil)
	s.closeSandbox()
}
