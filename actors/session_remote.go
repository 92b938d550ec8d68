package actors

import (
	"errors"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
)

// One session, clients on several pods (cluster mode, share). A load or
// resume on pod B of a session pod A holds does not take the session over:
// B's session actor becomes a stub, and A attaches a proxy connection to
// its live session for it (Handover.Share, Server.ServeShare). The proxy is
// an ordinary connection actor whose outlet sends every frame to the stub
// (clusterpb.Relay); the stub relays the requests of its one local
// connection to the proxy, and the proxy's frames to that connection:
// updates and answers as they are, agent→client requests through the
// connection's own request ids (remoteTag carries the proxy's), and the
// proxy's $/cancel_request as a withdrawRequest. Stub and proxy watch each
// other, so that either pod's death ends the other side; the stub's local
// connection then opens the session anew at its next request.
//
// Limits: a stub serves one connection of its pod (another one loading the
// session there is refused); a connection's drain does not wait for its
// prompts on the other pod; the sharing lasts while pod A holds the
// session's lease.

type (
	// shareStart makes a connection actor the proxy of stub (ServeShare).
	shareStart struct {
		stub       *actor.PID
		init, open *protocol.Message
	}
	// remoteTag tags a request of the proxy that the stub's connection
	// asks its client: the proxy's id is answered as sent; key matches it (protocol.IDKey), as a
	// $/cancel_request of the proxy does.
	remoteTag struct{ id, key string }
)

// shareInitID is the id of the proxy's initialize; its answer is dropped.
var shareInitID = protocol.RawMessage(`"iac-code-share"`)

// shareCancelTurns, from a stub to its proxy, cancels the proxy's turns
// (the stub's connection got cancelTurns without a request id).
const shareCancelTurns = "$/iac-code/cancel_turns"

// relayOutlet writes a proxy connection's frames to its stub.
type relayOutlet struct {
	root *actor.RootContext
	stub *actor.PID
}

func (o relayOutlet) Send(f Frame) { o.root.Send(o.stub, &clusterpb.Relay{Body: f.Data}) }

// ServeShare makes a proxy connection for stub, a session actor of another
// pod, sends it init and open (see Handover.Share) and returns it.
func (s *Server) ServeShare(sessionID, principal string, stub *actor.PID, init, open []byte) (*actor.PID, error) {
	im, e := protocol.Decode(init)
	if e != nil {
		return nil, errors.New("share: bad initialize: " + e.Message)
	}
	om, e := protocol.Decode(open)
	if e != nil {
		return nil, errors.New("share: bad open request: " + e.Message)
	}
	// The proxy is the stub's principal: the load is checked against the
	// session's owner as any other (connection.owns).
	conn := s.ConnectAs("share-"+uuid.NewString(), Identity{Principal: principal, Remote: "pod " + stub.Address},
		relayOutlet{root: s.sys.Root, stub: stub})
	s.sys.Root.Send(conn.pid, &shareStart{stub: stub, init: im, open: om})
	s.deps.Log.Info().Str("session", sessionID).Str("stub", stub.Address).Msg("session shared with a connection of another pod")
	return conn.pid, nil
}

// startShare (connection side): this connection is the proxy of a stub.
func (c *connection) startShare(ctx actor.Context, m *shareStart) {
	c.stub = m.stub
	ctx.Watch(m.stub)
	c.dispatch(ctx, m.init)
	c.dispatch(ctx, m.open)
}

// relayed (connection side): a message of the stub's client.
func (c *connection) relayed(ctx actor.Context, m *clusterpb.Relay) {
	msg, e := protocol.Decode(m.Body)
	if e != nil {
		c.log.Warn().Str("error", e.Message).Msg("share: undecodable relayed message")
		return
	}
	if msg.Method == shareCancelTurns && msg.ID == nil {
		ctx.Send(ctx.Self(), &cancelTurns{})
		return
	}
	c.dispatch(ctx, msg)
}

// shareCall is a Handover.Share a load or resume of a session another pod
// holds may make (share mode): prepared on the actor (shareRequest), made
// off it once the store said who holds the session (share).
type shareCall struct {
	handover  Handover
	id        string
	principal string
	stub      *actor.PID
	init      []byte
	open      []byte
}

// shareRequest prepares the Share of this session's load or resume, nil
// when the session would not be shared but taken over.
func (s *session) shareRequest(ctx actor.Context) *shareCall {
	if s.deps.Handover == nil || s.deps.Config.SessionAttach != AttachShare || (s.start != startLoad && s.start != startResume) {
		return nil
	}
	c := s.clients.only()
	if c == nil {
		return nil
	}
	caps := protocol.ClientCapabilities{Terminal: c.caps.Terminal}
	if c.caps.ReadTextFile || c.caps.WriteTextFile {
		caps.FS = &protocol.FSCapabilities{ReadTextFile: c.caps.ReadTextFile, WriteTextFile: c.caps.WriteTextFile}
	}
	if c.caps.Elicitation {
		caps.Elicitation = &protocol.ElicitationCapabilities{Form: &protocol.Empty{}}
	}
	// The proxy's client is this one: what it shows (notices, compaction
	// updates, boolean options) is what the holding pod's session offers it.
	if c.notices || s.compactionUpdates || s.booleanOptions {
		caps.Session = &protocol.ClientSessionCapabilities{}
		if c.notices {
			caps.Session.Notices = &protocol.Empty{}
		}
		if s.compactionUpdates {
			caps.Session.Compaction = &protocol.Empty{}
		}
		if s.booleanOptions {
			caps.Session.ConfigOptions = &protocol.ConfigOptionsCapabilities{Boolean: &protocol.Empty{}}
		}
	}
	init := protocol.MustMarshal(&protocol.Message{JSONRPC: "2.0", ID: shareInitID, Method: protocol.MethodInitialize,
		Params: protocol.MustMarshal(protocol.InitializeRequest{ProtocolVersion: protocol.ProtocolVersion, ClientCapabilities: &caps})})
	return &shareCall{handover: s.deps.Handover, id: s.id, principal: c.who.Principal, stub: ctx.Self(), init: init,
		open: s.openRequest(s.start, s.startReq, s.startCwd, s.mcp.start, s.startDirs)}
}

// share asks the pod named by err, the store's refusal to open the
// session, to attach a proxy for the stub (a cross-pod call, seconds at
// worst: made off the actor, see startOpen), and returns the proxy, or nil
// when the session is to be taken over as before.
func (sc *shareCall) share(log zerolog.Logger, err error) *actor.PID {
	var inUse *store.InUseError
	if sc == nil || !errors.As(err, &inUse) || errors.Is(err, store.ErrFenced) || inUse.Owner == "" {
		return nil
	}
	proxy, serr := sc.handover.Share(sc.id, inUse.Owner, sc.principal, sc.stub, sc.init, sc.open)
	if serr != nil {
		log.Info().Err(serr).Str("holder", inUse.Owner).Msg("session not shared by its pod; taking it over")
		return nil
	}
	return proxy
}

// openRequest is the load or resume of this session a proxy is sent, with
// the client's additionalDirectories: the holding pod reads them omitted as
// none and would drop the session's own.
func (s *session) openRequest(kind startKind, id protocol.RawMessage, cwd string, servers []protocol.McpServerConfig, dirs []string) []byte {
	method := protocol.MethodSessionLoad
	if kind == startResume {
		method = protocol.MethodSessionResume
	}
	if servers == nil {
		servers = []protocol.McpServerConfig{}
	}
	params := map[string]any{"sessionId": s.id, "cwd": cwd, "mcpServers": servers}
	if len(dirs) > 0 {
		params["additionalDirectories"] = dirs
	}
	return protocol.MustMarshal(&protocol.Message{JSONRPC: "2.0", ID: id, Method: method, Params: protocol.MustMarshal(params)})
}

// relay sends one JSON-RPC message to the proxy.
func (s *session) relay(ctx actor.Context, m *protocol.Message) {
	m.JSONRPC = "2.0"
	ctx.Send(s.remote, &clusterpb.Relay{Body: protocol.MustMarshal(m)})
}

// receiveRemote is the stub's behaviour.
// endStubForDelete ends the stub for a session/delete on this pod: its
// client (unless it is the deleting one) is told, and the stub stops (its
// proxy on the holding pod with it). The deleting connection then deletes
// from the store, which answers -32010 while the other pod holds the
// session.
func (s *session) endStubForDelete(ctx actor.Context, tell *client) {
	if tell != nil {
		s.emitTo(ctx, tell.pid, deletedNotice())
	}
	ctx.Stop(ctx.Self())
}

func (s *session) receiveRemote(ctx actor.Context, msg any) {
	client := s.clients.only()
	switch m := msg.(type) {
	case *clusterpb.Relay:
		if client != nil {
			s.fromProxy(ctx, client.pid, m.Body)
		}
	case *deleteLive:
		s.endStubForDelete(ctx, client)
	case *sessionRequest:
		if client == nil || !client.pid.Equal(m.conn) {
			s.respondTo(ctx, m.conn, m.id, nil, errSessionMoved())
			ctx.Send(m.conn, &sessionMoved{id: s.id, pid: ctx.Self()})
			return
		}
		if m.method == protocol.MethodSessionDelete {
			s.endStubForDelete(ctx, nil)
			return
		}
		client.seen++
		if m.method == protocol.MethodSessionClose {
			s.phase.closeID = m.id
		}
		s.relay(ctx, &protocol.Message{ID: m.id, Method: m.method, Params: m.params})
	case *clientAnswer:
		tag, ok := m.tag.(remoteTag)
		if !ok {
			return
		}
		answer := &protocol.Message{ID: protocol.RawMessage(tag.id), Result: m.result, Error: m.err}
		if m.err == nil && len(m.result) == 0 {
			answer.Result = protocol.RawMessage("null")
		}
		s.relay(ctx, answer)
	case *attach:
		if client == nil || !client.pid.Equal(m.conn) {
			s.respondTo(ctx, m.conn, m.reqID, nil, protocol.ErrInvalidParams(map[string]string{
				"session_id": "Session is shared from another server with another connection of this one; load it on that connection"}))
			return
		}
		if m.reqID != nil {
			open, _ := protocol.Decode(s.openRequest(m.kind, m.reqID, m.cwd, m.servers, m.dirs))
			s.relay(ctx, open)
		}
	case *cancelTurns:
		if client == nil || !client.pid.Equal(m.conn) {
			return // the ids and turns of another connection are not the proxy's
		}
		if m.requestID != nil {
			s.relay(ctx, &protocol.Message{Method: protocol.MethodCancelRequest,
				Params: protocol.MustMarshal(map[string]protocol.RawMessage{"requestId": m.requestID})})
			return
		}
		// Every turn of the connection (Conn.CancelTurns: its client can no
		// longer receive): the proxy's on the holding pod, not the turns of
		// that pod's clients a session/cancel would end too.
		s.relay(ctx, &protocol.Message{Method: shareCancelTurns})
	case *drain:
		ctx.Send(m.from, &sessionIdle{sessionID: s.id})
	case *detach:
		if client != nil && client.pid.Equal(m.conn) {
			ctx.Stop(ctx.Self()) // the proxy, watching, stops too
		}
	case *actor.Terminated:
		if m.Who.Equal(s.remote) {
			s.log.Info().Msg("the proxy of a shared session is gone")
			ctx.Stop(ctx.Self())
		}
	case *actor.Stopped:
		s.deps.Metrics.Sessions.Add(-1)
	}
}

// fromProxy passes one frame of the proxy to the stub's connection.
func (s *session) fromProxy(ctx actor.Context, conn *actor.PID, body []byte) {
	msg, e := protocol.Decode(body)
	if e != nil {
		s.log.Warn().Str("error", e.Message).Msg("share: undecodable frame of the proxy")
		return
	}
	switch {
	case msg.IsResponse():
		id := protocol.IDKey(msg.ID)
		if id == protocol.IDKey(shareInitID) {
			return
		}
		ctx.Send(conn, &outbound{frame: Frame{Data: body, SessionID: s.id}})
		if s.phase.closeID != nil && id == protocol.IDKey(s.phase.closeID) {
			ctx.Stop(ctx.Self()) // closed: the connection waits for this actor to stop
		}
	case msg.Method == protocol.MethodCancelRequest:
		var p struct {
			RequestID protocol.RawMessage `json:"requestId"`
		}
		_ = protocol.Unmarshal(msg.Params, &p)
		withdraw(ctx, conn, remoteTag{key: protocol.IDKey(p.RequestID)})
	case msg.IsRequest():
		ctx.Send(conn, &outboundRequest{sessionID: s.id, method: msg.Method, params: msg.Params, replyTo: ctx.Self(),
			tag: remoteTag{id: string(msg.ID), key: protocol.IDKey(msg.ID)}})
	default:
		ctx.Send(conn, &outbound{frame: Frame{Data: body, SessionID: s.id}})
	}
}
