package actors

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/iac-code/iac-code/protocol"
)

// Opening sessions on a connection (session/new, load, resume, fork) and
// routing session-scoped requests to their session actors.

func (c *connection) newSession(ctx actor.Context, m *protocol.Message) {
	var req protocol.NewSessionRequest
	if err := protocol.Unmarshal(m.Params, &req); err != nil {
		c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"error": err.Error()}))
		return
	}
	if !c.deps.usableCredentials(c.log) {
		// At once, so the client shows its auth methods before the user
		// types a prompt.
		c.fail(m.ID, c.deps.errAuthRequired())
		return
	}
	cwd, bad := c.workspaceCwd(req.Cwd)
	if bad != nil {
		c.fail(m.ID, bad)
		return
	}
	dirs, ok := c.additionalDirs(m.ID, req.AdditionalDirectories)
	if !ok {
		return
	}
	servers, ok := c.mcpServersOf(m.ID, req.McpServers)
	if !ok || c.full("", m.ID) {
		return
	}
	// The session actor creates its store entry and answers the request.
	c.openSession(ctx, uuid.NewString(), startNew, m.ID, cwd, "", servers, dirs, nil)
}

// mcpServersOf parses mcpServers, answering reqID with -32602 (naming the
// entry) when it is invalid.
func (c *connection) mcpServersOf(reqID protocol.RawMessage, raw protocol.RawMessage) ([]protocol.McpServerConfig, bool) {
	servers, warnings, e := protocol.ParseMcpServers(raw)
	if e != nil {
		c.fail(reqID, e)
		return nil, false
	}
	for _, w := range warnings {
		c.log.Warn().Msg(w)
	}
	return servers, true
}

// additionalDirs checks additionalDirectories as cwd is checked (an
// absolute path of an existing directory, inside the workspace root when
// one is set), answering reqID with -32602 naming the entry otherwise.
func (c *connection) additionalDirs(reqID protocol.RawMessage, dirs []string) ([]string, bool) {
	if len(dirs) == 0 {
		return nil, true
	}
	out := make([]string, 0, len(dirs))
	for i, d := range dirs {
		dir, bad := c.workspaceCwd(d)
		if bad != nil {
			why := bad.Message
			if m, ok := bad.Data.(map[string]string); ok && m["cwd"] != "" && bad.Message == "Invalid params" {
				why = m["cwd"]
			}
			c.fail(reqID, protocol.ErrInvalidParams(map[string]string{
				"additionalDirectories": fmt.Sprintf("entry %d (%q): %s", i, d, strings.Replace(why, "cwd", "an additional directory", 1))}))
			return nil, false
		}
		out = append(out, filepath.Clean(dir))
	}
	return out, true
}

func checkCwd(cwd string) string {
	if cwd == "" {
		return "cwd is required"
	}
	if !filepath.IsAbs(cwd) {
		return "cwd must be an absolute path"
	}
	st, err := os.Stat(cwd)
	if err != nil || !st.IsDir() {
		return "cwd must be an existing directory"
	}
	return ""
}

// attachRequest remembers an attach sent to a live session, in case the
// session stopped before it got it.
type attachRequest struct {
	id      string
	kind    startKind
	reqID   protocol.RawMessage
	cwd     string
	servers []protocol.McpServerConfig
	dirs    []string
	follow  *followClaim
	state   attachState
}

// openSession spawns the session actor, which opens its store entry, starts
// its MCP servers and answers reqID. A session already live (on any
// connection) is attached to this one instead.
// A follow (a proxy's resume for a stub following the session here,
// session_follow.go) is answered without a replay, after what the session
// sent its clients since this pod took it.
func (c *connection) openSession(ctx actor.Context, id string, kind startKind, reqID protocol.RawMessage, cwd, forkSrc string,
	servers []protocol.McpServerConfig, dirs []string, follow *followClaim) {
	notices := c.notices
	props := actor.PropsFromProducer(func() actor.Actor {
		s := newSession(c.deps, id, c.sessionWho(), ctx.Self(), c.caps, kind, reqID, cwd, forkSrc, servers, notices)
		s.startDirs, s.compactionUpdates, s.booleanOptions = dirs, c.compaction, c.booleanOptions
		s.clients.only().follow = follow
		return s
	}, actor.WithSupervisor(reportAndStop{}), actor.WithGuardian(c.deps.sessionGuardian),
		actor.WithReceiverMiddleware(keepStack))
	name := sessionActorName(id)
	r := c.sessions.of(id)
	r.moved = false
	pid, err := ctx.ActorSystem().Root.SpawnNamed(props, name)
	if errors.Is(err, actor.ErrNameExists) {
		pid = actor.NewPID(ctx.ActorSystem().Address(), name)
		r.keep(&attachRequest{id: id, kind: kind, reqID: reqID, cwd: cwd, servers: servers, dirs: dirs, follow: follow})
		ctx.Request(pid, &attach{kind: kind, reqID: reqID, cwd: cwd, conn: ctx.Self(), who: c.sessionWho(),
			servers: servers, notices: notices, caps: c.caps, dirs: dirs, compaction: c.compaction, booleanOptions: c.booleanOptions,
			follow: follow})
	} else if err != nil {
		c.log.Error().Err(err).Str("session", id).Msg("spawn session")
		c.fail(reqID, protocol.ErrInternal("could not start the session", newErrorID()))
		c.sessions.tidy(id)
		return
	}
	r.live, r.sent, r.known, r.servers = pid, 0, true, servers
	ctx.Watch(pid)
	if c.drainer != nil {
		c.joining = append(c.joining, id)
	}
}

// sessionActorName is the actor name of session id in its process.
func sessionActorName(id string) string { return sessionActorPrefix + id }

const sessionActorPrefix = "session-"

// deferIfBusy keeps m for later when session id is still stopping, or its
// owner is being read (checkOwner).
func (c *connection) deferIfBusy(id string, m *protocol.Message) bool {
	r := c.sessions.get(id)
	return c.deferIf(r != nil && (r.stopping != nil || r.checking != nil), id, m)
}

// checkingOwner: the owner of session id is being read (checkOwner).
func (c *connection) checkingOwner(id string) bool {
	r := c.sessions.get(id)
	return r != nil && r.checking != nil
}

func (c *connection) deferIf(busy bool, id string, m *protocol.Message) bool {
	if busy {
		c.sessions.postpone(id, m)
	}
	return busy
}

// stopped: the session's actor is gone; what waited for it runs now, in order.
func (c *connection) stopped(ctx actor.Context, id string) {
	if r := c.sessions.get(id); r != nil {
		r.stopping = nil
	}
	waiting := c.sessions.takeDeferred(id)
	for _, m := range waiting {
		c.dispatch(ctx, m)
	}
	c.joinDrain(ctx)
	c.finishDrain(ctx)
}

// reopenSession handles session/load, session/resume and session/fork.
func (c *connection) reopenSession(ctx actor.Context, m *protocol.Message, method string) {
	var ref protocol.SessionRef
	if err := protocol.Unmarshal(m.Params, &ref); err != nil || ref.SessionID == "" {
		c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"sessionId": "sessionId is required"}))
		return
	}
	// A fork reads the stored source: it need not wait for the source's
	// actor to stop, only for a check of its owner already under way.
	if method == protocol.MethodSessionFork && c.deferIf(c.checkingOwner(ref.SessionID), ref.SessionID, m) ||
		method != protocol.MethodSessionFork && c.deferIfBusy(ref.SessionID, m) {
		return
	}
	if ref.Cwd != "" {
		cwd, bad := c.workspaceCwd(ref.Cwd)
		if bad != nil {
			c.fail(m.ID, bad)
			return
		}
		ref.Cwd = cwd
	}
	c.checkOwner(ctx, ref.SessionID, func(ctx actor.Context, owned bool) {
		if !owned {
			c.fail(m.ID, protocol.ErrSessionNotFound(ref.SessionID))
			return
		}
		c.reopenOwned(ctx, m, method, ref)
	})
}

// reopenOwned goes on with reopenSession once the session is known to be
// the caller's.
func (c *connection) reopenOwned(ctx actor.Context, m *protocol.Message, method string, ref protocol.SessionRef) {
	target := ref.SessionID
	if method == protocol.MethodSessionFork {
		target = ""
	}
	dirs, ok := c.additionalDirs(m.ID, ref.AdditionalDirectories)
	if !ok {
		return
	}
	servers, ok := c.mcpServersOf(m.ID, ref.McpServers)
	if !ok || c.full(target, m.ID) {
		return
	}
	switch method {
	case protocol.MethodSessionFork:
		c.openSession(ctx, uuid.NewString(), startFork, m.ID, ref.Cwd, ref.SessionID, servers, dirs, nil)
	case protocol.MethodSessionLoad:
		c.openSession(ctx, ref.SessionID, startLoad, m.ID, ref.Cwd, "", servers, dirs, nil)
	default:
		follow := c.followOf(m)
		if follow != nil && follow.Drains {
			c.stub.drains = true
		}
		c.openSession(ctx, ref.SessionID, startResume, m.ID, ref.Cwd, "", servers, dirs, follow)
	}
}

// full reports whether opening session id would exceed MaxSessions, and
// answers reqID with the limit error if so (a session already live here
// does not count twice).
func (c *connection) full(id string, reqID protocol.RawMessage) bool {
	if _, live := c.sessions.live(id); live || c.sessions.liveCount() < c.deps.Config.MaxSessions {
		return false
	}
	c.fail(reqID, protocol.ErrLimit(fmt.Sprintf(
		"Too many live sessions on this connection (limit %d); close some with session/close", c.deps.Config.MaxSessions),
		"too_many_sessions", c.deps.Config.MaxSessions))
	return true
}

// toSession forwards a session-scoped request to its session actor,
// bringing an evicted session of this connection back from disk first.
func (c *connection) toSession(ctx actor.Context, m *protocol.Message, method string) {
	var ref protocol.SessionIDParams
	if err := protocol.Unmarshal(m.Params, &ref); err != nil || ref.SessionID == "" {
		c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"sessionId": "sessionId is required"}))
		return
	}
	if c.deferIfBusy(ref.SessionID, m) {
		return
	}
	r := c.sessions.get(ref.SessionID)
	if r != nil && r.moved {
		c.fail(m.ID, errSessionMoved())
		return
	}
	if r != nil && r.live == nil && r.known {
		if c.full(ref.SessionID, m.ID) {
			return
		}
		c.openSession(ctx, ref.SessionID, startRestore, nil, "", "", r.servers, nil, nil)
		r = c.sessions.get(ref.SessionID)
	}
	if r == nil || r.live == nil {
		c.fail(m.ID, protocol.ErrSessionNotFound(ref.SessionID))
		return
	}
	pid := r.live
	if method == protocol.MethodSessionClose {
		// Later requests must already see the session as gone, and wait
		// until it is (see stopping).
		r.stopping, r.live, r.sent, r.known, r.servers = pid, nil, 0, false, nil
	} else {
		r.sent++
	}
	ctx.Send(pid, &sessionRequest{id: m.ID, method: method, params: m.Params, conn: ctx.Self(), traceparent: m.Traceparent})
}
