package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
)

// The stub: a session actor of this pod serving its connections a session
// another pod holds (the sharing itself is told in session_remote.go).
// Every connection of this pod attached to the stub has a leg: a small
// child actor that the holding pod's proxy for that connection writes to.
// One proxy per connection makes each of them an ordinary client of the
// holding session: it gets its own replay and answers, every update, and
// the permission requests, the first answer winning there.
//
// A leg remembers the requests it relayed that are not answered yet. When
// the session leaves its holding pod (handed over, paused for another pod
// to adopt) or that pod dies, each leg follows it to its next holder
// (session_follow.go). When the holding pod ends the sharing (its
// shutdown, Server.EndShares), or no pod takes the session within
// followTimeout, the stub stops and answers each of them: a prompt
// cancelled, a close done, anything else -32010 naming the cause. Its
// connections open the session anew at their next request.

type (
	sessionStub struct {
		// holder is the incarnation holding the session (Share's owner),
		// the one its legs follow it to next (session_follow.go).
		holder string
		legs   []*stubLeg
		// follow: the search for the next holder (session_follow.go).
		follow stubFollow
		// ending is why the stub stops (see answerUnanswered).
		ending string
		// take: the stub takes the session to adopt it
		// (session_stub_adopt.go).
		take *stubTake
	}
	// stubLeg is one connection of this pod served through its proxy.
	stubLeg struct {
		conn *actor.PID
		who  sessionWho
		// state says whether its proxy serves it, with what only that
		// state has (legState): the former proxies it follows the session
		// away from, a follow's answer come early.
		state legState
		// pid is the leg actor the proxy writes to; proxy is nil while its
		// Share is under way. Until the leg is attached the messages for
		// it wait in waiting.
		pid     *actor.PID
		proxy   *actor.PID
		waiting []relayed
		// pending are the requests relayed and not answered, by IDKey.
		pending map[string]*relayedRequest
		closeID protocol.RawMessage
		// moving: the leg's connection moves to another pod and its proxy
		// was repointed; answered when the proxy's last frame comes
		// (connection_move.go). answered: a leg of a moved connection
		// until its restore, the answers it passed on.
		moving   *actor.PID
		answered map[string]bool
		// outAsked are the moves of the leg's connection waiting for it
		// to rejoin the session's next holder (legOut).
		outAsked []*actor.PID
		// seq numbers the messages relayed, in order; share is what asks a
		// holder for a proxy: the proxy's initialize and the leg's open.
		seq   uint64
		share legShare
		// initAwaited: the proxy of the leg's last Share (on its actor of
		// now) has answered nothing yet. Its first answer is to the
		// initialize that Share sent it (shareInitID), and only that one
		// is the stub's (fromProxy).
		initAwaited bool
	}
	// relayed is a message of the leg's connection, numbered in order.
	relayed struct {
		seq uint64
		msg *protocol.Message
	}
	relayedRequest struct {
		relayed
		id     protocol.RawMessage
		method string
		// sent: it reached a proxy; bounced: that proxy answered that the
		// session had left (session_follow.go).
		sent, bounced bool
	}
	// legShare is what a leg's Share sends the holding pod: the
	// initialize of its client, and its load or resume; caps and notices
	// are that client's, as it attaches where the stub takes the session
	// (session_stub_adopt.go).
	legShare struct {
		init    []byte
		cwd     string
		servers []protocol.McpServerConfig
		dirs    []string
		caps    tools.ClientCaps
		notices bool
	}
	// legFrame is a frame of the proxy of leg, passed on by the leg actor.
	legFrame struct {
		leg  *actor.PID
		body []byte
	}
	// legShared is the result of the Share made for a leg off the actor.
	legShared struct {
		leg, proxy *actor.PID
		err        error
	}
)

func (*legFrame) IgnoreDeadLetterLogging()  {}
func (*legShared) IgnoreDeadLetterLogging() {}

// Why a stub ends (sessionStub.ending).
const (
	stubHolderGone = "session_holder_gone"
	stubDeleted    = "deleted"
)

// legActor passes the relayed frames of its proxy to its stub.
type legActor struct{}

func (legActor) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*clusterpb.Relay); ok {
		ctx.Send(ctx.Parent(), &legFrame{leg: ctx.Self(), body: m.Body})
	}
}

var legProps = actor.PropsFromProducer(func() actor.Actor { return legActor{} })

func (st *sessionStub) legOf(conn *actor.PID) *stubLeg {
	for _, l := range st.legs {
		if conn != nil && l.conn.Equal(conn) {
			return l
		}
	}
	return nil
}

func (st *sessionStub) legAt(pid *actor.PID) *stubLeg {
	for _, l := range st.legs {
		if l.pid.Equal(pid) {
			return l
		}
	}
	return nil
}

func (st *sessionStub) legOfProxy(pid *actor.PID) *stubLeg {
	for _, l := range st.legs {
		if l.proxy != nil && l.proxy.Equal(pid) {
			return l
		}
	}
	return nil
}

// becomeStub makes this session the stub of the session holder holds, its
// one client served through proxy, whose frames come to leg.
func (s *session) becomeStub(ctx actor.Context, sc *shareCall, proxy *actor.PID) {
	c := s.clients.only()
	l := &stubLeg{conn: c.pid, who: c.who, state: legState{kind: legAttached}, pid: sc.stub, proxy: proxy, pending: map[string]*relayedRequest{},
		initAwaited: true, share: legShare{init: sc.init, cwd: s.startCwd, servers: s.mcp.start, dirs: s.startDirs, caps: c.caps, notices: c.notices}}
	l.expectStart(s.startReq, startMethod(s.start), s.openRequest(s.start, s.startReq, s.startCwd, s.mcp.start, s.startDirs))
	s.stub = &sessionStub{holder: sc.holder, legs: []*stubLeg{l}}
	ctx.Watch(proxy)
	s.become(phase{kind: phaseStub})
}

// expect notes a request m relayed.
func (l *stubLeg) expect(id protocol.RawMessage, method string, m *protocol.Message) {
	if id != nil {
		l.seq++
		l.pending[protocol.IDKey(id)] = &relayedRequest{relayed: relayed{seq: l.seq, msg: m}, id: id, method: method}
	}
}

// expectStart notes the leg's own load or resume, open, which its Share
// sends.
func (l *stubLeg) expectStart(id protocol.RawMessage, method string, open []byte) {
	m, _ := protocol.Decode(open)
	l.expect(id, method, m)
	if r := l.pending[protocol.IDKey(id)]; r != nil {
		r.sent = true
	}
}

// relayFor sends one JSON-RPC message of l's connection to its proxy, or
// keeps it until the leg is attached.
func (s *session) relayFor(ctx actor.Context, l *stubLeg, m *protocol.Message) {
	m.JSONRPC = "2.0"
	if m.Method != "" && m.ID != nil {
		l.expect(m.ID, m.Method, m)
	} else {
		l.seq++
	}
	if l.state.kind != legAttached {
		l.waiting = append(l.waiting, relayed{seq: l.seq, msg: m})
		return
	}
	s.sendRelayed(ctx, l, m)
}

// sendRelayed sends m to l's proxy.
func (s *session) sendRelayed(ctx actor.Context, l *stubLeg, m *protocol.Message) {
	if r := l.pending[protocol.IDKey(m.ID)]; m.ID != nil && m.Method != "" && r != nil {
		r.sent, r.bounced = true, false
	}
	ctx.Send(l.proxy, &clusterpb.Relay{Body: protocol.MustMarshal(m), Traceparent: m.Traceparent})
}

// addLeg serves one more connection of this pod that loads or resumes the
// session: the holding pod is asked for a proxy of its own (off the actor,
// as the first Share was), which is sent the connection's load.
func (s *session) addLeg(ctx actor.Context, m *attach) {
	l := &stubLeg{conn: m.conn, who: m.who, state: legState{kind: legSharing}, pid: ctx.Spawn(legProps), pending: map[string]*relayedRequest{},
		share: legShare{init: shareInit(m.caps, m.notices, m.compaction, m.booleanOptions), cwd: m.cwd, servers: m.servers, dirs: m.dirs,
			caps: m.caps, notices: m.notices}}
	open := s.openRequest(m.kind, m.reqID, m.cwd, m.servers, m.dirs)
	l.expectStart(m.reqID, startMethod(m.kind), open)
	s.stub.legs = append(s.stub.legs, l)
	if s.stub.follow.looking() {
		// The holder let go: this leg follows with the others, its load
		// sent again once attached there.
		s.followLeg(ctx, l, "")
		return
	}
	s.shareLeg(ctx, l, open)
}

// shareLeg asks the holder for a proxy for l, sent open (off the actor).
// A stub beside the session of its own pod (besideSession) has its proxy
// made here, as the holder's pod makes one (Server.ServeShare).
func (s *session) shareLeg(ctx actor.Context, l *stubLeg, open []byte) {
	handover, id, holder, principal, conn, pid, init := s.deps.Handover, s.id, s.stub.holder, l.who.Principal, l.who.client, l.pid, l.share.init
	var here *Server
	if inc := s.incarnation(); inc != "" && holder == inc {
		here = &Server{sys: ctx.ActorSystem(), deps: s.deps}
	}
	l.initAwaited = true
	self, root := ctx.Self(), ctx.ActorSystem().Root
	go func() {
		var proxy *actor.PID
		var err error
		if here != nil {
			proxy, err = here.ServeShare(id, principal, conn, pid, init, open)
		} else {
			proxy, err = handover.Share(id, holder, principal, conn, pid, init, open)
		}
		root.Send(self, &legShared{leg: pid, proxy: proxy, err: err})
	}()
}

// legShared takes the proxy made for a leg. A failed Share means the
// holding pod let the session go or is gone: the leg follows it.
func (s *session) legShared(ctx actor.Context, m *legShared) {
	l := s.stub.legAt(m.leg)
	if l == nil {
		return // its connection left; the proxy, watching the leg, stops
	}
	if m.err != nil {
		s.log.Info().Err(m.err).Str("holder", s.stub.holder).Msg("share: the holding pod did not serve one more connection")
		s.followLeg(ctx, l, "")
		return
	}
	l.proxy = m.proxy
	ctx.Watch(m.proxy)
	if l.state.kind == legRejoining {
		if r := l.state.rejoined; r != nil {
			s.followAnswered(ctx, l, r) // it leaves rejoining, or ends the stub
		}
		return // attached once the follow is answered (followAnswered)
	}
	l.become(legState{kind: legAttached})
	s.flushWaiting(ctx, l)
	s.answerLegOut(ctx, l)
}

// flushWaiting sends l's proxy what waited for it, in order.
func (s *session) flushWaiting(ctx actor.Context, l *stubLeg) {
	for _, w := range l.waiting {
		s.sendRelayed(ctx, l, w.msg)
	}
	l.waiting = nil
}

// dropLeg lets l's connection go: its proxy stops with the leg actor. The
// stub ends with its last connection.
func (s *session) dropLeg(ctx actor.Context, l *stubLeg) {
	for i, x := range s.stub.legs {
		if x == l {
			s.stub.legs = append(s.stub.legs[:i], s.stub.legs[i+1:]...)
			break
		}
	}
	if l.proxy != nil {
		ctx.Unwatch(l.proxy)
	}
	ctx.Stop(l.pid)
	l.stopFormer(ctx)
	s.answerLegOut(ctx, l)
	if len(s.stub.legs) == 0 && s.stub.take == nil {
		ctx.Stop(ctx.Self())
		return
	}
	s.takeOnceLetGo(ctx) // with no client, the turn goes on unattended
}

// endStub stops the stub; the requests still unanswered are answered as
// they stop (answerUnanswered). A stub that holds the session's lease to
// adopt it takes it instead: the old holder's end is what it waited for.
func (s *session) endStub(ctx actor.Context, why string) {
	if t := s.stub.take; t != nil && t.taken != nil && why != stubDeleted {
		s.take(ctx)
		return
	}
	if s.stub.ending == "" {
		s.stub.ending = why
	}
	ctx.Stop(ctx.Self())
}

// answerUnanswered answers every request relayed and not answered, once
// the stub stops: a prompt cancelled, a close done (the connection is let
// go), anything else an error naming why.
func (s *session) answerUnanswered(ctx actor.Context) {
	for _, l := range s.stub.legs {
		for _, r := range l.pending {
			switch {
			case r.method == protocol.MethodSessionPrompt:
				s.respondTo(ctx, l.conn, r.id, cancelledPrompt(), nil)
			case r.method == protocol.MethodSessionClose:
				s.respondTo(ctx, l.conn, r.id, struct{}{}, nil)
			case s.stub.ending == stubDeleted:
				s.respondTo(ctx, l.conn, r.id, nil, protocol.ErrSessionNotFound(s.id))
			default:
				s.respondTo(ctx, l.conn, r.id, nil, protocol.ErrSessionHolderGone(s.id, s.stub.holder))
			}
		}
		l.pending = nil
	}
}

// endStubForDelete ends the stub for a session/delete on this pod: its
// clients but the deleting one (by) are told, and the stub stops (the
// proxies on the holding pod with it). The deleting connection then
// deletes from the store, which answers -32010 while the other pod holds
// the session.
func (s *session) endStubForDelete(ctx actor.Context, by *actor.PID) {
	for _, l := range s.stub.legs {
		if !l.conn.Equal(by) {
			s.emitTo(ctx, l.conn, deletedNotice())
		}
	}
	s.endStub(ctx, stubDeleted)
}

// stepStub is the stub's step. It stops with ctx.Stop: its phase is stub
// until its Stopped, which answers what its connections still wait for.
func (s *session) stepStub(ctx actor.Context, e envelope) {
	st := s.stub
	switch m := e.msg.(type) {
	case *adoptTurn:
		s.adoptAsStub(ctx, m)
	case *opened:
		s.stubOpened(ctx, m)
	case *stubTakeDue:
		s.stubTakeDue(ctx)
	case *legFrame:
		if l := st.legAt(m.leg); l != nil {
			s.fromProxy(ctx, l, m.body)
		} else if l := st.legOfFormer(m.leg); l != nil {
			s.fromFormerProxy(ctx, l, m.body)
		}
	case *legShared:
		s.legShared(ctx, m)
	case *holderRead:
		s.holderRead(ctx, m)
	case *lookAgain:
		s.lookUpHolder(ctx)
	case *legSettleDue:
		s.settleDue(ctx, m)
	case *deleteLive:
		s.endStubForDelete(ctx, nil)
	case *sessionRequest:
		l := st.legOf(m.conn)
		if l == nil {
			s.respondTo(ctx, m.conn, m.id, nil, errSessionMoved())
			ctx.Send(m.conn, &sessionMoved{id: s.id, pid: ctx.Self()})
			return
		}
		if m.method == protocol.MethodSessionDelete {
			s.endStubForDelete(ctx, m.conn)
			return
		}
		if m.method == protocol.MethodSessionClose {
			l.closeID = m.id
		}
		s.relayFor(ctx, l, &protocol.Message{ID: m.id, Method: m.method, Params: m.params, Traceparent: m.traceparent})
	case *clientAnswer:
		tag, ok := m.tag.(remoteTag)
		if l := st.legAt(tag.leg); ok && l != nil {
			answer := &protocol.Message{ID: protocol.RawMessage(tag.id), Result: m.result, Error: m.err}
			if m.err == nil && len(m.result) == 0 {
				answer.Result = protocol.RawMessage("null")
			}
			s.relayFor(ctx, l, answer)
		}
	case *attach:
		l := st.legOf(m.conn)
		if m.follow != nil {
			// followed to a pod that shares it from another: not here,
			// unless this stub is taking the session
			if !s.followDuringTake(e) {
				s.refuseFollow(ctx, m)
			}
			return
		}
		if l == nil {
			s.addLeg(ctx, m)
			return
		}
		if m.reqID != nil {
			open, _ := protocol.Decode(s.openRequest(m.kind, m.reqID, m.cwd, m.servers, m.dirs))
			s.relayFor(ctx, l, open)
		}
	case *cancelTurns:
		l := st.legOf(m.conn)
		if l == nil {
			return // the ids and turns of another connection are not its proxy's
		}
		if m.requestID != nil {
			s.relayFor(ctx, l, &protocol.Message{Method: protocol.MethodCancelRequest,
				Params: protocol.MustMarshal(map[string]protocol.RawMessage{"requestId": m.requestID})})
			return
		}
		// Every turn of the connection (Conn.CancelTurns: its client can no
		// longer receive): its proxy's on the holding pod, not the turns of
		// that pod's clients a session/cancel would end too.
		s.relayFor(ctx, l, &protocol.Message{Method: shareCancelTurns})
	case *drain:
		ctx.Send(m.from, &sessionIdle{sessionID: s.id, seq: m.seq})
	case *leftHeard:
		// A proxy told the paused session left (stayForClients) holds what
		// it got since, as for an actor that stops; this one stays, a
		// stub: it will not stop for the proxy, whose held requests are
		// answered "moved" now (after what it passed on before, answered
		// above), which its stub waits for (bounceDue).
		ctx.Send(m.conn, &sessionMoved{id: s.id, pid: ctx.Self()})
	case *detach:
		if l := st.legOf(m.conn); l != nil {
			s.dropLeg(ctx, l)
		}
	case *handOff:
		// A stub holds no lease: nothing to let go of.
		if e.sender != nil {
			ctx.Send(e.sender, &handedOff{})
		}
	case *actor.Terminated:
		if l := st.legOfProxy(m.Who); l != nil {
			s.log.Info().Str("holder", st.holder).Msg("share: the proxy of a connection on the holding pod is gone")
			s.followLeg(ctx, l, st.holder)
		}
	case *actor.Stopped:
		s.deps.Metrics.Sessions.Add(-1)
		if !s.abandonAcquire() && s.store != nil {
			s.closeStore() // opened to adopt, and stopped before its answer came
		} else if t := st.take; t != nil && t.taken != nil {
			s.store = t.taken.store
			s.closeStore() // opened to adopt, and stopped before it took it
		}
		s.store = nil
		s.answerAdopter(ctx, fmt.Errorf("session %s: its stub here stopped before it took the session", s.id))
		if t := st.take; t != nil {
			s.refuseFollows(ctx, t)
		}
		s.answerUnanswered(ctx)
		for _, l := range st.legs {
			for _, to := range l.outAsked {
				ctx.Send(to, &legInfo{}) // no leg to move with
			}
		}
	}
}

// refuseFollow answers a follow that reached the stub: another pod holds
// the session (the stub is not taking it, or could not).
func (s *session) refuseFollow(ctx actor.Context, m *attach) {
	s.respondTo(ctx, m.conn, m.reqID, nil, protocol.ErrInvalidParams(map[string]string{
		"_meta": "the session is held by another pod"}))
}

// fromProxy passes one frame of l's proxy to l's connection.
func (s *session) fromProxy(ctx actor.Context, l *stubLeg, body []byte) {
	msg, e := protocol.Decode(body)
	if e != nil {
		s.log.Warn().Str("error", e.Message).Msg("share: undecodable frame of the proxy")
		return
	}
	switch {
	case msg.IsResponse():
		id := protocol.IDKey(msg.ID)
		if l.initAwaited {
			l.initAwaited = false
			if id == protocol.IDKey(shareInitID) {
				return // the proxy's initialize's
			}
		}
		if id == protocol.IDKey(followID) && l.state.followAwaited() {
			if l.proxy == nil {
				l.state.rejoined = msg // the Share's answer is on its way
				return
			}
			s.followAnswered(ctx, l, msg)
			return
		}
		delete(l.pending, id)
		if l.answered != nil {
			l.answered[id] = true
		}
		ctx.Send(l.conn, &outbound{frame: Frame{Data: body, SessionID: s.id}})
		if l.closeID != nil && id == protocol.IDKey(l.closeID) {
			s.closedLeg(ctx, l)
		}
	case msg.Method == legMovedMethod:
		s.movedLeg(ctx, l)
	case msg.Method == shareEnd:
		s.log.Info().Str("holder", s.stub.holder).Msg("share: the holding pod ended the sharing")
		s.endStub(ctx, stubHolderGone)
	case msg.Method == shareLeft:
		s.log.Info().Str("holder", s.stub.holder).Msg("share: the session left the holding pod; following it")
		s.followLeg(ctx, l, "")
	case msg.Method == protocol.MethodCancelRequest:
		var p struct {
			RequestID protocol.RawMessage `json:"requestId"`
		}
		_ = protocol.Unmarshal(msg.Params, &p)
		withdraw(ctx, l.conn, remoteTag{leg: l.pid, key: protocol.IDKey(p.RequestID)})
	case msg.IsRequest():
		ctx.Send(l.conn, &outboundRequest{sessionID: s.id, method: msg.Method, params: msg.Params, replyTo: ctx.Self(),
			tag: remoteTag{leg: l.pid, id: string(msg.ID), key: protocol.IDKey(msg.ID)}})
	default:
		ctx.Send(l.conn, &outbound{frame: Frame{Data: body, SessionID: s.id}})
	}
}

// closedLeg: l's session/close was answered. The last connection closing
// ends the stub (the connection waits for this actor to stop); another is
// told it is let go, as closeShared tells it.
func (s *session) closedLeg(ctx actor.Context, l *stubLeg) {
	s.dropLeg(ctx, l)
	if len(s.stub.legs) > 0 {
		ctx.Send(l.conn, &sessionMoved{id: s.id, pid: ctx.Self()})
	}
}
