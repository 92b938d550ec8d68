package actors

import (
	"errors"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
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
	// outbound is a frame to write, in order, to the client. A chunk of a
	// model call's text says which call and how far its shown text goes
	// with it: the session keeps that, not the frame (session_active.go).
	outbound struct {
		frame Frame
		call  *modelCall
		shown int
	}
	// offActorAnswer is the answer to a request served off the actor's
	// goroutine (counted in answering).
	offActorAnswer struct{ frame Frame }
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
	// from is the connection draining a session (nil when sent to a
	// connection), which the session answers with sessionIdle of the same
	// seq: the connection waits for the last drain it sent to the session's
	// actor, not for an earlier actor of that name (stopped since).
	drain struct {
		from *actor.PID
		seq  uint64
	}
	drained     struct{}
	sessionIdle struct {
		sessionID string
		seq       uint64
	}
	// cancelTurns cancels running turns started by conn (every one, or only
	// the prompt with requestID): sent by the transport to its connection
	// (conn nil), and by the connection to its sessions.
	cancelTurns struct {
		conn      *actor.PID
		requestID protocol.RawMessage
	}
)

func (*outbound) IgnoreDeadLetterLogging()       {}
func (*offActorAnswer) IgnoreDeadLetterLogging() {}
func (*clientAnswer) IgnoreDeadLetterLogging()   {}

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
	caps tools.ClientCaps
	// sessions: one record per session the connection deals with
	// (connection_sessions.go).
	sessions sessionRecords
	pending  map[int64]pendingRequest
	nextID   int64
	// drainer is the future waiting for drain (the sessions it waits for
	// have idleWait); joining are sessions opened while draining (a load
	// that waited for its owner check), sent drain once the requests
	// deferred behind them are on their way (joinDrain).
	drainer *actor.PID
	joining []string
	// drainSeq numbers the drains sent to sessions (sessionRecord.idleWait).
	drainSeq uint64
	// reading counts the owner reads under way (at most maxOwnerReads);
	// readQueue are the sessions whose read waits for one to end, in order.
	reading   int
	readQueue []string
	// answering counts the requests served off the actor's goroutine
	// (session/list, session/delete's removal) not answered yet: a drain
	// waits for them.
	answering int
	// notices: the client shows `notice` updates.
	notices bool
	// terminalLogin: how the client runs a terminal login, if it does.
	terminalLogin terminalLogin
	// compaction: the client shows compaction updates; booleanOptions:
	// boolean config options.
	compaction     bool
	booleanOptions bool
	// stub: this connection is the proxy of a session actor of another pod
	// (session_remote.go), nil for any other.
	stub *proxiedStub
	// movedLegs: a connection moved here, until its restore: the legs of
	// its sessions' stubs (connection_move.go).
	movedLegs map[string]*actor.PID
}

func newConnection(deps *Deps, id string, who Identity, out Outlet) *connection {
	return &connection{
		deps:     deps,
		id:       id,
		who:      who,
		out:      out,
		log:      deps.Log.With().Str("conn", id).Logger(),
		sessions: sessionRecords{},
		pending:  map[int64]pendingRequest{},
	}
}

func (c *connection) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *outbound:
		c.deps.Metrics.FramesOut.Add(1)
		c.out.Send(m.frame)
	case *offActorAnswer:
		c.answering--
		c.deps.Metrics.FramesOut.Add(1)
		c.out.Send(m.frame)
		c.finishDrain(ctx)
	case *actor.Started:
		c.deps.Metrics.Connections.Add(1)
		c.deps.conns.Store(c.id, ctx.Self())
	case *actor.Stopped:
		c.deps.Metrics.Connections.Add(-1)
		c.deps.conns.CompareAndDelete(c.id, ctx.Self())
		if c.stub != nil {
			c.deps.shares.proxies.Delete(ctx.Self().Id)
		}
	case *inbound:
		if m.reject != nil {
			c.send(protocol.EncodeError(m.rejectID, m.reject), "")
			return
		}
		c.dispatch(ctx, m.msg)
		c.joinDrain(ctx)
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
	case *endShare:
		c.endShare(ctx)
	case *moveOut:
		c.moveOut(ctx)
	case *moveFlush:
		c.moveFlush(ctx)
	case *moveIn:
		c.moveIn(ctx, m)
	case *moveRestore:
		c.moveRestore(ctx, m)
	case *clusterpb.Repoint:
		c.repoint(ctx, m)
	case *cancelTurns:
		c.cancelDeferred(ctx, nil)
		for _, r := range c.sessions {
			if r.live != nil {
				ctx.Send(r.live, &cancelTurns{conn: ctx.Self(), requestID: m.requestID})
			}
		}
	case *sessionIdle:
		if r := c.sessions.get(m.sessionID); r != nil && r.idleWait == m.seq {
			r.idleWait = 0
			c.sessions.tidy(m.sessionID)
		}
		c.finishDrain(ctx)
	case *retireRequest:
		c.retire(ctx, m)
	case *ownerChecked:
		c.ownerKnown(ctx, m)
	case *actor.Terminated:
		if c.stub != nil && m.Who.Equal(c.stub.leg) {
			// A proxy whose stub went away (session_remote.go). When the
			// stub's pod died (not its client leaving), the turns its
			// client prompted go on: a crash loses no turn (issue 29).
			if m.Why == actor.TerminatedReason_AddressTerminated {
				for _, r := range c.sessions {
					if r.live != nil {
						ctx.Send(r.live, &detach{conn: ctx.Self(), keepTurn: true})
					}
				}
			}
			ctx.Stop(ctx.Self())
			return
		}
		// A session that stopped (closed, evicted, crashed) is forgotten.
		var gone []string
		for id, r := range c.sessions {
			if r.stopping != nil && r.stopping.Equal(m.Who) {
				// The stopping actor's, not that of one spawned anew under
				// its name since it left the registry (live: an attach it
				// gave back, a load): a PID is its name.
				gone = append(gone, id)
				continue
			}
			if r.live != nil && r.live.Equal(m.Who) {
				c.sessions.forget(id)
			}
		}
		for _, id := range gone {
			c.stopped(ctx, id) // may respawn a session of that name
		}
		// What it sent before it stopped (the attaches it took, or gives
		// back) is still queued: Terminated, a system message, overtook it.
		// A drain waits for it (sessionGone, behind it), and the attaches
		// it never took (left in its mailbox as it stopped, or a dead
		// letter: its Watch is answered Terminated too) are opened anew then.
		if id, ok := strings.CutPrefix(m.Who.Id, sessionActorPrefix); ok && m.Who.Address == ctx.Self().Address {
			r := c.sessions.of(id)
			r.settling++
			ctx.Send(ctx.Self(), &sessionGone{id: id, untaken: r.untaken()})
		}
	case *sessionLeft:
		// The session's actor answers what was passed on to it before this
		// and stops once told that nothing more comes (leftHeard).
		ctx.Send(m.pid, &leftHeard{conn: ctx.Self()})
		// Its Terminated (a system message) may have come first.
		r := c.sessions.of(m.id)
		if r.live != nil {
			if !r.live.Equal(m.pid) {
				return // the session is here again already
			}
			r.stopping, r.live, r.sent = r.live, nil, 0
		}
		r.movedAway()
		if c.stub != nil {
			// a proxy: its stub follows the session (session_follow.go)
			c.out.Send(Frame{Data: protocol.EncodeNotification(shareLeft, map[string]string{"sessionId": m.id})})
		}
	case *sessionMoved:
		// A close this connection sent reached a session that another
		// connection took over: it will not stop for us.
		if r := c.sessions.get(m.id); r != nil && r.stopping != nil && r.stopping.Equal(m.pid) {
			c.stopped(ctx, m.id)
		}
	case *attachTaken:
		// Its answer follows, then the answer to a drain sent after it.
		if r := c.sessions.get(m.id); r != nil {
			r.taken(m.reqID)
			c.sessions.tidy(m.id)
		}
	case *attachHeld:
		c.sessions.of(m.id).held(m.id, m.reqID)
	case *sessionGone:
		r := c.sessions.of(m.id)
		r.settling--
		for _, a := range m.untaken {
			if r.reopened(a) {
				c.reattach(ctx, a)
			}
		}
		c.sessions.tidy(m.id)
		c.finishDrain(ctx)
	case *attachAgain:
		a := m.attach
		if r := c.sessions.get(m.id); r != nil {
			r.givenBack(a.reqID)
		}
		c.reattach(ctx, &attachRequest{id: m.id, kind: a.kind, reqID: a.reqID, cwd: a.cwd, servers: a.servers, dirs: a.dirs, follow: a.follow})
	case *actor.Stopping:
		for _, r := range c.sessions {
			if r.live != nil {
				ctx.Send(r.live, &detach{conn: ctx.Self(), keepTurn: c.stub.draining()})
			}
		}
	}
}

// reattach opens anew the session of an attach its actor never served (it
// stopped). A pod that drains (PauseTurns ran) does not: the session would
// be held again by the pod that let go of it, to move a second time or be
// stranded as the pod stops. The attach is answered as a request for a
// session that left is (stepStopped, sessionLeft): "moved", its record
// moved until its client loads it again, from the pod its connection goes
// to (or a stub's follow looks for the session elsewhere).
func (c *connection) reattach(ctx actor.Context, a *attachRequest) {
	if c.deps.shares.draining.Load() {
		if r := c.sessions.of(a.id); r.live == nil {
			r.movedAway()
		}
		c.fail(a.reqID, errSessionMoved())
		c.sessions.tidy(a.id)
		c.finishDrain(ctx)
		return
	}
	c.sessions.tidy(a.id)
	c.openSession(ctx, a.id, a.kind, a.reqID, a.cwd, "", a.servers, a.dirs, a.follow)
	c.joinDrain(ctx)
	c.finishDrain(ctx)
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
	if unusable := c.deps.Config.Unusable; unusable != nil && method != protocol.MethodInitialize {
		c.fail(m.ID, unusable)
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
		protocol.MethodSessionSetMode, protocol.MethodSessionSetConfig, protocol.MethodSessionSetModel:
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
	if target == nil || protocol.IDKey(target) == "" {
		c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"requestId": "requestId must be a number or a string"}))
		return
	}
	c.cancelDeferred(ctx, target)
	for _, r := range c.sessions {
		if r.live != nil {
			ctx.Send(r.live, &cancelTurns{conn: ctx.Self(), requestID: target})
		}
	}
	if m.ID != nil {
		c.reply(m.ID, struct{}{})
	}
}

// cancelDeferred answers cancelled, as a queued prompt is, the prompts
// waiting here for their session (an owner check, a session stopping):
// the one with requestID, or every one when it is nil. They never reach
// their session.
func (c *connection) cancelDeferred(ctx actor.Context, requestID protocol.RawMessage) {
	for id, r := range c.sessions {
		waiting := r.deferred
		if len(waiting) == 0 {
			continue
		}
		kept := waiting[:0]
		for _, w := range waiting {
			if w.ID != nil && protocol.CanonicalMethod(w.Method) == protocol.MethodSessionPrompt &&
				cancelsID(requestID, w.ID) {
				c.reply(w.ID, cancelledPrompt())
				continue
			}
			kept = append(kept, w)
		}
		clear(waiting[len(kept):])
		r.deferred = kept
		if len(kept) == 0 {
			r.deferred = nil
			c.sessions.tidy(id)
		}
	}
	c.finishDrain(ctx)
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
	c.answering++
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
		root.Send(self, &offActorAnswer{frame: Frame{Data: frame}})
	}()
}

// retire forgets a session that wants to stop (idle, or failed to open), but
// only when no request is on its way to it.
func (c *connection) retire(ctx actor.Context, m *retireRequest) {
	r := c.sessions.get(m.id)
	mine := r != nil && r.live != nil && r.live.Equal(m.pid)
	agree := !mine || m.force || r.sent == m.seen
	if mine && agree {
		r.stopping, r.live, r.sent = r.live, nil, 0
		if m.force {
			r.known, r.servers = false, nil
		}
	}
	ctx.Send(m.pid, &retireAnswer{ok: agree})
}

func (c *connection) startDrain(ctx actor.Context) {
	c.drainer = ctx.Sender()
	for id, r := range c.sessions {
		r.idleWait = 0
		if r.live != nil {
			c.drainSession(ctx, r)
		} else {
			c.sessions.tidy(id)
		}
	}
	c.finishDrain(ctx)
}

// joinDrain sends drain to the sessions opened since the drain started,
// after what was deferred behind them (a prompt queued behind a load's
// owner check is then answered, cancelled, before the session is idle).
func (c *connection) joinDrain(ctx actor.Context) {
	for _, id := range c.joining {
		if r := c.sessions.get(id); r != nil && r.live != nil && c.drainer != nil {
			c.drainSession(ctx, r)
		}
	}
	c.joining = nil
}

// drainSession sends a drain to r's actor and waits for its answer (the
// last one sent).
func (c *connection) drainSession(ctx actor.Context, r *sessionRecord) {
	c.drainSeq++
	r.idleWait = c.drainSeq
	ctx.Send(r.live, &drain{from: ctx.Self(), seq: c.drainSeq})
}

// finishDrain answers the drain once no session runs a turn and no request
// waits (for an owner check, for a session to stop, for its answer made
// off the actor): every request with an id is answered before the
// connection goes.
func (c *connection) finishDrain(ctx actor.Context) {
	if c.drainer == nil || c.answering > 0 || c.sessions.waiting() {
		return
	}
	ctx.Send(c.drainer, &drained{})
	c.drainer = nil
}
