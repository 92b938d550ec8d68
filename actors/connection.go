package actors

import (
	"os"
	"path/filepath"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
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
	// as a *clientAnswer carrying tag.
	outboundRequest struct {
		sessionID string
		method    string
		params    any
		replyTo   *actor.PID
		tag       any
	}
	// clientAnswer is the client's answer to an outboundRequest.
	clientAnswer struct {
		tag    any
		result protocol.RawMessage
		err    *protocol.Error
	}
	// drain cancels every running turn and is answered once all are answered.
	drain       struct{}
	drained     struct{}
	sessionIdle struct{ sessionID string }
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
	deps        *Deps
	id          string
	out         Outlet
	log         zerolog.Logger
	initialized bool
	sessions    map[string]*actor.PID
	pending     map[int64]pendingRequest
	nextID      int64
	// drainer is the future waiting for drain; waitIdle counts sessions
	// that still run a turn.
	drainer  *actor.PID
	waitIdle map[string]bool
}

func newConnection(deps *Deps, id string, out Outlet) *connection {
	return &connection{
		deps:     deps,
		id:       id,
		out:      out,
		log:      deps.Log.With().Str("conn", id).Logger(),
		sessions: map[string]*actor.PID{},
		pending:  map[int64]pendingRequest{},
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
	case *sessionIdle:
		delete(c.waitIdle, m.sessionID)
		c.finishDrain(ctx)
	case *actor.Stopping:
		for _, pid := range c.sessions {
			ctx.Stop(pid)
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
	case protocol.MethodSessionNew:
		c.newSession(ctx, m)
	case protocol.MethodSessionPrompt, protocol.MethodSessionCancel, protocol.MethodSessionClose,
		protocol.MethodSessionSetMode, protocol.MethodSessionSetConfig:
		c.toSession(ctx, m, method)
	case protocol.MethodCancelRequest:
		// Our requests are answered by the client; nothing of ours is cancellable this way yet.
	default:
		c.fail(m.ID, protocol.ErrMethodNotFound(m.Method))
	}
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
	authMethods := []protocol.AuthMethod{}
	if !c.deps.hasCredentials() {
		authMethods = append(authMethods, protocol.AuthMethod{
			ID: "api-key", Name: "API key", Description: llm.AuthHint,
		})
	}
	c.reply(m.ID, protocol.InitializeResponse{
		ProtocolVersion: protocol.ProtocolVersion,
		AgentCapabilities: protocol.AgentCapabilities{
			LoadSession:        true,
			PromptCapabilities: protocol.PromptCapabilities{EmbeddedContext: true},
			SessionCapabilities: protocol.SessionCapabilities{
				List:  &protocol.Empty{},
				Close: &protocol.Empty{},
			},
		},
		AgentInfo:   protocol.Implementation{Name: "iac-code", Version: c.deps.Config.Version},
		AuthMethods: authMethods,
	})
}

func (c *connection) authenticate(m *protocol.Message) {
	if !c.deps.hasCredentials() {
		c.fail(m.ID, errAuthRequired())
		return
	}
	c.reply(m.ID, struct{}{})
}

func errAuthRequired() *protocol.Error {
	return protocol.NewError(protocol.CodeAuthRequired, "Authentication required",
		map[string]string{"code": "auth_required", "hint": llm.AuthHint})
}

func (d *Deps) hasCredentials() bool { return d.Config.LLM.APIKey != "" }

func (c *connection) newSession(ctx actor.Context, m *protocol.Message) {
	var req protocol.NewSessionRequest
	if err := protocol.Unmarshal(m.Params, &req); err != nil {
		c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"error": err.Error()}))
		return
	}
	if bad := checkCwd(req.Cwd); bad != "" {
		c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"cwd": bad}))
		return
	}
	id := uuid.NewString()
	pid := c.spawnSession(ctx, id, req.Cwd)
	if pid == nil {
		c.fail(m.ID, protocol.ErrInternal("could not start the session", newErrorID()))
		return
	}
	c.reply(m.ID, newSessionResponse(id, c.deps))
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

func (c *connection) spawnSession(ctx actor.Context, id, cwd string) *actor.PID {
	props := actor.PropsFromProducer(func() actor.Actor {
		return newSession(c.deps, id, cwd, ctx.Self())
	}, actor.WithSupervisor(reportAndStop{}))
	pid, err := ctx.ActorSystem().Root.SpawnNamed(props, "session-"+id)
	if err != nil {
		c.log.Error().Err(err).Str("session", id).Msg("spawn session")
		return nil
	}
	c.sessions[id] = pid
	return pid
}

// toSession forwards a session-scoped request to its session actor.
func (c *connection) toSession(ctx actor.Context, m *protocol.Message, method string) {
	var ref protocol.SessionIDParams
	if err := protocol.Unmarshal(m.Params, &ref); err != nil || ref.SessionID == "" {
		c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"sessionId": "sessionId is required"}))
		return
	}
	pid, ok := c.sessions[ref.SessionID]
	if !ok {
		c.fail(m.ID, protocol.ErrSessionNotFound())
		return
	}
	if method == protocol.MethodSessionClose {
		// Later requests must already see the session as gone.
		delete(c.sessions, ref.SessionID)
	}
	ctx.Send(pid, &sessionRequest{id: m.ID, method: method, params: m.Params})
}

func (c *connection) startDrain(ctx actor.Context) {
	c.drainer = ctx.Sender()
	c.waitIdle = make(map[string]bool, len(c.sessions))
	for id, pid := range c.sessions {
		c.waitIdle[id] = true
		ctx.Send(pid, &drain{})
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
