package actors

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
)

// Moving a connection to another process (cluster mode: an HTTP connection
// of a draining pod, transport/httpsse). The connection actor's state goes
// as MovedConn; the pod taking it spawns an actor with that state
// (Server.MoveIn). A session the connection reaches through a stub (held by
// a third pod) keeps its proxy there: the new pod makes a stub with a leg
// for the moved connection, and the proxy is repointed to that leg
// (Move.Repoint). The proxy's last frame to the old leg (legMovedMethod)
// says that every earlier one has reached the old connection, whose outbox
// then moves whole. A session held by the moving pod itself is not moved
// here (the turn hand-over does that); the moved connection knows it and
// opens it again at its next request, as an evicted one. A session this
// pod held and paused for the drain is a stub by then, its clients here
// its legs (session_pause_stub.go): their connections move with them.

// MovedConn is a connection actor's state as it moves to another process.
type MovedConn struct {
	Principal      string           `json:"principal"`
	Remote         string           `json:"remote,omitempty"`
	Initialized    bool             `json:"initialized"`
	Caps           tools.ClientCaps `json:"caps"`
	Notices        bool             `json:"notices,omitempty"`
	Compaction     bool             `json:"compaction,omitempty"`
	BooleanOptions bool             `json:"booleanOptions,omitempty"`
	TerminalTyped  bool             `json:"terminalTyped,omitempty"`
	TerminalMeta   bool             `json:"terminalMeta,omitempty"`
	// NextID is the id of the last request the connection asked its client.
	NextID   int64          `json:"nextId"`
	Sessions []MovedSession `json:"sessions,omitempty"`
}

// MovedSession is a session the moving connection had open.
type MovedSession struct {
	ID      string                     `json:"id"`
	Servers []protocol.McpServerConfig `json:"servers,omitempty"`
	// Holder and the proxy: the session is held by another pod and reached
	// through a stub there; the proxy is repointed to the new pod's stub.
	Holder       string `json:"holder,omitempty"`
	ProxyAddress string `json:"proxyAddress,omitempty"`
	ProxyID      string `json:"proxyId,omitempty"`
	// Cwd and Dirs are the session's open through that stub: what its
	// leg sends a next holder when it follows the session there.
	Cwd  string   `json:"cwd,omitempty"`
	Dirs []string `json:"dirs,omitempty"`
}

// MovedRelay is a request relayed to a proxy and not answered yet.
type MovedRelay struct {
	ID     protocol.RawMessage `json:"id"`
	Method string              `json:"method"`
}

// MovedRequest is a request the connection asked its client for a proxy
// (a permission, a file read) whose answer has not come: the moved
// connection routes it to the stub of its session.
type MovedRequest struct {
	ID        int64  `json:"id"`
	SessionID string `json:"sessionId"`
	RemoteID  string `json:"remoteId"`
	Key       string `json:"key"`
}

// LegRef names a stub's leg actor of the process a connection moves to.
type LegRef struct {
	Address string `json:"address"`
	ID      string `json:"id"`
}

// legMovedMethod is the proxy's last frame to its old leg (Repoint).
const legMovedMethod = "$/iac-code/leg_moved"

// moveIDGap separates the ids of the requests the moved connection asks
// its client from those the old one may still have asked while it moved.
const moveIDGap = 1 << 20

type (
	// moveOut asks a connection actor for its state; answered *movedOut.
	moveOut  struct{}
	movedOut struct {
		state MovedConn
		stubs map[string]*actor.PID
	}
	// legOut asks a session whether conn reaches it through a stub leg;
	// answered *legInfo, once the leg is attached when it follows the
	// session (legOut).
	legOut  struct{ conn *actor.PID }
	legInfo struct {
		// legged: conn has a leg of this stub (stub: one that moves).
		legged bool
		stub   bool
		holder string
		proxy  *actor.PID
		// cwd and dirs: the leg's open, for a follow from the pod it moves to.
		cwd  string
		dirs []string
	}
	// moveLeg asks a stub to repoint the proxy of conn's leg to the leg to;
	// answered *legMoved once the proxy's last frame came.
	moveLeg  struct{ conn, to *actor.PID }
	legMoved struct {
		ok      bool
		pending []MovedRelay
	}
	// moveFlush is answered, after every frame queued before it, with the
	// requests of the connection still waiting for their client's answer.
	moveFlush struct{}
	flushed   struct{ requests []MovedRequest }
	// moveIn gives a moved connection actor its sessions' stubs, and
	// moveRestore what the old connection still waited for.
	moveIn      struct{ stubs, legs map[string]*actor.PID }
	moveRestore struct {
		requests []MovedRequest
		pending  map[string][]MovedRelay
	}
	// stubLegOf asks a moved-in stub for its leg of conn (LegRef), after
	// adopting it: adoptLeg (nil answer: the session is not a stub of that
	// holder here).
	adoptLeg struct {
		conn   *actor.PID
		who    sessionWho
		holder string
		proxy  *actor.PID
		share  legShare
	}
	adoptedLeg struct{ leg *actor.PID }
	// legRestore gives a moved-in leg the requests still unanswered.
	legRestore struct {
		conn    *actor.PID
		pending []MovedRelay
	}
)

// Move is a connection leaving this process (see the top of the file).
type Move struct {
	c     *Conn
	State MovedConn
	stubs map[string]*actor.PID
	// Legless are the sessions the connection reached through a stub
	// whose leg does not move with it (no answer in time, or it follows
	// no holder): the moved connection opens them again at its next
	// request, and a prompt owed there is not answered.
	Legless []string
}

// StartMove reads the connection's state and finds the sessions it reaches
// through stubs. Nothing changes yet: a move that goes no further leaves the
// connection as it was.
func (c *Conn) StartMove(timeout time.Duration) (*Move, error) {
	res, err := c.root.RequestFuture(c.pid, &moveOut{}, timeout).Result()
	if err != nil {
		return nil, fmt.Errorf("connection state: %w", err)
	}
	out, ok := res.(*movedOut)
	if !ok {
		return nil, errors.New("connection state: unexpected answer")
	}
	m := &Move{c: c, State: out.state, stubs: map[string]*actor.PID{}}
	for i := range m.State.Sessions {
		ms := &m.State.Sessions[i]
		pid := out.stubs[ms.ID]
		if pid == nil {
			continue
		}
		res, err := c.root.RequestFuture(pid, &legOut{conn: c.pid}, timeout).Result()
		info, ok := res.(*legInfo)
		if err != nil || !ok || !info.stub || info.proxy == nil {
			if err != nil || ok && info.legged {
				m.Legless = append(m.Legless, ms.ID)
			}
			continue
		}
		ms.Holder, ms.ProxyAddress, ms.ProxyID = info.holder, info.proxy.Address, info.proxy.Id
		ms.Cwd, ms.Dirs = info.cwd, info.dirs
		m.stubs[ms.ID] = pid
	}
	return m, nil
}

// Repoint moves the proxy of every stub session to its leg in the process
// the connection moves to (legs, by session id) and returns, by session,
// the requests relayed to it and not answered. A session whose proxy did
// not confirm in time is left out: its turns' frames may miss the moved
// connection.
func (m *Move) Repoint(legs map[string]LegRef, timeout time.Duration) map[string][]MovedRelay {
	out := map[string][]MovedRelay{}
	for sid, ref := range legs {
		pid := m.stubs[sid]
		if pid == nil {
			continue
		}
		res, err := m.c.root.RequestFuture(pid, &moveLeg{conn: m.c.pid, to: actor.NewPID(ref.Address, ref.ID)}, timeout).Result()
		if lm, ok := res.(*legMoved); err == nil && ok && lm.ok {
			out[sid] = lm.pending
		}
	}
	return out
}

// Finish waits until the connection actor has passed on every frame that
// reached it before, and returns the requests it asked its client for a
// proxy that are not answered yet. The caller then takes the outbox.
func (m *Move) Finish(timeout time.Duration) ([]MovedRequest, error) {
	res, err := m.c.root.RequestFuture(m.c.pid, &moveFlush{}, timeout).Result()
	if err != nil {
		return nil, err
	}
	f, _ := res.(*flushed)
	if f == nil {
		return nil, errors.New("unexpected answer")
	}
	return f.requests, nil
}

// Stop ends the connection actor that moved: its turns are not cancelled
// (they were handed over with their sessions, or go on through the moved
// connection's stubs).
func (m *Move) Stop() { _ = m.c.root.StopFuture(m.c.pid).Wait() }

// MoveIn makes a connection of a moved state on this process, writing to
// out, and a stub for each session it reached through one, with a leg for
// it: the legs (by session id) its proxies are to be repointed to.
func (s *Server) MoveIn(id string, st *MovedConn, out Outlet) (*Conn, map[string]LegRef) {
	who := Identity{Principal: st.Principal, Remote: st.Remote}
	if who.Principal == "" {
		who.Principal = DefaultPrincipal
	}
	log := s.deps.Log.With().Str("conn", id).Logger()
	props := actor.PropsFromProducer(func() actor.Actor {
		c := newConnection(s.deps, id, who, out)
		c.initialized, c.caps = st.Initialized, st.Caps
		c.notices, c.compaction, c.booleanOptions = st.Notices, st.Compaction, st.BooleanOptions
		c.terminalLogin = terminalLogin{typed: st.TerminalTyped, meta: st.TerminalMeta}
		c.nextID = st.NextID + moveIDGap
		for _, ms := range st.Sessions {
			r := c.sessions.of(ms.ID)
			r.known, r.servers = true, ms.Servers
		}
		return c
	}, actor.WithReceiverMiddleware(survivePanics(log, out)))
	pid := s.sys.Root.Spawn(props)
	conn := &Conn{ID: id, pid: pid, root: s.sys.Root}
	legs := map[string]LegRef{}
	stubs, legPIDs := map[string]*actor.PID{}, map[string]*actor.PID{}
	for _, ms := range st.Sessions {
		if ms.ProxyID == "" {
			continue
		}
		proxy := actor.NewPID(ms.ProxyAddress, ms.ProxyID)
		share := legShare{init: shareInit(st.Caps, st.Notices, st.Compaction, st.BooleanOptions), cwd: ms.Cwd, servers: ms.Servers, dirs: ms.Dirs,
			caps: st.Caps, notices: st.Notices}
		stub, leg := s.adoptStub(ms, sessionWho{Identity: who, connID: id, client: id}, pid, proxy, share)
		if leg == nil {
			log.Info().Str("session", ms.ID).Msg("moved connection: its session's stub could not be made here; it opens the session again at its next request")
			continue
		}
		stubs[ms.ID], legPIDs[ms.ID] = stub, leg
		legs[ms.ID] = LegRef{Address: leg.Address, ID: leg.Id}
	}
	s.sys.Root.Send(pid, &moveIn{stubs: stubs, legs: legPIDs})
	return conn, legs
}

// adoptStub makes (or finds) the stub of session ms here and a leg of it
// for the moved connection conn, served by proxy. When this process holds
// the session itself (the only live pod to move to may be the holder), the
// stub is made beside the session under a name of its own: its leg is
// served by the same proxy, on this process now, so the turns' frames and
// the answers owed keep their one path.
func (s *Server) adoptStub(ms MovedSession, who sessionWho, conn, proxy *actor.PID, share legShare) (stub, leg *actor.PID) {
	if stub, leg = s.adoptStubNamed(ms, who, conn, proxy, share, sessionActorName(ms.ID)); leg != nil {
		return stub, leg
	}
	return s.adoptStubNamed(ms, who, conn, proxy, share, movedStubName(ms.ID, who.connID))
}

// movedStubName names the stub of session id made beside the session for
// the moved connection connID (adoptStub).
func movedStubName(id, connID string) string { return sessionActorName(id) + "~moved~" + connID }

func (s *Server) adoptStubNamed(ms MovedSession, who sessionWho, conn, proxy *actor.PID, share legShare, name string) (stub, leg *actor.PID) {
	props := actor.PropsFromProducer(func() actor.Actor {
		ss := newSession(s.deps, ms.ID, who, conn, tools.ClientCaps{}, startLoad, nil, "", "", ms.Servers, false)
		ss.movedIn = &adoptLeg{conn: conn, who: who, holder: ms.Holder, proxy: proxy, share: share}
		return ss
	}, actor.WithSupervisor(reportAndStop{}), actor.WithGuardian(s.deps.sessionGuardian),
		actor.WithReceiverMiddleware(keepStack))
	pid, err := s.sys.Root.SpawnNamed(props, name)
	var msg any = &adoptedLegQuery{}
	if errors.Is(err, actor.ErrNameExists) {
		pid = actor.NewPID(s.sys.Address(), name)
		msg = &adoptLeg{conn: conn, who: who, holder: ms.Holder, proxy: proxy, share: share}
	} else if err != nil {
		return nil, nil
	}
	res, err := s.sys.Root.RequestFuture(pid, msg, 5*time.Second).Result()
	if a, ok := res.(*adoptedLeg); err == nil && ok && a.leg != nil {
		return pid, a.leg
	}
	return nil, nil
}

// adoptedLegQuery asks a stub made by MoveIn for the leg it made.
type adoptedLegQuery struct{}

// Restore gives the moved connection what the old one still waited for:
// its client's answers to requests (routed to the stubs' legs), and the
// requests relayed to each proxy and not answered (pending, by session).
func (c *Conn) Restore(requests []MovedRequest, pending map[string][]MovedRelay) {
	c.root.Send(c.pid, &moveRestore{requests: requests, pending: pending})
}

// Connection side.

func (c *connection) moveOut(ctx actor.Context) {
	st := MovedConn{Principal: c.who.Principal, Remote: c.who.Remote, Initialized: c.initialized, Caps: c.caps,
		Notices: c.notices, Compaction: c.compaction, BooleanOptions: c.booleanOptions,
		TerminalTyped: c.terminalLogin.typed, TerminalMeta: c.terminalLogin.meta, NextID: c.nextID}
	stubs := map[string]*actor.PID{}
	for id, r := range c.sessions {
		if !r.known && r.live == nil {
			continue
		}
		st.Sessions = append(st.Sessions, MovedSession{ID: id, Servers: r.servers})
		if r.live != nil {
			stubs[id] = r.live
		}
	}
	ctx.Respond(&movedOut{state: st, stubs: stubs})
}

// moveFlush: every frame before it has gone out; the requests asked for a
// proxy and not answered are listed.
func (c *connection) moveFlush(ctx actor.Context) {
	var reqs []MovedRequest
	for id, p := range c.pending {
		tag, ok := p.tag.(remoteTag)
		if !ok {
			continue
		}
		for sid, r := range c.sessions {
			if r.live != nil && r.live.Equal(p.replyTo) {
				reqs = append(reqs, MovedRequest{ID: id, SessionID: sid, RemoteID: tag.id, Key: tag.key})
			}
		}
	}
	ctx.Respond(&flushed{requests: reqs})
}

func (c *connection) moveIn(ctx actor.Context, m *moveIn) {
	for id, pid := range m.stubs {
		r := c.sessions.of(id)
		r.live, r.sent = pid, 0
		ctx.Watch(pid)
	}
	c.movedLegs = m.legs
}

func (c *connection) moveRestore(ctx actor.Context, m *moveRestore) {
	for _, q := range m.requests {
		r, leg := c.sessions.get(q.SessionID), c.movedLegs[q.SessionID]
		if r == nil || r.live == nil || leg == nil {
			continue
		}
		c.pending[q.ID] = pendingRequest{replyTo: r.live, tag: remoteTag{leg: leg, id: q.RemoteID, key: q.Key}}
	}
	c.movedLegs = nil
	for sid, pending := range m.pending {
		if r := c.sessions.get(sid); r != nil && r.live != nil {
			ctx.Send(r.live, &legRestore{conn: ctx.Self(), pending: pending})
		}
	}
}

// repoint (proxy side): the stub's connection moved; frames go to the leg
// named by m from now on, after a last one to the old leg.
func (c *connection) repoint(ctx actor.Context, m *clusterpb.Repoint) {
	if c.stub == nil {
		return
	}
	to := actor.NewPID(m.LegAddress, m.LegId)
	ctx.Unwatch(c.stub.leg)
	c.out.Send(Frame{Data: protocol.EncodeNotification(legMovedMethod, nil)})
	c.stub.leg, c.stub.drains = to, false // its client is back on a live pod
	c.out = relayOutlet{root: ctx.ActorSystem().Root, stub: to}
	ctx.Watch(to)
	c.log.Info().Str("leg", to.Address).Msg("share: the client's connection moved; frames follow it")
}

// Session (stub) side.

// legOut answers whether conn reaches this session through a leg of its
// stub. A leg following the session to its next holder (the session left
// its pod: a drain paused it) is answered once it rejoined there, so that
// the connection moves with a leg served by a proxy (answerLegOut); the
// move waits for that within its step's timeout.
func (s *session) legOut(ctx actor.Context, e envelope, m *legOut) {
	if e.sender == nil {
		return
	}
	if s.phase.kind == phaseStub {
		if l := s.stub.legOf(m.conn); l != nil && l.state.kind != legAttached && s.stub.ending == "" {
			l.outAsked = append(l.outAsked, e.sender)
			return
		}
	}
	ctx.Send(e.sender, s.legInfoOf(ctx, m.conn))
}

// legInfoOf is what a move learns of conn's leg.
func (s *session) legInfoOf(ctx actor.Context, conn *actor.PID) *legInfo {
	info := &legInfo{}
	if s.phase.kind == phaseStub {
		l := s.stub.legOf(conn)
		info.legged = l != nil
		if l != nil && l.proxy != nil && l.state.kind == legAttached {
			info.stub, info.holder, info.proxy = true, s.stub.holder, l.proxy
			info.cwd, info.dirs = l.share.cwd, l.share.dirs
		}
	}
	return info
}

// answerLegOut answers the moves that waited for l to rejoin (or to go:
// then it has no leg to move).
func (s *session) answerLegOut(ctx actor.Context, l *stubLeg) {
	for _, to := range l.outAsked {
		ctx.Send(to, s.legInfoOf(ctx, l.conn))
	}
	l.outAsked = nil
}

// moveLeg repoints the proxy of conn's leg to m.to; answered once the
// proxy's last frame to this leg came (movedLeg).
func (s *session) moveLeg(ctx actor.Context, e envelope, m *moveLeg) {
	var l *stubLeg
	if s.phase.kind == phaseStub {
		l = s.stub.legOf(m.conn)
	}
	if l == nil || l.proxy == nil || l.moving != nil {
		if e.sender != nil {
			ctx.Send(e.sender, &legMoved{})
		}
		return
	}
	l.moving = e.sender
	ctx.Send(l.proxy, &clusterpb.Repoint{LegAddress: m.to.Address, LegId: m.to.Id})
}

// movedLeg: l's proxy writes to the moved connection's leg now, and every
// frame it wrote before has been passed on: the leg goes, its unanswered
// requests with it (the new leg answers them).
func (s *session) movedLeg(ctx actor.Context, l *stubLeg) {
	var pending []MovedRelay
	for _, r := range l.pending {
		pending = append(pending, MovedRelay{ID: r.id, Method: r.method})
	}
	l.pending = nil
	for i, x := range s.stub.legs {
		if x == l {
			s.stub.legs = append(s.stub.legs[:i], s.stub.legs[i+1:]...)
			break
		}
	}
	ctx.Unwatch(l.proxy)
	ctx.Stop(l.pid)
	if l.moving != nil {
		ctx.Send(l.moving, &legMoved{ok: true, pending: pending})
	}
	if len(s.stub.legs) == 0 {
		ctx.Stop(ctx.Self())
	}
}

// adoptMoved (a stub made by MoveIn, at its start): the stub of the moved
// connection's session, its one leg served by the existing proxy.
func (s *session) adoptMoved(ctx actor.Context) {
	m := s.movedIn
	s.stub = &sessionStub{holder: m.holder}
	s.become(phase{kind: phaseStub})
	s.addMovedLeg(ctx, m)
}

// addMovedLeg adds a leg for a moved connection served by an existing
// proxy; the leg is what it answers.
func (s *session) addMovedLeg(ctx actor.Context, m *adoptLeg) *actor.PID {
	if s.phase.kind != phaseStub || s.stub.holder != m.holder || s.stub.legOf(m.conn) != nil {
		return nil
	}
	l := &stubLeg{conn: m.conn, who: m.who, state: legState{kind: legAttached}, pid: ctx.Spawn(legProps), proxy: m.proxy,
		pending: map[string]*relayedRequest{}, answered: map[string]bool{}, share: m.share}
	s.stub.legs = append(s.stub.legs, l)
	ctx.Watch(m.proxy)
	return l.pid
}

// legRestore: the requests relayed by the old leg and still unanswered,
// but those answered here already.
func (s *session) legRestore(m *legRestore) {
	if s.phase.kind != phaseStub {
		return
	}
	l := s.stub.legOf(m.conn)
	if l == nil {
		return
	}
	for _, r := range m.pending {
		if key := protocol.IDKey(r.ID); !l.answered[key] {
			l.pending[key] = &relayedRequest{id: r.ID, method: r.Method, sent: true}
		}
	}
	l.answered = nil
}

// stepMove serves the messages of a move, in every phase; false for others.
func (s *session) stepMove(ctx actor.Context, e envelope) bool {
	switch m := e.msg.(type) {
	case *legOut:
		s.legOut(ctx, e, m)
	case *moveLeg:
		s.moveLeg(ctx, e, m)
	case *adoptLeg:
		var leg *actor.PID
		if s.phase.kind == phaseStub {
			leg = s.addMovedLeg(ctx, m)
		}
		if e.sender != nil {
			ctx.Send(e.sender, &adoptedLeg{leg: leg})
		}
	case *adoptedLegQuery:
		var leg *actor.PID
		if s.phase.kind == phaseStub && s.movedIn != nil {
			if l := s.stub.legOf(s.movedIn.conn); l != nil {
				leg = l.pid
			}
		}
		if e.sender != nil {
			ctx.Send(e.sender, &adoptedLeg{leg: leg})
		}
	case *legRestore:
		s.legRestore(m)
	default:
		return false
	}
	return true
}
