package actors

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
)

// One session, clients on several pods (cluster mode, share). A load or
// resume on pod B of a session pod A holds does not take the session over:
// B's session actor becomes a stub (session_stub.go), and A attaches a
// proxy connection to its live session for each connection of B that loads
// it (Handover.Share, Server.ServeShare). A proxy is an ordinary connection
// actor whose outlet sends every frame to its leg of the stub
// (clusterpb.Relay); the stub relays the requests of each local connection
// to its proxy, and the proxy's frames to that connection: updates and
// answers as they are, agent→client requests through the connection's own
// request ids (remoteTag carries the proxy's), and the proxy's
// $/cancel_request as a withdrawRequest. Stub and proxies watch each other,
// so that either pod's death ends the other side; a pod shutting down ends
// its shares first (EndShares). The stub answers what its connections wait
// for, and they open the session anew at their next request.
//
// Limits: a connection's drain does not wait for its prompts on the other
// pod; the sharing lasts while pod A holds the session's lease.

type (
	// shareStart makes a connection actor the proxy of stub (ServeShare);
	// conn is the id of the stub's connection ("" when its pod did not say).
	shareStart struct {
		stub       *actor.PID
		conn       string
		init, open *protocol.Message
	}
	// proxiedStub is the stub a proxy connection serves (connection.stub):
	// leg is the stub's leg actor its frames go to; conn the id of the
	// stub's connection on its pod, whose client this proxy serves (""
	// when that pod did not say: an older version); drains: that pod
	// drains, and its client may go with it: the proxy's turns then go
	// on (session_pause_stub.go).
	proxiedStub struct {
		leg    *actor.PID
		conn   string
		drains bool
	}
	// remoteTag tags a request of the proxy that the stub's connection
	// asks its client: the proxy's id is answered as sent; key matches it (protocol.IDKey), as a
	// $/cancel_request of the proxy does.
	// leg is the stub's leg of that proxy (session_stub.go).
	remoteTag struct {
		leg     *actor.PID
		id, key string
	}
)

// proxyConnPrefix begins the id of every proxy connection.
const proxyConnPrefix = "share-"

// shareInitID is the id of the proxy's initialize; its answer is dropped.
// A client may use that id too (clients may send any id): the proxy
// answers its initialize before anything else it was sent (startShare
// dispatches it first, and a connection answers it at once, writing its
// frames to the leg in order), so only the first answer of a leg's proxy
// is the initialize's (stubLeg.initAwaited), even when the client's own
// load sent with it has the same id.
var shareInitID = protocol.RawMessage(`"iac-code-share"`)

// shareCancelTurns, from a stub to its proxy, cancels the proxy's turns
// (the stub's connection got cancelTurns without a request id).
const shareCancelTurns = "$/iac-code/cancel_turns"

// shareEnd, from a proxy to its stub, says the holding pod ends the
// sharing (it is shutting down, Server.EndShares).
const shareEnd = "$/iac-code/share_end"

// endShare tells a proxy connection that its pod ends the sharing.
type endShare struct{}

// draining: p's pod drains (false for a connection that is no proxy).
func (p *proxiedStub) draining() bool { return p != nil && p.drains }

// relayOutlet writes a proxy connection's frames to its stub.
type relayOutlet struct {
	root *actor.RootContext
	stub *actor.PID
}

func (o relayOutlet) Send(f Frame) { o.root.Send(o.stub, &clusterpb.Relay{Body: f.Data}) }

// ServeShare makes a proxy connection for stub, a session actor of another
// pod, sends it init and open (see Handover.Share) and returns it. conn is
// the id of the stub's connection, whose client the proxy serves.
func (s *Server) ServeShare(sessionID, principal, conn string, stub *actor.PID, init, open []byte) (*actor.PID, error) {
	if s.deps.shares.ended.Load() {
		return nil, errors.New("share: this pod is shutting down")
	}
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
	proxy := s.ConnectAs(proxyConnPrefix+uuid.NewString(), Identity{Principal: principal, Remote: "pod " + stub.Address},
		relayOutlet{root: s.sys.Root, stub: stub})
	s.deps.shares.proxies.Store(proxy.pid.Id, proxy.pid)
	s.sys.Root.Send(proxy.pid, &shareStart{stub: stub, conn: conn, init: im, open: om})
	s.deps.Log.Info().Str("session", sessionID).Str("stub", stub.Address).Msg("session shared with a connection of another pod")
	return proxy.pid, nil
}

// EndShares ends the sharing of every session this pod holds with the
// clients of other pods (shutdown): each proxy tells its stub, which
// answers what its clients wait for at once, and stops; Share is refused
// from now on. It waits until the proxies stopped, at most timeout.
func (s *Server) EndShares(timeout time.Duration) {
	s.deps.shares.ended.Store(true)
	s.deps.shares.proxies.Range(func(_, pid any) bool {
		s.sys.Root.Send(pid.(*actor.PID), &endShare{})
		return true
	})
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		left := false
		s.deps.shares.proxies.Range(func(any, any) bool { left = true; return false })
		if !left {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shareRegistry is what EndShares needs: the proxy connections of this
// pod by actor id, and whether the sharing ended; draining: PauseTurns
// ran, this pod's clients may go with it (session_pause_stub.go).
type shareRegistry struct {
	proxies  sync.Map
	ended    atomic.Bool
	draining atomic.Bool
}

// endShare (connection side): the proxy tells its stub, then stops (its
// sessions see it detach, its turns end).
func (c *connection) endShare(ctx actor.Context) {
	c.out.Send(Frame{Data: protocol.EncodeNotification(shareEnd, map[string]string{"reason": stubHolderGone})})
	ctx.Stop(ctx.Self())
}

// startShare (connection side): this connection is the proxy of a stub.
func (c *connection) startShare(ctx actor.Context, m *shareStart) {
	c.stub = &proxiedStub{leg: m.stub, conn: m.conn}
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
	msg.Traceparent = m.Traceparent
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
	conn      string
	// stub is the leg actor the proxy writes to; holder the incarnation
	// that shared the session.
	stub   *actor.PID
	init   []byte
	open   []byte
	holder string
}

// shareRequest prepares the Share of this session's load or resume, nil
// when the session would not be shared but taken over. The proxy writes to
// a leg actor of this one (session_stub.go).
func (s *session) shareRequest(ctx actor.Context) *shareCall {
	if s.deps.Handover == nil || s.deps.Config.SessionAttach != AttachShare || (s.start != startLoad && s.start != startResume) {
		return nil
	}
	c := s.clients.only()
	if c == nil {
		return nil
	}
	return &shareCall{handover: s.deps.Handover, id: s.id, principal: c.who.Principal, conn: c.who.client, stub: ctx.Spawn(legProps),
		init: shareInit(c.caps, c.notices, s.compactionUpdates, s.booleanOptions),
		open: s.openRequest(s.start, s.startReq, s.startCwd, s.mcp.start, s.startDirs)}
}

// shareInit is the initialize a proxy is sent: the proxy's client is the
// stub's, and what it shows (notices, compaction updates, boolean options)
// is what the holding pod's session offers it.
func shareInit(tc tools.ClientCaps, notices, compaction, booleanOptions bool) []byte {
	caps := protocol.ClientCapabilities{Terminal: tc.Terminal}
	if tc.ReadTextFile || tc.WriteTextFile {
		caps.FS = &protocol.FSCapabilities{ReadTextFile: tc.ReadTextFile, WriteTextFile: tc.WriteTextFile}
	}
	if tc.Elicitation {
		caps.Elicitation = &protocol.ElicitationCapabilities{Form: &protocol.Empty{}}
	}
	if notices || compaction || booleanOptions {
		caps.Session = &protocol.ClientSessionCapabilities{}
		if notices {
			caps.Session.Notices = &protocol.Empty{}
		}
		if compaction {
			caps.Session.Compaction = &protocol.Empty{}
		}
		if booleanOptions {
			caps.Session.ConfigOptions = &protocol.ConfigOptionsCapabilities{Boolean: &protocol.Empty{}}
		}
	}
	return protocol.MustMarshal(&protocol.Message{JSONRPC: "2.0", ID: shareInitID, Method: protocol.MethodInitialize,
		Params: protocol.MustMarshal(protocol.InitializeRequest{ProtocolVersion: protocol.ProtocolVersion, ClientCapabilities: &caps})})
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
	proxy, serr := sc.handover.Share(sc.id, inUse.Owner, sc.principal, sc.conn, sc.stub, sc.init, sc.open)
	if serr != nil {
		log.Info().Err(serr).Str("holder", inUse.Owner).Msg("session not shared by its pod; taking it over")
		return nil
	}
	sc.holder = inUse.Owner
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
