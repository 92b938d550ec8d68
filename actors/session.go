package actors

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
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
)

// Messages of the session actor.
type (
	// sessionRequest is a session-scoped JSON-RPC request or notification
	// forwarded by a connection (id nil for notifications).
	sessionRequest struct {
		id     protocol.RawMessage
		method string
		params protocol.RawMessage
		conn   *actor.PID
	}
	// attach moves a live session to another connection (load/resume there).
	attach struct {
		kind  startKind
		reqID protocol.RawMessage
		cwd   string
		conn  *actor.PID
		// servers are the MCP servers of the request; notices: the
		// connection's client shows notices.
		servers []protocol.McpServerConfig
		notices bool
		caps    tools.ClientCaps
	}
	// detach: the connection is going away; its sessions stop (they are on disk).
	detach struct{ conn *actor.PID }
	// messageDone records one completed conversation message of a turn.
	messageDone struct{ msg llm.Message }
	// compacted replaces all but the last keep context messages by a summary.
	compacted struct {
		summary string
		keep    int
	}
	// turnFinished ends the running turn: either a stop reason or an error.
	turnFinished struct {
		stopReason string
		usage      llm.Usage
		err        *protocol.Error
	}
	// permissionAsk asks the session whether a tool call may run. The
	// session decides from its mode and remembered decisions, or asks the
	// client (one request at a time).
	permissionAsk struct {
		toolName string
		// key is what an *_always answer remembers: the tool name, or
		// "<tool>:<host>" for network access.
		key      string
		kind     tools.Kind
		readOnly bool
		// local: every path inside the cwd (or a spilled output read back)
		// and no host; editsInside: the call writes, only inside the cwd.
		local       bool
		editsInside bool
		host        string
		toolCall    protocol.ToolCallUpdate
		replyTo     *actor.PID
	}
	// permissionDecision answers a permissionAsk. caps are the capabilities
	// of the client that owns the session now, for a call that may run
	// through it.
	permissionDecision struct {
		allow bool
		caps  tools.ClientCaps
		// cancelled: the client cancelled the request; the turn ends cancelled.
		cancelled bool
		// reason is the tool error the model gets when not allowed.
		reason string
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
	// sessionMoved tells a connection that the session it addressed now
	// belongs to another connection (see connection.stopping).
	sessionMoved struct {
		id  string
		pid *actor.PID
	}
	// handOff asks the session to let go of its store lease for another
	// process (Server.HandOff); answered with handedOff once it did.
	handOff   struct{}
	handedOff struct{}
	// sessionLeft tells the session's connection that it went to another
	// process.
	sessionLeft struct {
		id  string
		pid *actor.PID
	}
)

func (*messageDone) IgnoreDeadLetterLogging()        {}
func (*permissionDecision) IgnoreDeadLetterLogging() {}
func (*retireAnswer) IgnoreDeadLetterLogging()       {}
func (*sessionMoved) IgnoreDeadLetterLogging()       {}
func (*idleTick) IgnoreDeadLetterLogging()           {}
func (*releaseTick) IgnoreDeadLetterLogging()        {}
func (*cancelTurns) IgnoreDeadLetterLogging()        {}
func (*sessionLeft) IgnoreDeadLetterLogging()        {}

// errSessionMoved answers a request for a session that another connection
// (or another process) took over.
func errSessionMoved() *protocol.Error {
	return protocol.ErrInvalidParams(map[string]string{"session_id": "Session moved to another connection"})
}

// idleTick is the session's idle timer firing (see armIdle); releaseTick
// its store-release timer (see armRelease).
type (
	idleTick    struct{}
	releaseTick struct{}
)

// Session modes: how much a session may do without asking.
var sessionModes = []protocol.SessionMode{
	{ID: "default", Name: "Default", Description: "Ask before writing files or running commands"},
	{ID: "accept_edits", Name: "Accept edits", Description: "Write files without asking; ask before running commands"},
	{ID: "plan", Name: "Plan", Description: "Read-only tools only"},
	{ID: "bypass", Name: "Bypass permissions", Description: "Never ask"},
}

var slashCommands = []protocol.AvailableCommand{
	{Name: "compact", Description: "Summarize the conversation so far to free context"},
	{Name: "clear", Description: "Start over with an empty context (history stays on disk)"},
}

// session owns one conversation: its history (in memory and on disk), its
// settings and at most one running turn. It is the only writer of its store
// entry.
type session struct {
	deps *Deps
	id   string
	conn *actor.PID
	// caps are the capabilities of conn's client (set with conn).
	caps  tools.ClientCaps
	start startKind
	// startReq is the JSON-RPC id answered once the session is up.
	startReq protocol.RawMessage
	startCwd string
	forkSrc  string
	log      zerolog.Logger

	store store.Session
	meta  store.Meta
	// metaDirty: meta changed since it was last written. A change during
	// a turn (title, mode, remembered permission) is written at the turn's
	// end, with its usage: one metadata write per turn (see changeMeta).
	metaDirty bool
	entries   []store.Entry
	failed    bool
	failErr   *protocol.Error // the answer to requests of a failed session
	// fenced: a write found the session taken over by another process
	// (shared store, ErrFenced); the answer to what needed that write. The
	// session writes nothing more until stopWriting has let go of it.
	fenced *protocol.Error
	seen   int

	turn *actor.PID
	// turnID numbers the turns; a tool's request to the client is sent only
	// while its turn runs.
	turnID   int64
	promptID protocol.RawMessage
	// promptConn and closeConn asked promptID and closeID: their answers
	// go there even when the session moved to another connection meanwhile.
	promptConn *actor.PID
	closeConn  *actor.PID
	turnUsage  llm.Usage
	// closeID is the pending session/close answered once the turn ends.
	closeID  protocol.RawMessage
	closing  bool
	draining bool
	retiring bool

	// lastActive is when the session last got a message other than a
	// timer tick; idleTimer sends the next idleTick.
	lastActive time.Time
	idleTimer  *time.Timer
	// released: the store handle let go of its descriptors and lock after
	// SessionRelease without activity; acquire takes them back.
	released     bool
	releaseTimer *time.Timer
	releaseArmed bool

	// handingOff are the askers of a handOff, answered once the session
	// let go of its lease (after its running turn ended).
	handingOff []*actor.PID
	// left is closed once the session, handed off, stopped.
	left chan struct{}

	// Permission requests are asked one at a time.
	permQueue  []*permissionAsk
	permActive *permissionAsk

	// mcp: the session's MCP servers (session_mcp.go).
	mcp sessionMCP
}

func newSession(deps *Deps, id string, conn *actor.PID, caps tools.ClientCaps, kind startKind, reqID protocol.RawMessage, cwd, forkSrc string,
	servers []protocol.McpServerConfig, notices bool) *session {
	s := &session{
		deps:     deps,
		id:       id,
		conn:     conn,
		caps:     caps,
		start:    kind,
		startReq: reqID,
		startCwd: cwd,
		forkSrc:  forkSrc,
		log:      deps.Log.With().Str("session", id).Logger(),
	}
	s.mcp.start, s.mcp.notices, s.mcp.set = servers, notices, &mcpToolSet{}
	return s
}

func (s *session) Receive(ctx actor.Context) {
	s.receive(ctx)
	if s.fenced != nil {
		s.stopWriting(ctx)
	}
}

func (s *session) receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *idleTick, *releaseTick:
	default:
		s.lastActive = time.Now()
	}
	switch m := ctx.Message().(type) {
	case *outbound:
		ctx.Send(s.conn, m)
	case *actor.Started:
		s.deps.Metrics.Sessions.Add(1)
		s.open(ctx)
	case *actor.Stopped:
		s.deps.Metrics.Sessions.Add(-1)
		if s.left != nil {
			s.deps.leaving.CompareAndDelete(s.id, s.left)
			close(s.left)
		}
		if s.idleTimer != nil {
			s.idleTimer.Stop()
		}
		if s.releaseTimer != nil {
			s.releaseTimer.Stop()
		}
		if s.store != nil {
			s.closeStore()
			s.store, s.fenced = nil, nil
		}
	case *idleTick:
		idle := s.deps.Config.SessionIdle
		if left := idle - time.Since(s.lastActive); left > 0 {
			s.armIdle(ctx, left)
			return
		}
		// Checked again later if the session stays: busy with a turn, or the
		// connection refused the retire.
		s.armIdle(ctx, idle)
		if s.turn == nil && !s.retiring && !s.failed && !s.mcpWaiting() {
			s.retiring = true
			ctx.Send(s.conn, &retireRequest{id: s.id, pid: ctx.Self(), seen: s.seen})
		}
	case *releaseTick:
		s.releaseArmed = false
		s.releaseIfIdle(ctx)
	case *cancelTurns:
		if s.turn != nil && m.conn.Equal(s.promptConn) &&
			(m.requestID == nil || bytes.Equal(m.requestID, protocol.CanonicalID(s.promptID))) {
			ctx.Send(s.turn, &cancelTurn{})
		}
		if h := s.mcp.held; h != nil && m.conn.Equal(h.conn) &&
			(m.requestID == nil || bytes.Equal(m.requestID, protocol.CanonicalID(h.id))) {
			s.cancelHeldPrompt(ctx)
		}
	case *retireAnswer:
		s.retiring = false
		if m.ok {
			if !s.failed {
				s.log.Debug().Msg("idle session evicted from memory")
			}
			ctx.Stop(ctx.Self())
		}
	case *sessionRequest:
		if m.conn != nil && !m.conn.Equal(s.conn) {
			s.respondTo(ctx, m.conn, m.id, nil, errSessionMoved())
			ctx.Send(m.conn, &sessionMoved{id: s.id, pid: ctx.Self()})
			return
		}
		s.seen++
		if s.failed {
			// e.g. a prompt that brought an evicted session back
			s.respondError(ctx, m.id, s.failErr)
			return
		}
		s.handle(ctx, m)
	case *handOff:
		s.handingOff = append(s.handingOff, ctx.Sender())
		if len(s.handingOff) > 1 {
			return
		}
		s.cancelHeldPrompt(ctx)
		s.answerPendingStarts(ctx)
		if s.turn != nil {
			ctx.Send(s.turn, &cancelTurn{})
			return // see endTurn
		}
		s.leave(ctx)
	case *attach:
		if !s.failed && !s.acquire(ctx, m.conn, m.reqID, true) {
			return
		}
		s.attach(ctx, m)
	case *detach:
		if m.conn.Equal(s.conn) {
			s.cancelHeldPrompt(ctx)
			if s.turn != nil {
				ctx.Send(s.turn, &cancelTurn{})
			}
			s.closing = true
			if s.turn == nil {
				ctx.Stop(ctx.Self())
			}
		}
	case *messageDone:
		s.record(ctx, m.msg)
	case *compacted:
		s.compacted(m)
	case *turnFinished:
		s.endTurn(ctx, m)
	case *mcpStatus:
		s.onMCPStatus(ctx, m)
	case *mcpBudget:
		s.onMCPBudget(ctx, m)
	case *childCrashed:
		if m.child.Equal(s.mcp.pid) {
			s.onMCPCrash(ctx, m)
			return
		}
		if m.child.Equal(s.turn) {
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
		if m.from != nil && !m.from.Equal(s.conn) {
			// Moved to another connection: nothing of it is that one's to wait for.
			ctx.Send(m.from, &sessionIdle{sessionID: s.id})
			return
		}
		s.draining = true
		s.cancelHeldPrompt(ctx)
		if s.turn == nil {
			ctx.Send(s.conn, &sessionIdle{sessionID: s.id})
			return
		}
		ctx.Send(s.turn, &cancelTurn{})
	}
}

// open creates, loads or forks the session's store entry, then answers the
// request that started it.
func (s *session) open(ctx actor.Context) {
	var (
		entries []store.Entry
		err     error
	)
	switch s.start {
	case startNew:
		s.store, err = s.deps.Store.Create(store.Meta{ID: s.id, Cwd: s.startCwd, Mode: "default", Model: s.deps.llmConfig().Model})
	case startFork:
		s.store, entries, err = s.deps.Store.Fork(s.forkSrc, s.id)
	default:
		s.store, entries, err = s.deps.Store.Open(s.id)
		for try := 0; try < 2 && s.takeOver(err); try++ {
			s.store, entries, err = s.deps.Store.Open(s.id)
		}
	}
	if err == nil {
		entries, _, err = store.RepairSession(s.store, entries)
	}
	if err != nil {
		s.failed = true
		s.failErr = s.storeError(err, "cannot open the session")
		s.respondError(ctx, s.startReq, s.failErr)
		ctx.Send(s.conn, &retireRequest{id: s.id, pid: ctx.Self(), force: true})
		return
	}
	s.entries = entries
	s.adoptMeta()
	if s.startCwd != "" && s.startCwd != s.meta.Cwd && s.start != startNew {
		s.meta.Cwd = s.startCwd
		s.saveMeta()
	}
	s.configureMCP(ctx, s.mcp.start, s.meta.Cwd)
	s.answerWhenReady(ctx, s.start, s.startReq)
	s.armIdle(ctx, s.deps.Config.SessionIdle)
	s.armRelease(ctx, s.deps.Config.SessionRelease)
}

// takeOver asks the process named by an in-use error to hand the session
// over (cluster mode), and reports whether it did, so that opening it again
// may succeed. It blocks the actor for that round trip, as the store calls
// around it do: the requests queued meanwhile are served in order after it.
func (s *session) takeOver(err error) bool {
	var inUse *store.InUseError
	if s.deps.Handover == nil || !errors.As(err, &inUse) || errors.Is(err, store.ErrFenced) || inUse.Owner == "" {
		return false
	}
	start := time.Now()
	if herr := s.deps.Handover.TakeOver(s.id, inUse.Owner); herr != nil {
		s.log.Info().Err(herr).Str("holder", inUse.Owner).Msg("session not handed over")
		return false
	}
	s.log.Info().Str("from", inUse.Owner).Dur("took", time.Since(start)).Msg("session handed over by another pod")
	return true
}

// leave lets go of the session for another process (handOff): the lease is
// released, the connection forgets the session, the askers are answered
// and the actor stops.
func (s *session) leave(ctx actor.Context) {
	if s.store != nil {
		s.closeStore()
	}
	ctx.Send(s.conn, &sessionLeft{id: s.id, pid: ctx.Self()})
	for _, p := range s.handingOff {
		if p != nil {
			ctx.Send(p, &handedOff{})
		}
	}
	s.handingOff = nil
	s.closing = true
	s.left = make(chan struct{})
	s.deps.leaving.Store(s.id, s.left)
	s.log.Info().Msg("session handed over to another pod")
	ctx.Stop(ctx.Self())
}

// storeError is the client's view of a store failure to open a session:
// held by another process, gone, out of descriptors, or internal (logged
// with the error id).
func (s *session) storeError(err error, what string) *protocol.Error {
	var inUse store.InUseError
	if e := (*store.InUseError)(nil); errors.As(err, &e) {
		inUse = *e
	}
	switch {
	case errors.Is(err, store.ErrFenced):
		s.log.Warn().Err(err).Msg(what + ": taken over by another process")
		return protocol.ErrSessionTakenOver(s.id, inUse.PID, inUse.Owner)
	case errors.Is(err, store.ErrInUse):
		s.log.Info().Int("holder_pid", inUse.PID).Str("holder", inUse.Owner).Msg("session is open in another process")
		return protocol.ErrSessionInUse(s.id, inUse.PID, inUse.Owner)
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalidID):
		return protocol.ErrSessionNotFound()
	case isFDExhaustion(err):
		s.log.Warn().Err(err).Msg(what + ": out of file descriptors")
		return protocol.ErrLimit("The server is out of file descriptors; try again shortly", "file_descriptors", 0)
	}
	errorID := newErrorID()
	s.log.Error().Err(err).Str("error_id", errorID).Msg(what)
	return protocol.ErrInternal(what+": "+err.Error(), errorID)
}

// isFDExhaustion reports EMFILE/ENFILE: a load condition, not a bug.
func isFDExhaustion(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
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
	if s.released || s.failed || s.store == nil {
		return
	}
	period := s.deps.Config.SessionRelease
	if s.turn != nil || s.mcp.held != nil {
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

// acquire takes the store handle back before the session serves a request
// (released sessions only). When another process wrote the session
// meanwhile, the session reloads it from disk. When another process holds
// it now, reqID is answered with an error naming the situation and the
// request is not served; an explicit load or resume (takeOver) asks that
// process to hand the session over first (cluster mode), a prompt does not:
// the session went elsewhere, as to another connection.
func (s *session) acquire(ctx actor.Context, conn *actor.PID, reqID protocol.RawMessage, takeOver bool) bool {
	if !s.released {
		return true
	}
	entries, changed, err := s.store.Acquire()
	for try := 0; takeOver && try < 2 && s.takeOver(err); try++ {
		entries, changed, err = s.store.Acquire()
	}
	if err != nil {
		s.respondTo(ctx, conn, reqID, nil, s.storeError(err, "cannot reopen the session"))
		return false
	}
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
	return true
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
		ctx.Send(s.turn, &cancelTurn{})
		return
	}
	if s.store == nil || s.closing {
		s.fenced = nil
		return
	}
	if err := s.store.Release(); err != nil {
		s.log.Error().Err(err).Msg("release session store")
	}
	s.released, s.fenced = true, nil
}

// adoptMeta takes the store's metadata, with mode and model made valid here.
// A history without its title (the process was killed during the first
// turn, before the turn's metadata write) gets it back from its first
// prompt; it is written with the next change.
func (s *session) adoptMeta() {
	s.meta = s.store.Meta()
	if !validMode(s.meta.Mode) {
		s.meta.Mode = "default"
	}
	if !s.validModel(s.meta.Model) {
		s.meta.Model = s.deps.llmConfig().Model
	}
	if s.meta.Title == "" {
		for i := range s.entries {
			if e := &s.entries[i]; e.Kind == store.KindMessage && e.Message.Role == llm.RoleUser {
				if s.meta.Title = store.TitleFrom(e.Message.TextOf()); s.meta.Title != "" {
					s.metaDirty = true
					break
				}
			}
		}
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

// answerStart replays (load, fork) and answers the request that brought the
// session to this connection.
func (s *session) answerStart(ctx actor.Context, kind startKind, reqID protocol.RawMessage) {
	switch kind {
	case startNew, startFork:
		if kind == startFork {
			s.replay(ctx)
		}
		s.respond(ctx, reqID, protocol.NewSessionResponse{
			SessionID:     s.id,
			Modes:         modeState(s.meta.Mode),
			Models:        s.modelState(),
			ConfigOptions: s.configOptions(),
			Meta:          s.mcpMeta(),
		})
	case startLoad, startResume:
		if kind == startLoad {
			s.replay(ctx)
		}
		s.respond(ctx, reqID, protocol.SessionStateResponse{
			Modes:         modeState(s.meta.Mode),
			Models:        s.modelState(),
			ConfigOptions: s.configOptions(),
			Meta:          s.mcpMeta(),
		})
	default:
		return
	}
	if kind != startResume {
		s.emit(ctx, protocol.AvailableCommandsUpdate{SessionUpdate: protocol.UpdateAvailableCommands, AvailableCommands: slashCommands})
	}
}

func (s *session) attach(ctx actor.Context, m *attach) {
	if s.failed {
		s.respondTo(ctx, m.conn, m.reqID, nil, s.failErr)
		return
	}
	if !m.conn.Equal(s.conn) {
		// The old connection keeps nothing of this session any more: its
		// running prompt ends cancelled (answered to it, see promptConn; its
		// pending permission request is moot) and a drain of it is over.
		if s.turn != nil {
			ctx.Send(s.turn, &cancelTurn{})
		}
		if s.draining {
			s.draining = false
			ctx.Send(s.conn, &sessionIdle{sessionID: s.id})
		}
		// What waited for MCP servers on the old connection is answered there.
		s.cancelHeldPrompt(ctx)
		s.answerPendingStarts(ctx)
		s.conn = m.conn
		s.dropPermissionAsks()
	}
	s.mcp.notices = m.notices
	s.caps = m.caps
	// The connection counts its requests to this session afresh from the
	// attach on (openSession resets its count), also when it is the same
	// connection: without this an idle session loaded again is never
	// retired (seen and sent would never match).
	s.seen = 0
	if m.cwd != "" && m.cwd != s.meta.Cwd {
		s.meta.Cwd = m.cwd
		s.changeMeta()
		if s.fenced != nil {
			s.respondError(ctx, m.reqID, s.fenced)
			return
		}
	}
	s.configureMCP(ctx, m.servers, s.meta.Cwd)
	s.answerWhenReady(ctx, m.kind, m.reqID)
}

// forwardRequest sends a tool's request to the connection that owns the
// session now, if the tool's turn still runs: after a prompt's answer no
// request of its turn reaches the client. A refused request is answered at
// once, so the tool does not wait for nothing.
func (s *session) forwardRequest(ctx actor.Context, m *outboundRequest) {
	if s.turn == nil || m.turn != s.turnID {
		ctx.Send(m.replyTo, &clientAnswer{tag: m.tag, err: protocol.NewError(protocol.CodeRequestCancelled, "the turn has ended", nil)})
		return
	}
	ctx.Send(s.conn, m)
}

// replay sends the whole history as session/update notifications through
// the same mapping as live updates, before the load/fork response.
func (s *session) replay(ctx actor.Context) {
	for i := range s.entries {
		e := &s.entries[i]
		if e.Kind == store.KindCompaction {
			s.emit(ctx, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateAgentMessageChunk, Content: protocol.Text("[Context compacted]")})
			continue
		}
		for _, u := range replayUpdates(&e.Message) {
			s.emit(ctx, u)
		}
	}
}

// replayUpdates maps one stored message to the updates a client saw live.
func replayUpdates(m *llm.Message) []any {
	var out []any
	for i := range m.Content {
		b := &m.Content[i]
		switch {
		case len(b.Display) > 0 && b.Display[0] == '[':
			// an agent tool call: its sub-agent's updates, then its own
			var all []protocol.RawMessage
			if protocol.Unmarshal(b.Display, &all) == nil {
				for _, u := range all {
					out = append(out, u)
				}
			}
		case b.Display != nil:
			out = append(out, b.Display)
		case b.Type == llm.BlockImage:
			out = append(out, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateUserMessageChunk,
				Content: protocol.ImageContent{Type: "image", Data: b.Data, MimeType: b.MediaType}})
		case b.Type == llm.BlockText && b.Text != "":
			kind := protocol.UpdateAgentMessageChunk
			if m.Role == llm.RoleUser {
				kind = protocol.UpdateUserMessageChunk
			}
			out = append(out, protocol.ChunkUpdate{SessionUpdate: kind, Content: protocol.Text(b.Text)})
		case b.Type == llm.BlockThinking && b.Text != "":
			out = append(out, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateAgentThoughtChunk, Content: protocol.Text(b.Text)})
		case b.Type == llm.BlockToolUse:
			out = append(out, protocol.ToolCallUpdate{SessionUpdate: protocol.UpdateToolCall, ToolCallID: b.ToolCallID,
				Title: b.Name, Kind: string(tools.KindOther), Status: protocol.ToolPending, RawInput: b.Input})
		case b.Type == llm.BlockToolResult:
			status := protocol.ToolCompleted
			if b.IsError {
				status = protocol.ToolFailed
			}
			text := protocol.Text(b.Text)
			out = append(out, protocol.ToolCallUpdate{SessionUpdate: protocol.UpdateToolCallUpdate, ToolCallID: b.ToolCallID,
				Status: status, Content: []protocol.ToolCallContent{{Type: "content", Content: &text}}})
		}
	}
	return out
}

func (s *session) emit(ctx actor.Context, update any) {
	data := protocol.EncodeNotification(protocol.MethodSessionUpdate,
		protocol.SessionNotification{SessionID: s.id, Update: update})
	ctx.Send(s.conn, &outbound{frame: Frame{Data: data, SessionID: s.id}})
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
		conn = s.conn
	}
	data := protocol.EncodeResult(id, result)
	if e != nil {
		data = protocol.EncodeError(id, e)
	}
	ctx.Send(conn, &outbound{frame: Frame{Data: data, SessionID: s.id}})
}

// saveMeta persists s.meta now (nothing once fenced: see writeFailed).
func (s *session) saveMeta() {
	if s.fenced != nil {
		return
	}
	if err := s.store.SaveMeta(s.meta); err != nil {
		s.writeFailed(err, "save session metadata")
		return
	}
	s.meta = s.store.Meta()
	s.metaDirty = false
}

// changeMeta persists a change of s.meta: at once when no turn runs, else
// at the turn's end (endTurn writes the metadata once per turn anyway).
// What is durable when: the history's lines at every message (fsynced at
// the turn's end); the metadata at the turn's end, or at once for a change
// made between turns.
func (s *session) changeMeta() {
	s.metaDirty = true
	if s.turn == nil {
		s.saveMeta()
	}
}

// flushMeta writes a change still pending (a session closed or released).
func (s *session) flushMeta() {
	if s.metaDirty {
		s.saveMeta()
	}
}

func (s *session) handle(ctx actor.Context, r *sessionRequest) {
	switch r.method {
	case protocol.MethodSessionCancel, protocol.MethodSessionClose:
		// they write nothing: a released handle stays released
	default:
		if !s.acquire(ctx, r.conn, r.id, false) {
			return
		}
	}
	switch r.method {
	case protocol.MethodSessionPrompt:
		s.prompt(ctx, r)
	case protocol.MethodSessionCancel:
		if s.turn != nil {
			ctx.Send(s.turn, &cancelTurn{})
		}
		s.cancelHeldPrompt(ctx)
		s.respond(ctx, r.id, struct{}{})
	case protocol.MethodSessionClose:
		s.cancelHeldPrompt(ctx)
		s.answerPendingStarts(ctx)
		s.closing = true
		if s.turn == nil {
			s.closeStore()
			s.respond(ctx, r.id, struct{}{})
			ctx.Stop(ctx.Self())
			return
		}
		s.closeID, s.closeConn = r.id, r.conn
		ctx.Send(s.turn, &cancelTurn{})
	case protocol.MethodSessionSetMode:
		var p protocol.SetModeRequest
		if err := protocol.Unmarshal(r.params, &p); err != nil || !validMode(p.ModeID) {
			s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"modeId": "unknown mode"}))
			return
		}
		s.setMode(ctx, r.id, p.ModeID)
	case protocol.MethodSessionSetConfig:
		s.setConfig(ctx, r)
	case protocol.MethodSessionLoad, protocol.MethodSessionResume:
		kind := startLoad
		if r.method == protocol.MethodSessionResume {
			kind = startResume
		}
		var p protocol.SessionRef
		_ = protocol.Unmarshal(r.params, &p)
		servers, _, _ := protocol.ParseMcpServers(p.McpServers)
		s.attach(ctx, &attach{kind: kind, reqID: r.id, cwd: p.Cwd, conn: s.conn, servers: servers, notices: s.mcp.notices, caps: s.caps})
	}
}

func validMode(id string) bool {
	for _, m := range sessionModes {
		if m.ID == id {
			return true
		}
	}
	return false
}

func modeState(current string) *protocol.SessionModeState {
	return &protocol.SessionModeState{CurrentModeID: current, AvailableModes: sessionModes}
}

// models lists the selectable models: the configured ones, the current first.
func (s *session) models() []string {
	cfg := s.deps.llmConfig()
	list := cfg.Models
	if len(list) == 0 {
		list = s.deps.Config.Models
	}
	if len(list) == 0 {
		list = []string{cfg.Model}
	}
	return list
}

func (s *session) validModel(m string) bool {
	for _, x := range s.models() {
		if x == m {
			return true
		}
	}
	return false
}

func (s *session) modelState() *protocol.SessionModelState {
	st := &protocol.SessionModelState{CurrentModelID: s.meta.Model}
	for _, m := range s.models() {
		st.AvailableModels = append(st.AvailableModels, protocol.ModelInfo{ModelID: m, Name: m})
	}
	return st
}

func (s *session) configOptions() []protocol.SessionConfigOption {
	modeOpts := make([]protocol.ConfigSelectOption, len(sessionModes))
	for i, m := range sessionModes {
		modeOpts[i] = protocol.ConfigSelectOption{Value: m.ID, Name: m.Name, Description: m.Description}
	}
	var modelOpts []protocol.ConfigSelectOption
	for _, m := range s.models() {
		modelOpts = append(modelOpts, protocol.ConfigSelectOption{Value: m, Name: m})
	}
	return []protocol.SessionConfigOption{
		{ID: "mode", Name: "Mode", Category: "mode", Type: "select", CurrentValue: s.meta.Mode, Options: modeOpts},
		{ID: "model", Name: "Model", Category: "model", Type: "select", CurrentValue: s.meta.Model, Options: modelOpts},
	}
}

// setMode changes the mode, answers reqID, and tells the client both ways
// (modes and config options are kept in sync).
func (s *session) setMode(ctx actor.Context, reqID protocol.RawMessage, mode string) {
	if mode == s.meta.Mode {
		s.respond(ctx, reqID, struct{}{})
		return
	}
	s.meta.Mode = mode
	s.changeMeta()
	if s.fenced != nil {
		s.respondError(ctx, reqID, s.fenced)
		return
	}
	s.respond(ctx, reqID, struct{}{})
	s.emit(ctx, protocol.CurrentModeUpdate{SessionUpdate: protocol.UpdateCurrentMode, CurrentModeID: mode})
	s.emit(ctx, protocol.ConfigOptionUpdate{SessionUpdate: protocol.UpdateConfigOption, ConfigOptions: s.configOptions()})
}

func (s *session) setConfig(ctx actor.Context, r *sessionRequest) {
	var p protocol.SetConfigOptionRequest
	var value string
	if err := protocol.Unmarshal(r.params, &p); err != nil || protocol.Unmarshal(p.Value, &value) != nil {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"value": "a string value is required"}))
		return
	}
	switch {
	case p.ConfigID == "mode" && validMode(value):
		if value != s.meta.Mode {
			s.meta.Mode = value
			s.changeMeta()
			s.emit(ctx, protocol.CurrentModeUpdate{SessionUpdate: protocol.UpdateCurrentMode, CurrentModeID: value})
		}
	case p.ConfigID == "model" && s.validModel(value):
		if value != s.meta.Model {
			s.meta.Model = value
			s.changeMeta()
		}
	case p.ConfigID == "mode" || p.ConfigID == "model":
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"value": "unknown value for " + p.ConfigID}))
		return
	default:
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"configId": "unknown config option"}))
		return
	}
	if s.fenced != nil {
		s.respondError(ctx, r.id, s.fenced)
		return
	}
	s.respond(ctx, r.id, protocol.SetConfigOptionResponse{ConfigOptions: s.configOptions()})
}

func (s *session) prompt(ctx actor.Context, r *sessionRequest) {
	var p protocol.PromptRequest
	if err := protocol.Unmarshal(r.params, &p); err != nil {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"error": err.Error()}))
		return
	}
	if len(p.Prompt) == 0 {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"prompt": "prompt must not be empty"}))
		return
	}
	if s.turn != nil || s.mcp.held != nil {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{
			"prompt": "a prompt is already running in this session; cancel it or wait for its response"}))
		return
	}
	if !s.deps.hasCredentials() {
		s.respondError(ctx, r.id, s.deps.errAuthRequired())
		return
	}
	blocks, bad := promptBlocks(p.Prompt, s.deps.Config.MaxImageBytes)
	if bad != nil {
		s.respondError(ctx, r.id, bad)
		return
	}
	user := llm.Message{Role: llm.RoleUser, Content: blocks}
	command := slashCommand(&user)
	if command == "clear" {
		s.append(store.CompactionEntry("(The user cleared the conversation; nothing before this point is relevant.)", s.store.LastSeq()))
		if s.fenced != nil {
			s.respondError(ctx, r.id, s.fenced)
			return
		}
		s.emit(ctx, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateAgentMessageChunk, Content: protocol.Text("Context cleared.")})
		s.syncStore()
		s.respond(ctx, r.id, protocol.PromptResponse{StopReason: protocol.StopEndTurn, Usage: promptUsage(llm.Usage{})})
		return
	}
	if command == "" && s.holdPrompt(r) {
		return // answered once the MCP servers are up (session_mcp.go)
	}
	if command == "" {
		s.record(ctx, user)
		if s.fenced != nil {
			s.respondError(ctx, r.id, s.fenced)
			return
		}
	}
	s.promptID, s.promptConn = r.id, r.conn
	s.turnUsage = llm.Usage{}
	s.turnID++
	opts := turnOptions{
		sessionID: s.id, cwd: s.meta.Cwd, model: s.meta.Model, turnID: s.turnID,
		history: store.Context(s.entries), tools: s.toolsForMode(),
		compactOnly: command == "compact",
	}
	opts.mcp, opts.mcpKeep = s.mcpTurnTools()
	props := actor.PropsFromProducer(func() actor.Actor { return newTurn(s.deps, opts) },
		actor.WithReceiverMiddleware(keepStack), actor.WithSupervisor(reportAndStop{}))
	s.turn = ctx.Spawn(props)
}

// slashCommand recognises /compact and /clear typed as the whole prompt.
func slashCommand(m *llm.Message) string {
	text := strings.TrimSpace(m.TextOf())
	for _, c := range slashCommands {
		if text == "/"+c.Name {
			return c.Name
		}
	}
	return ""
}

// toolsForMode: plan mode offers the model read-only tools only.
func (s *session) toolsForMode() *tools.Registry {
	if s.meta.Mode != "plan" {
		return s.deps.Tools
	}
	var ro []tools.Tool
	for _, t := range s.deps.Tools.List() {
		if t.ReadOnly() {
			ro = append(ro, t)
		}
	}
	return tools.NewRegistry(ro...)
}

// record appends a completed message to the history, on disk at once.
func (s *session) record(ctx actor.Context, msg llm.Message) {
	s.append(store.MessageEntry(msg))
	if s.meta.Title == "" && msg.Role == llm.RoleUser {
		if title := store.TitleFrom(msg.TextOf()); title != "" {
			// Written with the turn this prompt starts, at its end.
			s.meta.Title, s.meta.UpdatedAt, s.metaDirty = title, time.Now().UTC(), true
			if s.fenced != nil {
				return
			}
			s.emit(ctx, protocol.SessionInfoUpdate{SessionUpdate: protocol.UpdateSessionInfo, Title: title,
				UpdatedAt: s.meta.UpdatedAt.Format(time.RFC3339)})
		}
	}
}

// append adds e to the history, in the store unless fenced.
func (s *session) append(e store.Entry) {
	entries := []store.Entry{e}
	if s.fenced == nil {
		if err := s.store.Append(entries...); err != nil {
			s.writeFailed(err, "append to session history")
		}
	}
	s.entries = append(s.entries, entries[0])
}

// closeStore lets go of the session in the store for good (Close is
// idempotent): before session/close is answered, so that another process
// can load the session as soon as the client hears it is closed.
func (s *session) closeStore() {
	s.flushMeta()
	if err := s.store.Close(); err != nil {
		s.log.Error().Err(err).Msg("close session store")
	}
}

func (s *session) syncStore() {
	if s.fenced != nil {
		return
	}
	if err := s.store.Sync(); err != nil {
		s.writeFailed(err, "sync session history")
	}
}

// compacted stores a compaction: the summary stands for every context
// message but the last m.keep from now on; the full history stays on disk.
func (s *session) compacted(m *compacted) {
	var ctxSeqs []int64
	for _, e := range s.entries {
		switch e.Kind {
		case store.KindCompaction:
			ctxSeqs = ctxSeqs[:0]
		default:
			ctxSeqs = append(ctxSeqs, e.Seq)
		}
	}
	cut := len(ctxSeqs) - m.keep - 1
	if cut < 0 {
		return
	}
	s.append(store.CompactionEntry(m.summary, ctxSeqs[cut]))
}

func (s *session) endTurn(ctx actor.Context, m *turnFinished) {
	if s.turn == nil {
		return
	}
	s.turn = nil
	s.dropPermissionAsks()
	var (
		repaired, added []store.Entry
		err             error
	)
	if s.fenced == nil {
		repaired, added, err = store.RepairSession(s.store, s.entries)
	} else {
		repaired, added = store.Repair(s.entries) // for the client only
	}
	if err != nil {
		s.writeFailed(err, "repair session history")
	} else if len(added) > 0 {
		s.entries = repaired
		// Tool calls cut short (cancel, close, crash) got no final update
		// from their stopped tool actors: close them for the client as the
		// history now has them, failed and interrupted, before the answer —
		// the same updates a later load replays.
		for i := range added {
			for _, u := range replayUpdates(&added[i].Message) {
				s.emit(ctx, u)
			}
		}
	}
	s.syncStore()
	// The turn's one metadata write: its usage, the time, and whatever
	// changed while it ran (see changeMeta).
	s.meta.Usage = s.meta.Usage.Add(m.usage)
	s.saveMeta()
	switch {
	case s.fenced != nil:
		// Whatever the turn's end: what it did since the takeover is lost.
		s.respondTo(ctx, s.promptConn, s.promptID, nil, s.fenced)
	case m.err != nil:
		s.respondTo(ctx, s.promptConn, s.promptID, nil, m.err)
	default:
		s.respondTo(ctx, s.promptConn, s.promptID, protocol.PromptResponse{StopReason: m.stopReason, Usage: promptUsage(m.usage)}, nil)
	}
	s.promptID, s.promptConn = nil, nil
	if len(s.handingOff) > 0 && !s.closing {
		s.leave(ctx)
		return
	}
	if s.closing {
		s.closeStore()
		s.respondTo(ctx, s.closeConn, s.closeID, struct{}{}, nil)
		ctx.Stop(ctx.Self())
	}
	if s.draining {
		ctx.Send(s.conn, &sessionIdle{sessionID: s.id})
	}
}

// promptBlocks turns ACP prompt content into model input. Images go to the
// model as images (a model that takes none gets a text marker, see
// turn.forModel); audio becomes a text marker. An image that is not
// base64, of a type the providers do not take, or larger than maxImage
// bytes is refused with -32602.
func promptBlocks(prompt []protocol.ContentBlock, maxImage int) ([]llm.Block, *protocol.Error) {
	out := make([]llm.Block, 0, len(prompt))
	images := 0
	for _, b := range prompt {
		var text string
		switch b.Type {
		case "text":
			text = b.Text
		case "resource":
			if b.Resource == nil {
				continue
			}
			if b.Resource.Text != "" || b.Resource.Blob == "" {
				text = fmt.Sprintf("<resource uri=%q>\n%s\n</resource>", b.Resource.URI, b.Resource.Text)
			} else {
				text = fmt.Sprintf("[resource: %s (%s, binary)]", b.Resource.URI, b.Resource.MimeType)
			}
		case "resource_link":
			text = fmt.Sprintf("[resource_link: %s <%s>]", b.Name, b.URI)
		case "image":
			images++
			if bad := checkImage(b, images, maxImage); bad != "" {
				return nil, protocol.ErrInvalidParams(map[string]string{"prompt": bad})
			}
			out = append(out, llm.Block{Type: llm.BlockImage, MediaType: b.MimeType, Data: b.Data})
			continue
		case "audio":
			text = "[audio: " + b.MimeType + "]"
		default:
			text = "[" + b.Type + "]"
		}
		out = append(out, llm.Block{Type: llm.BlockText, Text: text})
	}
	return out, nil
}

// imageTypes are the image types both providers take.
var imageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// DefaultMaxImageBytes caps one prompt image (Config.MaxImageBytes).
const DefaultMaxImageBytes = 5 << 20

// checkImage says what is wrong with the n-th image of a prompt ("" if
// nothing).
func checkImage(b protocol.ContentBlock, n, maxBytes int) string {
	if !slices.Contains(imageTypes, b.MimeType) {
		return fmt.Sprintf("image %d: mimeType %q is not supported (use %s)", n, b.MimeType, strings.Join(imageTypes, ", "))
	}
	size := base64.StdEncoding.DecodedLen(len(b.Data))
	if size > maxBytes+2 { // DecodedLen counts padding as bytes
		return fmt.Sprintf("image %d is about %d bytes; the limit is %d bytes (IAC_CODE_MAX_IMAGE_BYTES)", n, size, maxBytes)
	}
	data, err := base64.StdEncoding.DecodeString(b.Data)
	if err != nil || len(data) == 0 {
		return fmt.Sprintf("image %d: data is not base64", n)
	}
	if len(data) > maxBytes {
		return fmt.Sprintf("image %d is %d bytes; the limit is %d bytes (IAC_CODE_MAX_IMAGE_BYTES)", n, len(data), maxBytes)
	}
	return ""
}

func promptUsage(u llm.Usage) *protocol.Usage {
	return &protocol.Usage{
		InputTokens:       u.InputTokens,
		OutputTokens:      u.OutputTokens,
		TotalTokens:       u.InputTokens + u.OutputTokens,
		ThoughtTokens:     u.ThoughtTokens,
		CachedReadTokens:  u.CachedReadTokens,
		CachedWriteTokens: u.CachedWriteTokens,
	}
}
