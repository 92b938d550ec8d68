package actors

import (
	"slices"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools"
)

// Several connections on one session. A session/load or session/resume of a
// session live on another connection attaches that connection too
// (Config.SessionAttach "share", the default): every update goes to every
// attached connection, in the session's order (each is sent by the session
// actor to every connection actor in turn, and each connection keeps the
// order of its mailbox); an answer goes to the connection that asked; fs/*
// and terminal/* go to the connection whose prompt is running (its editor's
// buffers and terminals); a permission request goes to every attached
// client and the first answer wins (permission.go). A connection leaves by
// session/close or by going away; the session ends when the last one left.
// "move" keeps the behaviour from before: the new connection takes the
// session and the old one is answered "Session moved to another
// connection".
//
// The attached set may be empty while the session lives on: that is the
// state a turn that outlives its connections runs in. Today the last
// connection leaving ends the session (detachClient).

// Session attach modes (Config.SessionAttach).
const (
	AttachShare = "share"
	AttachMove  = "move"
)

// withdrawRequest tells a connection that a request it sent its client
// with this tag is moot (another client answered it, or its turn ended):
// the connection forgets it and sends its client $/cancel_request for it.
type withdrawRequest struct{ tag any }

func (*withdrawRequest) IgnoreDeadLetterLogging() {}

type (
	// attach attaches a live session to another connection too (load/resume
	// there).
	attach struct {
		kind  startKind
		reqID protocol.RawMessage
		cwd   string
		conn  *actor.PID
		who   sessionWho
		// servers are the MCP servers of the request; notices: the
		// connection's client shows notices.
		servers []protocol.McpServerConfig
		notices bool
		caps    tools.ClientCaps
		// dirs are the request's additionalDirectories (the complete list).
		dirs []string
		// compaction, booleanOptions: the connection's client shows
		// compaction updates, boolean config options.
		compaction, booleanOptions bool
		// follow: a stub of another pod follows the session here
		// (session_follow.go).
		follow *followClaim
	}
	// detach: the connection is going away; a session it was the last one
	// attached to stops (it is on disk). keepTurn: its client did not
	// leave, its pod died (a proxy whose stub's pod is gone) or drains and
	// its client went with it (session_pause_stub.go): the turn it
	// prompted goes on, answered to nobody, as a turn resumed after a
	// crash does.
	detach struct {
		conn     *actor.PID
		keepTurn bool
	}
	// sessionMoved tells a connection that the session it addressed now
	// belongs to another connection, or that its session/close detached it
	// from a session other connections keep (see connection.stopping).
	sessionMoved struct {
		id  string
		pid *actor.PID
	}
)

func (*sessionMoved) IgnoreDeadLetterLogging() {}

// errSessionMoved answers a request for a session that another connection
// (or another process) took over.
func errSessionMoved() *protocol.Error {
	return protocol.ErrInvalidParams(map[string]string{"session_id": "Session moved to another connection"})
}

// client is one connection attached to the session.
type client struct {
	pid *actor.PID
	// who: its principal and connection id (audit lines).
	who  sessionWho
	caps tools.ClientCaps
	// notices: the client shows `notice` updates.
	notices bool
	// seen counts the requests the session got from it since it attached
	// (see retireRequest).
	seen int
	// follow: it follows the session here, its resume not answered yet
	// (session_followlog.go).
	follow *followClaim
}

// clients are the connections attached to a session, in the order they
// attached.
type clients struct{ list []*client }

func (cs *clients) find(pid *actor.PID) *client {
	if pid == nil {
		return nil
	}
	for _, c := range cs.list {
		if c.pid.Equal(pid) {
			return c
		}
	}
	return nil
}

// add attaches c, or renews the entry of its connection (its requests are
// counted afresh: the connection's count restarts with the attach).
func (cs *clients) add(c client) {
	if old := cs.find(c.pid); old != nil {
		*old = c
		return
	}
	cs.list = append(cs.list, &c)
}

func (cs *clients) remove(pid *actor.PID) bool {
	for i, c := range cs.list {
		if c.pid.Equal(pid) {
			cs.list = append(cs.list[:i], cs.list[i+1:]...)
			return true
		}
	}
	return false
}

func (cs *clients) len() int { return len(cs.list) }

// only is the one attached client, nil when there are none or several.
func (cs *clients) only() *client {
	if len(cs.list) != 1 {
		return nil
	}
	return cs.list[0]
}

// capsOf are the capabilities of pid's client (none when not attached).
func (cs *clients) capsOf(pid *actor.PID) tools.ClientCaps {
	if c := cs.find(pid); c != nil {
		return c.caps
	}
	return tools.ClientCaps{}
}

// broadcast sends a session/update frame to every attached connection.
func (s *session) broadcast(ctx actor.Context, m *outbound) {
	s.followers.keep(m.frame.Data)
	if s.followers.on || s.clients.len() != 1 {
		// Kept here, or sent to several: not given back once written.
		m.frame.pool = nil
	}
	for _, c := range s.clients.list {
		ctx.Send(c.pid, m)
	}
}

// emit sends an update to every attached connection.
func (s *session) emit(ctx actor.Context, update any) {
	s.broadcast(ctx, &outbound{frame: Frame{Data: s.updateFrame(update), SessionID: s.id}})
}

// updateFrame is the session/update notification of update.
func (s *session) updateFrame(update any) []byte {
	return protocol.EncodeNotification(protocol.MethodSessionUpdate, protocol.SessionNotification{SessionID: s.id, Update: update})
}

// emitTo sends an update to one connection only (a replay for the one that
// loads the session).
func (s *session) emitTo(ctx actor.Context, conn *actor.PID, update any) {
	data := protocol.EncodeNotification(protocol.MethodSessionUpdate,
		protocol.SessionNotification{SessionID: s.id, Update: update})
	ctx.Send(conn, &outbound{frame: Frame{Data: data, SessionID: s.id}})
}

// emitNotice sends a notice update to the clients that show notices.
func (s *session) emitNotice(ctx actor.Context, update any) {
	for _, c := range s.clients.list {
		if c.notices {
			s.emitTo(ctx, c.pid, update)
		}
	}
}

// promptCaps are the capabilities of the client whose prompt runs: its
// editor serves the turn's fs/* and terminal/* calls.
func (s *session) promptCaps() tools.ClientCaps { return s.clients.capsOf(s.turn.prompt.conn) }

// forwardRequest sends a tool's request to the connection whose prompt
// runs (its editor's buffers and terminals), if the tool's turn still runs:
// after a prompt's answer no request of its turn reaches the client. A
// refused request is answered at once, so the tool does not wait for
// nothing; so is one whose connection left (its turn is being cancelled).
func (s *session) forwardRequest(ctx actor.Context, m *outboundRequest) {
	if !s.turn.running() || m.turn != s.turn.id || s.clients.find(s.turn.prompt.conn) == nil {
		ctx.Send(m.replyTo, &clientAnswer{tag: m.tag, err: protocol.NewError(protocol.CodeRequestCancelled, "the turn has ended", nil)})
		return
	}
	ctx.Send(s.turn.prompt.conn, m)
}

func (s *session) attach(ctx actor.Context, m *attach) {
	// The connection counts its requests to this session afresh from the
	// attach on (openSession resets its count), also when it is the same
	// connection: without this an idle session loaded again is never
	// retired (seen and sent would never match).
	if m.follow != nil && !s.followFrom(ctx, m) {
		return
	}
	s.attachClient(ctx, m)
	if m.follow != nil {
		s.claimFollow(s.clients.find(m.conn), m.follow)
	}
	// The last client attached decides how compaction and boolean options
	// are shown (as it decides the MCP notices).
	s.compactionUpdates, s.booleanOptions = m.compaction, m.booleanOptions
	if m.kind != startRestore && !slices.Equal(m.dirs, s.meta.AdditionalDirectories) {
		s.meta.AdditionalDirectories = m.dirs
		s.changeMeta()
	}
	if m.cwd != "" && m.cwd != s.meta.Cwd {
		s.meta.Cwd = m.cwd
		s.changeMeta()
		if s.lease.fenced != nil {
			s.respondError(ctx, m.reqID, s.lease.fenced)
			return
		}
	}
	s.configureMCP(ctx, m.servers, s.meta.Cwd)
	s.answerWhenReady(ctx, m.kind, m.reqID, m.conn)
}

// attachClient attaches m.conn. In move mode the connection attached until
// now loses the session: its running prompt ends cancelled (answered to it,
// see turnPrompt.conn), what it waited for is answered, a drain of it is over,
// and its later requests are answered "Session moved to another
// connection". In share mode a permission request pending is asked of the
// newcomer too.
func (s *session) attachClient(ctx actor.Context, m *attach) {
	if s.deps.Config.SessionAttach == AttachMove && m.follow == nil {
		for _, old := range append([]*client(nil), s.clients.list...) {
			if old.pid.Equal(m.conn) {
				continue
			}
			if s.turn.running() {
				s.cancelTurn(ctx)
			}
			s.answerDrainers(ctx)
			s.cancelHeldPrompt(ctx)
			s.answerPendingStarts(ctx)
			s.cancelQueued(ctx, old.pid, nil)
			s.dropPermissionAsks(ctx)
			s.clients.remove(old.pid)
		}
	}
	known := s.clients.find(m.conn) != nil
	s.clients.add(client{pid: m.conn, who: m.who, caps: m.caps, notices: m.notices})
	s.conn, s.who = m.conn, m.who
	if !known && s.perm.active != nil {
		s.askOne(ctx, s.perm.active, m.conn)
	}
}

// detachClient lets conn go (session/close from it, or it went away): its
// running prompt ends cancelled, its queued and held prompts are answered
// cancelled, a permission request asked of it is no longer waited for.
// When it was the last one, the session ends (for why): it stops once its
// turn has. It reports whether conn was attached.
func (s *session) detachClient(ctx actor.Context, conn *actor.PID, why endReason) bool {
	if !s.clients.remove(conn) {
		return false
	}
	s.cancelQueued(ctx, conn, nil)
	if h := s.mcp.held; h != nil && conn.Equal(h.conn) {
		s.cancelHeldPrompt(ctx)
	}
	if s.clients.len() > 0 {
		if s.turn.of(conn) {
			s.cancelTurn(ctx)
		} else {
			s.forgetAsked(ctx, conn)
		}
		s.startQueued(ctx)
		return true
	}
	s.cancelHeldPrompt(ctx)
	s.cancelQueued(ctx, nil, nil)
	if s.turn.running() && !s.turn.of(conn) {
		// A turn none of its clients asked for (resumed, Server.Adopt)
		// goes on; the session ends with it (endUnattended).
		return true
	}
	s.letGo(ctx, phase{kind: phaseEnding, why: why})
	return true
}

// deletedNotice tells a client that the session it has open was deleted
// by another connection.
func deletedNotice() protocol.SessionInfoUpdate {
	return protocol.SessionInfoUpdate{SessionUpdate: protocol.UpdateSessionInfo, Meta: map[string]any{"iac-code/deleted": true}}
}

// endForDelete lets go of every connection but by before its
// session/delete closes the session: each is told (a session_info_update
// whose _meta says the session was deleted), its prompts end cancelled,
// and its later requests answer -32002 once the actor is gone.
func (s *session) endForDelete(ctx actor.Context, by *actor.PID) {
	for _, c := range append([]*client(nil), s.clients.list...) {
		if c.pid.Equal(by) {
			continue
		}
		s.emitTo(ctx, c.pid, deletedNotice())
		s.detachClient(ctx, c.pid, endDeletedElsewhere)
	}
}

// deleteLive asks a session live on other connections to end for a
// session/delete (the deleting connection watches it stop, then removes
// its store entry).
type deleteLive struct{}

func (*deleteLive) IgnoreDeadLetterLogging() {}

// endForDeleteElsewhere serves deleteLive: every attached connection is
// told and let go; the last one leaving ends the session (at its turn's
// end, when one runs).
func (s *session) endForDeleteElsewhere(ctx actor.Context) {
	s.endForDelete(ctx, nil)
	if s.clients.len() == 0 {
		s.cancelHeldPrompt(ctx)
		s.cancelQueued(ctx, nil, nil)
		s.letGo(ctx, phase{kind: phaseEnding, why: endDeletedElsewhere})
	}
}

// closeShared serves session/close from one of several attached
// connections: only that one leaves (answered, and told it is detached so
// that it stops waiting for the actor to stop); reports whether it did.
func (s *session) closeShared(ctx actor.Context, r *sessionRequest) bool {
	if s.clients.len() < 2 || s.clients.find(r.conn) == nil {
		return false
	}
	s.detachClient(ctx, r.conn, endClose)
	s.respondTo(ctx, r.conn, r.id, struct{}{}, nil)
	ctx.Send(r.conn, &sessionMoved{id: s.id, pid: ctx.Self()})
	return true
}

// drainFor serves a connection's drain (it is closing): what it waits for
// is its own prompts only; the turn of another connection's prompt runs on.
// Its session/new or load still waiting for MCP servers is answered now,
// before the connection goes.
func (s *session) drainFor(ctx actor.Context, m *drain) {
	from := m.from
	if from == nil {
		from = s.conn
	}
	s.answerPendingStartsOf(ctx, from)
	s.cancelQueued(ctx, from, nil)
	if h := s.mcp.held; h != nil && from.Equal(h.conn) {
		s.cancelHeldPrompt(ctx)
	}
	if !s.turn.of(from) {
		ctx.Send(from, &sessionIdle{sessionID: s.id, seq: m.seq})
		return
	}
	s.drainers = append(s.drainers, &drain{from: from, seq: m.seq})
	s.cancelTurn(ctx)
}

// answerDrainers tells the connections waiting for the running turn that
// it is over.
func (s *session) answerDrainers(ctx actor.Context) {
	for _, d := range s.drainers {
		ctx.Send(d.from, &sessionIdle{sessionID: s.id, seq: d.seq})
	}
	s.drainers = nil
}

// withdraw tells conn that its request tagged tag is moot.
func withdraw(ctx actor.Context, conn *actor.PID, tag any) {
	ctx.Send(conn, &withdrawRequest{tag: tag})
}

// sameTag reports whether two request tags are of one request; a
// remoteTag by its leg and key alone, as a withdrawal knows only those;
// legRequests (b) withdraws every request of its leg.
func sameTag(a, b any) bool {
	if lb, ok := b.(legRequests); ok {
		ra, ok := a.(remoteTag)
		return ok && ra.leg.Equal(lb.leg)
	}
	if ra, ok := a.(remoteTag); ok {
		rb, ok := b.(remoteTag)
		return ok && ra.key != "" && ra.key == rb.key && ra.leg.Equal(rb.leg)
	}
	return a == b
}

// withdrawRequest (connection side): the pending request with that tag is
// forgotten and its client told with $/cancel_request, at once.
func (c *connection) withdraw(m *withdrawRequest) {
	for n, p := range c.pending {
		if !sameTag(p.tag, m.tag) {
			continue
		}
		delete(c.pending, n)
		c.send(protocol.EncodeNotification(protocol.MethodCancelRequest, map[string]int64{"requestId": n}), "")
	}
}
