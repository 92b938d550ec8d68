package actors

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/tools/sandbox"
	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
)

// Messages of the connection actor.
type (
	// inbound is one message from the transport, or a decode failure to answer.
	inbound struct {
		msg      *protocol.Message
		rejectID protocol.RawMessage
		reject   *protocol.Error
	}
	// outbound is a frame to write, in order, to the client.
	outbound struct{ frame Frame }
	// outboundRequest asks the client something; the answer goes to replyTo
	// as a *clientAnswer carrying tag. A tool's request names its turn
	// (turn > 0): its session sends it only while that turn runs.
	outboundRequest struct {
		sessionID string
		method    string
		params    any
		replyTo   *actor.PID
		tag       any
		turn      int64
	}
	// clientAnswer is the client's answer to an outboundRequest.
	clientAnswer struct {
		tag    any
		result protocol.RawMessage
		err    *protocol.Error
	}
	// drain cancels every running turn and is answered once all are answered.
	// from is the connection draining a session (nil when sent to a connection).
	drain       struct{ from *actor.PID }
	drained     struct{}
	sessionIdle struct{ sessionID string }
	// cancelTurns cancels running turns started by conn (every one, or only
	// the prompt with requestID): sent by the transport to its connection
	// (conn nil), and by the connection to its sessions.
	cancelTurns struct {
		conn      *actor.PID
		requestID protocol.RawMessage
	}
)

func (*outbound) IgnoreDeadLetterLogging()     {}
func (*clientAnswer) IgnoreDeadLetterLogging() {}

type pendingRequest struct {
	replyTo *actor.PID
	tag     any
}

// connection dispatches one client connection's JSON-RPC traffic and owns its
// outbound order: every frame the client sees passes through here.
type connection struct {
	deps *Deps
	id   string
	// who opened the connection; its sessions are who.Principal's.
	who         Identity
	out         Outlet
	log         zerolog.Logger
	initialized bool
	// caps are what the client advertised in initialize; its sessions use
	// them (see session.caps).
	caps     tools.ClientCaps
	sessions map[string]*actor.PID
	// sent counts requests forwarded per live session (see retireRequest).
	sent map[string]int
	// known are sessions this connection opened and did not close; evicted
	// ones come back from disk transparently on their next request.
	known   map[string]bool
	pending map[int64]pendingRequest
	nextID  int64
	// drainer is the future waiting for drain; waitIdle counts sessions
	// that still run a turn.
	drainer   *actor.PID
	waitIdle  map[string]bool
	attaching map[string]attachRequest
	// stopping are sessions this connection closed or let retire, until
	// their Terminated: the actor still holds its name (and store handle)
	// while it stops, and a message queued to it then is dropped without a
	// dead letter. Requests for them wait in deferred and are dispatched
	// again once the actor is gone, so a load right after a close, or a
	// prompt racing an idle eviction, is never lost.
	stopping map[string]*actor.PID
	deferred map[string][]*protocol.Message
	// deletingLive: a session/delete of a session live on other
	// connections waits for it to end there (session_delete.go).
	deletingLive map[string]bool
	// mcpServers are the MCP servers each known session was opened with,
	// for bringing an evicted session back with them; notices: the client
	// shows `notice` updates.
	mcpServers map[string][]protocol.McpServerConfig
	notices    bool
	// terminalAuth: the client can run terminal auth methods.
	terminalAuth bool
	// compaction: the client shows compaction updates; booleanOptions:
	// boolean config options.
	compaction     bool
	booleanOptions bool
	// moved are sessions handed over to another process (cluster pod):
	// their requests are answered as for a session moved to another
	// connection, until this connection loads them again.
	moved map[string]bool
	// stub: this connection is the proxy of a session actor of another pod
	// (session_remote.go).
	stub *actor.PID
}

func newConnection(deps *Deps, id string, who Identity, out Outlet) *connection {
	return &connection{
		deps:     deps,
		id:       id,
		who:      who,
		out:      out,
		log:      deps.Log.With().Str("conn", id).Logger(),
		sessions: map[string]*actor.PID{},
		sent:     map[string]int{},
		known:    map[string]bool{},
		pending:  map[int64]pendingRequest{},
		stopping: map[string]*actor.PID{},
		deferred: map[string][]*protocol.Message{},

		mcpServers: map[string][]protocol.McpServerConfig{},
	}
}

func (c *connection) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *outbound:
		c.deps.Metrics.FramesOut.Add(1)
		c.out.Send(m.frame)
	case *actor.Started:
		c.deps.Metrics.Connections.Add(1)
	case *actor.Stopped:
		c.deps.Metrics.Connections.Add(-1)
	case *inbound:
		if m.reject != nil {
			c.send(protocol.EncodeError(m.rejectID, m.reject), "")
			return
		}
		c.dispatch(ctx, m.msg)
	case *outboundRequest:
		c.nextID++
		c.pending[c.nextID] = pendingRequest{replyTo: m.replyTo, tag: m.tag}
		c.send(protocol.EncodeRequest(c.nextID, m.method, m.params), m.sessionID)
	case *drain:
		c.startDrain(ctx)
	case *withdrawRequest:
		c.withdraw(m)
	case *shareStart:
		c.startShare(ctx, m)
	case *clusterpb.Relay:
		c.relayed(ctx, m)
	case *cancelTurns:
		for _, pid := range c.sessions {
			ctx.Send(pid, &cancelTurns{conn: ctx.Self(), requestID: m.requestID})
		}
	case *sessionIdle:
		delete(c.waitIdle, m.sessionID)
		c.finishDrain(ctx)
	case *retireRequest:
		c.retire(ctx, m)
	case *actor.Terminated:
		if c.stub != nil && m.Who.Equal(c.stub) {
			ctx.Stop(ctx.Self()) // a proxy whose stub went away (session_remote.go)
			return
		}
		// A session that stopped (closed, evicted, crashed) is forgotten.
		for id, pid := range c.sessions {
			if pid.Equal(m.Who) {
				delete(c.sessions, id)
				delete(c.sent, id)
			}
		}
		var gone []string
		for id, pid := range c.stopping {
			if pid.Equal(m.Who) {
				gone = append(gone, id)
			}
		}
		for _, id := range gone {
			c.stopped(ctx, id) // may respawn a session of that name
		}
	case *sessionLeft:
		// Its Terminated (a system message) may have come first.
		if pid, ok := c.sessions[m.id]; ok {
			if !pid.Equal(m.pid) {
				return // the session is here again already
			}
			delete(c.sessions, m.id)
			delete(c.sent, m.id)
			c.stopping[m.id] = pid
		}
		delete(c.known, m.id)
		delete(c.mcpServers, m.id)
		if c.moved == nil {
			c.moved = map[string]bool{}
		}
		c.moved[m.id] = true
	case *sessionMoved:
		// A close this connection sent reached a session that another
		// connection took over: it will not stop for us.
		if pid, ok := c.stopping[m.id]; ok && pid.Equal(m.pid) {
			c.stopped(ctx, m.id)
		}
	case *actor.DeadLetterResponse:
		// An attach reached a session that stopped meanwhile: start it anew.
		if a, ok := c.attaching[m.Target.Id]; ok {
			delete(c.attaching, m.Target.Id)
			c.openSession(ctx, a.id, a.kind, a.reqID, a.cwd, "", a.servers, a.dirs)
		}
	case *actor.Stopping:
		for _, pid := range c.sessions {
			ctx.Send(pid, &detach{conn: ctx.Self()})
		}
	}
}

func (c *connection) send(data []byte, sessionID string) {
	c.deps.Metrics.FramesOut.Add(1)
	c.out.Send(Frame{Data: data, SessionID: sessionID})
}

func (c *connection) reply(id protocol.RawMessage, result any) {
	c.send(protocol.EncodeResult(id, result), "")
}

func (c *connection) fail(id protocol.RawMessage, e *protocol.Error) {
	if id == nil {
		return // a notification gets no answer, not even an error
	}
	c.send(protocol.EncodeError(id, e), "")
}

func (c *connection) dispatch(ctx actor.Context, m *protocol.Message) {
	if m.IsResponse() {
		c.routeAnswer(ctx, m)
		return
	}
	method := protocol.CanonicalMethod(m.Method)
	if !c.initialized && method != protocol.MethodInitialize {
		c.fail(m.ID, protocol.NewError(protocol.CodeInvalidRequest,
			"ACP connection must be initialized before '"+m.Method+"'", nil))
		return
	}
	switch method {
	case protocol.MethodInitialize:
		c.initialize(m)
	case protocol.MethodAuthenticate:
		c.authenticate(m)
	case protocol.MethodLogout:
		c.logout(m)
	case protocol.MethodSessionNew:
		c.newSession(ctx, m)
	case protocol.MethodSessionLoad, protocol.MethodSessionResume, protocol.MethodSessionFork:
		c.reopenSession(ctx, m, method)
	case protocol.MethodSessionList:
		c.listSessions(ctx, m)
	case protocol.MethodSessionPrompt, protocol.MethodSessionCancel, protocol.MethodSessionClose,
		protocol.MethodSessionSetMode, protocol.MethodSessionSetConfig:
		c.toSession(ctx, m, method)
	case protocol.MethodSessionDelete:
		c.deleteSession(ctx, m)
	case protocol.MethodCancelRequest:
		c.cancelRequest(ctx, m)
	default:
		c.fail(m.ID, protocol.ErrMethodNotFound(m.Method))
	}
}

// cancelRequest handles $/cancel_request: a running session/prompt of this
// connection with that id ends cancelled (its own answer, per the spec);
// other requests are answered too fast to be worth aborting. The spec makes
// it a notification; sent with an id it is answered {} (as session/cancel
// is) so that no client request is left without an answer.
func (c *connection) cancelRequest(ctx actor.Context, m *protocol.Message) {
	var p struct {
		RequestID protocol.RawMessage `json:"requestId"`
	}
	_ = protocol.Unmarshal(m.Params, &p)
	target := protocol.CanonicalID(p.RequestID)
	if target == nil {
		c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"requestId": "requestId must be a number or a string"}))
		return
	}
	for _, pid := range c.sessions {
		ctx.Send(pid, &cancelTurns{conn: ctx.Self(), requestID: target})
	}
	if m.ID != nil {
		c.reply(m.ID, struct{}{})
	}
}

// full reports whether opening session id would exceed MaxSessions, and
// answers reqID with the limit error if so (a session already live here
// does not count twice).
func (c *connection) full(id string, reqID protocol.RawMessage) bool {
	if _, live := c.sessions[id]; live || len(c.sessions) < c.deps.Config.MaxSessions {
		return false
	}
	c.fail(reqID, protocol.ErrLimit(fmt.Sprintf(
		"Too many live sessions on this connection (limit %d); close some with session/close", c.deps.Config.MaxSessions),
		"too_many_sessions", c.deps.Config.MaxSessions))
	return true
}

func (c *connection) routeAnswer(ctx actor.Context, m *protocol.Message) {
	n, ok := protocol.IntID(m.ID)
	if !ok {
		c.log.Warn().RawJSON("id", m.ID).Msg("answer with an id we never used")
		return
	}
	p, ok := c.pending[n]
	if !ok {
		c.log.Warn().Int64("id", n).Msg("answer to an unknown or already answered request")
		return
	}
	delete(c.pending, n)
	ctx.Send(p.replyTo, &clientAnswer{tag: p.tag, result: m.Result, err: m.Error})
}

func (c *connection) initialize(m *protocol.Message) {
	var req protocol.InitializeRequest
	if len(m.Params) > 0 {
		if err := protocol.Unmarshal(m.Params, &req); err != nil {
			c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"error": err.Error()}))
			return
		}
	}
	c.initialized = true
	if caps := req.ClientCapabilities; caps != nil && caps.Session != nil {
		c.notices = caps.Session.Notices != nil
		c.compaction = caps.Session.Compaction != nil
		c.booleanOptions = caps.Session.ConfigOptions != nil && caps.Session.ConfigOptions.Boolean != nil
	}
	c.caps = capsOf(req.ClientCapabilities)
	c.terminalAuth = req.ClientCapabilities != nil && req.ClientCapabilities.Auth != nil && req.ClientCapabilities.Auth.Terminal
	c.reply(m.ID, protocol.InitializeResponse{
		ProtocolVersion: protocol.ProtocolVersion,
		AgentCapabilities: protocol.AgentCapabilities{
			LoadSession:        true,
			PromptCapabilities: protocol.PromptCapabilities{Image: true, EmbeddedContext: true},
			McpCapabilities:    &protocol.McpCapabilities{HTTP: true, SSE: true},
			SessionCapabilities: protocol.SessionCapabilities{
				List:   &protocol.Empty{},
				Close:  &protocol.Empty{},
				Resume: &protocol.Empty{},
				Fork:   &protocol.Empty{},
				Delete: &protocol.Empty{},

				AdditionalDirectories: &protocol.Empty{},
			},
			Auth: &protocol.AgentAuthCapabilities{Logout: &protocol.Empty{}},
		},
		AgentInfo:   protocol.Implementation{Name: "iac-code", Version: c.deps.Config.Version},
		AuthMethods: c.authMethods(),
		Meta:        map[string]any{sandbox.MetaKey: c.deps.Config.Sandbox.Meta()},
	})
}

// authenticate re-reads the configuration (environment and files), so a key
// set after the server started is picked up.
func (c *connection) authenticate(m *protocol.Message) {
	var req protocol.AuthenticateRequest
	if err := protocol.Unmarshal(m.Params, &req); err != nil || req.MethodID != authAPIKey {
		c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"methodId": "unknown authentication method"}))
		return
	}
	if c.deps.LLM != nil {
		if _, err := c.deps.LLM.Reload(); err != nil {
			c.log.Warn().Err(err).Msg("authenticate: configuration did not reload")
		}
	}
	if !c.deps.hasCredentials() {
		c.fail(m.ID, c.deps.errAuthRequired())
		return
	}
	c.reply(m.ID, struct{}{})
}

func (d *Deps) errAuthRequired() *protocol.Error {
	return protocol.NewError(protocol.CodeAuthRequired, "Authentication required",
		map[string]string{"code": "auth_required", "hint": d.authHint()})
}

func (d *Deps) authHint() string {
	if d.LLM != nil {
		return d.LLM.Config().AuthHint()
	}
	return llm.AuthHint
}

func (d *Deps) hasCredentials() bool {
	if d.LLM != nil {
		return d.LLM.Config().HasCredentials()
	}
	return d.Config.LLM.APIKey != ""
}

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
	c.openSession(ctx, uuid.NewString(), startNew, m.ID, cwd, "", servers, dirs)
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
}

// openSession spawns the session actor, which opens its store entry, starts
// its MCP servers and answers reqID. A session already live (on any
// connection) is attached to this one instead.
func (c *connection) openSession(ctx actor.Context, id string, kind startKind, reqID protocol.RawMessage, cwd, forkSrc string,
	servers []protocol.McpServerConfig, dirs []string) {
	notices := c.notices
	props := actor.PropsFromProducer(func() actor.Actor {
		s := newSession(c.deps, id, sessionWho{Identity: c.who, connID: c.id}, ctx.Self(), c.caps, kind, reqID, cwd, forkSrc, servers, notices)
		s.startDirs, s.compactionUpdates, s.booleanOptions = dirs, c.compaction, c.booleanOptions
		return s
	}, actor.WithSupervisor(reportAndStop{}), actor.WithGuardian(c.deps.sessionGuardian),
		actor.WithReceiverMiddleware(keepStack))
	name := sessionActorName(id)
	delete(c.moved, id)
	pid, err := ctx.ActorSystem().Root.SpawnNamed(props, name)
	if errors.Is(err, actor.ErrNameExists) {
		pid = actor.NewPID(ctx.ActorSystem().Address(), name)
		if c.attaching == nil {
			c.attaching = map[string]attachRequest{}
		}
		c.attaching[pid.Id] = attachRequest{id: id, kind: kind, reqID: reqID, cwd: cwd, servers: servers, dirs: dirs}
		ctx.Request(pid, &attach{kind: kind, reqID: reqID, cwd: cwd, conn: ctx.Self(), who: sessionWho{Identity: c.who, connID: c.id},
			servers: servers, notices: notices, caps: c.caps, dirs: dirs, compaction: c.compaction, booleanOptions: c.booleanOptions})
	} else if err != nil {
		c.log.Error().Err(err).Str("session", id).Msg("spawn session")
		c.fail(reqID, protocol.ErrInternal("could not start the session", newErrorID()))
		return
	}
	c.sessions[id] = pid
	c.sent[id] = 0
	c.known[id] = true
	c.mcpServers[id] = servers
	ctx.Watch(pid)
}

// sessionActorName is the actor name of session id in its process.
func sessionActorName(id string) string { return "session-" + id }

// deferIfStopping keeps m for later when session id is still stopping.
func (c *connection) deferIfStopping(id string, m *protocol.Message) bool {
	if _, ok := c.stopping[id]; !ok {
		return false
	}
	c.deferred[id] = append(c.deferred[id], m)
	return true
}

// stopped: the session's actor is gone; what waited for it runs now, in order.
func (c *connection) stopped(ctx actor.Context, id string) {
	delete(c.stopping, id)
	waiting := c.deferred[id]
	delete(c.deferred, id)
	for _, m := range waiting {
		c.dispatch(ctx, m)
	}
}

// reopenSession handles session/load, session/resume and session/fork.
func (c *connection) reopenSession(ctx actor.Context, m *protocol.Message, method string) {
	var ref protocol.SessionRef
	if err := protocol.Unmarshal(m.Params, &ref); err != nil || ref.SessionID == "" {
		c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"sessionId": "sessionId is required"}))
		return
	}
	if method != protocol.MethodSessionFork && c.deferIfStopping(ref.SessionID, m) {
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
	if !c.owns(ref.SessionID) {
		c.fail(m.ID, protocol.ErrSessionNotFound(ref.SessionID))
		return
	}
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
		c.openSession(ctx, uuid.NewString(), startFork, m.ID, ref.Cwd, ref.SessionID, servers, dirs)
	case protocol.MethodSessionLoad:
		c.openSession(ctx, ref.SessionID, startLoad, m.ID, ref.Cwd, "", servers, dirs)
	default:
		c.openSession(ctx, ref.SessionID, startResume, m.ID, ref.Cwd, "", servers, dirs)
	}
}

// listSessions reads the store off the actor's goroutine; the answer is
// independent of every other frame, so it may overtake them.
func (c *connection) listSessions(ctx actor.Context, m *protocol.Message) {
	var req protocol.ListSessionsRequest
	if len(m.Params) > 0 {
		if err := protocol.Unmarshal(m.Params, &req); err != nil {
			c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"error": err.Error()}))
			return
		}
	}
	self, root, st, id, log, owner := ctx.Self(), ctx.ActorSystem().Root, c.deps.Store, m.ID, c.log, c.who.Principal
	active := c.deps.active
	go func() {
		metas, next, err := st.ListOwned(owner, req.Cwd, req.Cursor, 50)
		var frame []byte
		switch {
		case errors.Is(err, store.ErrInvalidCursor):
			frame = protocol.EncodeError(id, protocol.ErrInvalidParams(map[string]string{"cursor": "invalid cursor"}))
		case err != nil:
			errorID := newErrorID()
			log.Error().Err(err).Str("error_id", errorID).Msg("list sessions")
			frame = protocol.EncodeError(id, protocol.ErrInternal("cannot list sessions", errorID))
		default:
			res := protocol.ListSessionsResponse{Sessions: make([]protocol.SessionInfo, 0, len(metas)), NextCursor: next}
			for _, meta := range metas {
				info := protocol.SessionInfo{SessionID: meta.ID, Cwd: meta.Cwd,
					AdditionalDirectories: meta.AdditionalDirectories,
					Title:                 meta.Title, UpdatedAt: meta.UpdatedAt.UTC().Format(time.RFC3339)}
				if t := active.of(meta); t != nil {
					info.Meta = map[string]any{activeTurnKey: t}
				}
				res.Sessions = append(res.Sessions, info)
			}
			frame = protocol.EncodeResult(id, res)
		}
		root.Send(self, &outbound{frame: Frame{Data: frame}})
	}()
}

// toSession forwards a session-scoped request to its session actor,
// bringing an evicted session of this connection back from disk first.
func (c *connection) toSession(ctx actor.Context, m *protocol.Message, method string) {
	var ref protocol.SessionIDParams
	if err := protocol.Unmarshal(m.Params, &ref); err != nil || ref.SessionID == "" {
		c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"sessionId": "sessionId is required"}))
		return
	}
	if c.deferIfStopping(ref.SessionID, m) {
		return
	}
	if c.moved[ref.SessionID] {
		c.fail(m.ID, errSessionMoved())
		return
	}
	pid, ok := c.sessions[ref.SessionID]
	if !ok && c.known[ref.SessionID] {
		if c.full(ref.SessionID, m.ID) {
			return
		}
		c.openSession(ctx, ref.SessionID, startRestore, nil, "", "", c.mcpServers[ref.SessionID], nil)
		pid, ok = c.sessions[ref.SessionID]
	}
	if !ok {
		c.fail(m.ID, protocol.ErrSessionNotFound(ref.SessionID))
		return
	}
	if method == protocol.MethodSessionClose {
		// Later requests must already see the session as gone, and wait
		// until it is (see stopping).
		delete(c.sessions, ref.SessionID)
		delete(c.known, ref.SessionID)
		delete(c.mcpServers, ref.SessionID)
		c.stopping[ref.SessionID] = pid
	}
	c.sent[ref.SessionID]++
	ctx.Send(pid, &sessionRequest{id: m.ID, method: method, params: m.Params, conn: ctx.Self()})
}

// retire forgets a session that wants to stop (idle, or failed to open), but
// only when no request is on its way to it.
func (c *connection) retire(ctx actor.Context, m *retireRequest) {
	pid, ok := c.sessions[m.id]
	mine := ok && pid.Equal(m.pid)
	agree := !mine || m.force || c.sent[m.id] == m.seen
	if mine && agree {
		delete(c.sessions, m.id)
		delete(c.sent, m.id)
		if m.force {
			delete(c.known, m.id)
			delete(c.mcpServers, m.id)
		}
		c.stopping[m.id] = pid
	}
	ctx.Send(m.pid, &retireAnswer{ok: agree})
}

func (c *connection) startDrain(ctx actor.Context) {
	c.drainer = ctx.Sender()
	c.waitIdle = make(map[string]bool, len(c.sessions))
	for id, pid := range c.sessions {
		c.waitIdle[id] = true
		ctx.Send(pid, &drain{from: ctx.Self()})
	}
	c.finishDrain(ctx)
}

func (c *connection) finishDrain(ctx actor.Context) {
	if c.drainer == nil || len(c.waitIdle) > 0 {
		return
	}
	ctx.Send(c.drainer, &drained{})
	c.drainer = nil
}
