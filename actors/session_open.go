package actors

import (
	"slices"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// open creates, loads or forks the session's store entry, then answers the
// request that started it. A load, resume or restore opens it off the
// actor (startOpen): the store may wait for another process, or another
// pod share or hand over the session.
func (s *session) open(ctx actor.Context) {
	if s.movedIn != nil {
		s.adoptMoved(ctx)
		return
	}
	var (
		entries []store.Entry
		err     error
	)
	switch s.start {
	case startNew:
		s.store, err = s.deps.Store.Create(store.Meta{ID: s.id, Cwd: s.startCwd, Mode: "default", Model: s.deps.llmConfig().Model,
			AdditionalDirectories: s.startDirs, Config: s.sessionDefaults(), Owner: s.owner})
	case startFork:
		s.store, entries, err = s.deps.Store.Fork(s.forkSrc, s.id)
	default:
		s.startOpen(ctx) // then openWith, or a stub of the session another pod holds
		return
	}
	s.openWith(ctx, entries, err)
}

// openWith goes on with the session's opening once the store answered. A
// turn left recorded in the session resumes (session_resume.go; its
// history is not repaired: its open calls are its next step), or, on the
// file store, is recorded interrupted (session_interrupted.go).
func (s *session) openWith(ctx actor.Context, entries []store.Entry, err error) {
	var prior *store.RunningTurn
	if err == nil {
		if prior = s.priorToResume(); prior == nil {
			entries, _, err = store.RepairSession(s.store, entries)
		}
	}
	if err != nil {
		failErr := s.storeError(err, "cannot open the session")
		s.become(phase{kind: phaseFailed, failErr: failErr, cause: err})
		if s.start != startRestore && s.start != startAdopt {
			s.audit(startMethod(s.start), "error").Int("code", failErr.Code).Msg("session not opened")
		}
		s.respondError(ctx, s.startReq, failErr)
		if s.adopter != nil {
			s.adoptFailed(ctx, nil, err)
		}
		if s.conn != nil {
			ctx.Send(s.conn, &retireRequest{id: s.id, pid: ctx.Self(), force: true})
		}
		return
	}
	s.entries = entries
	s.become(phase{kind: phaseLive})
	if s.start != startNew && s.start != startFork {
		s.startFollowLog(ctx)
	}
	s.adoptMeta()
	if prior == nil {
		s.recordInterrupted()
	}
	if s.startCwd != "" && s.startCwd != s.meta.Cwd && s.start != startNew {
		s.meta.Cwd = s.startCwd
		s.saveMeta()
	}
	if s.start != startNew && s.start != startRestore && s.start != startAdopt && !slices.Equal(s.startDirs, s.meta.AdditionalDirectories) {
		s.meta.AdditionalDirectories = s.startDirs
		s.saveMeta()
	}
	s.configureMCP(ctx, s.mcp.start, s.meta.Cwd)
	s.prefetchInstructions()
	s.warmModel()
	if prior != nil {
		s.resumeTurn(ctx, prior) // before the answer, which shows it running
	}
	// after the resume: a follower is owed the prompt of a turn resumed here
	if c := s.clients.find(s.conn); c != nil && c.follow != nil {
		s.claimFollow(c, c.follow)
	}
	s.answerWhenReady(ctx, s.start, s.startReq, s.conn)
	s.armIdle(ctx, s.deps.Config.SessionIdle)
	s.armRelease(ctx, s.deps.Config.SessionRelease)
	if s.adopter != nil {
		s.answerAdopter(ctx, nil)
		s.endUnattended(ctx)
	}
}

// warmModel lets the provider dial the model host as a client opens the
// session, so that its first prompt does not wait for the connection
// (llm/warm.go). A session restored or adopted without a client waits for
// none.
func (s *session) warmModel() {
	if s.start == startRestore || s.start == startAdopt {
		return
	}
	if w, ok := s.deps.Provider.(llm.Warmer); ok {
		w.Warm()
	}
}

// answerStart replays (load, fork) and answers the request that brought the
// session to connection conn; the replay is for conn only.
func (s *session) answerStart(ctx actor.Context, kind startKind, reqID protocol.RawMessage, conn *actor.PID) {
	if c := s.clients.find(conn); c != nil {
		s.who = c.who // the audit line names the connection answered
	}
	if kind != startRestore && kind != startAdopt {
		ev := s.audit(startMethod(kind), "ok").Str("cwd", s.meta.Cwd)
		if kind == startFork {
			ev = ev.Str("forked_from", s.forkSrc)
		}
		ev.Msg("session " + strings.TrimPrefix(startMethod(kind), "session/"))
	}
	switch kind {
	case startNew, startFork:
		if kind == startFork {
			s.replay(ctx, conn)
		}
		s.respondTo(ctx, conn, reqID, protocol.NewSessionResponse{
			SessionID:     s.id,
			Modes:         modeState(s.meta.Mode),
			Models:        s.modelState(),
			ConfigOptions: s.configOptions(),
			Meta:          s.mcpMeta(),
		}, nil)
	case startLoad, startResume:
		if kind == startLoad {
			s.replay(ctx, conn)
			s.replaySoFar(ctx, conn)
		}
		s.respondTo(ctx, conn, reqID, protocol.SessionStateResponse{
			Modes:         modeState(s.meta.Mode),
			Models:        s.modelState(),
			ConfigOptions: s.configOptions(),
			Meta:          s.followMeta(conn, s.withActiveTurn(s.mcpMeta())),
		}, nil)
		s.sendOwedAnswers(ctx, conn)
		s.noticeInterrupted(ctx, conn)
	default:
		return
	}
	if kind != startResume {
		s.mcp.commandsSent = s.availableCommands()
		s.emitTo(ctx, conn, protocol.AvailableCommandsUpdate{SessionUpdate: protocol.UpdateAvailableCommands, AvailableCommands: s.mcp.commandsSent})
	}
}
