package actors

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// A stub asked to adopt its session (durable turns, issue 29): the pod
// that held the session paused its turn for a drain, or died, and this
// pod — which serves clients of that session through its stub — is the
// one asked to go on with the turn (Server.Adopt: the draining pod's
// hand-over, or the recovery scan). Only one actor of a session lives on
// a pod, so the stub takes the session itself: it opens the store entry
// as an adopted session does (startAdopt); once it holds the lease, and
// each leg has had the last frame of its old holder (the proxy said the
// session left, or is gone; and the answer "moved" to each prompt it got
// after it let the session go, see bounceDue), the legs' connections become its clients,
// the turn left recorded resumes, and each leg's prompt the turn is of is
// answered to it. Until then the stub stays a stub: its legs keep
// following, and what its connections send waits in the stash while the
// store is asked, in the legs after. If the open fails (another pod took
// the session), the stub goes on as before and Adopt is told why.

type (
	// stubTake is the stub taking the session: start is how the session
	// came here; taken, the store's answer, once it holds the lease;
	// follows, the follows of other pods' stubs that reached it meanwhile
	// (it is the session's next holder): served once it holds the session,
	// as its legs' connections become its clients, refused if it cannot.
	stubTake struct {
		start   startKind
		taken   *opened
		follows []*envelope
	}
	// stubTakeDue: the legs had their time to let go of the old holder.
	stubTakeDue struct{}
)

func (*stubTakeDue) IgnoreDeadLetterLogging() {}

// adoptAsStub serves adoptTurn in phase stub.
func (s *session) adoptAsStub(ctx actor.Context, m *adoptTurn) {
	if s.stub.ending != "" || s.stub.take != nil {
		ctx.Send(m.reply, &adoptAnswer{err: fmt.Errorf("session %s: its stub here is ending or taking it already", s.id)})
		return
	}
	s.adopter, s.stub.take = m.reply, &stubTake{start: s.start}
	// The servers the draining holder handed over, which the turn ran
	// with, before its clients' own (takeLegs).
	s.mcp.start = m.servers
	s.start = startAdopt // opened as Adopt opens: no share, no takeover
	s.log.Info().Int("clients", len(s.stub.legs)).Str("holder", s.stub.holder).Msg("adopt: the stub here takes the session")
	s.startOpen(ctx)
}

// stubOpened: the store's answer to the stub's open (adoptAsStub). The
// handle waits in the take until the legs let go of the old holder: the
// stub, still a stub, serves what waited meanwhile.
func (s *session) stubOpened(ctx actor.Context, m *opened) {
	if !s.lease.settle(m.call, m.err == nil) {
		return
	}
	t := s.stub.take
	if m.err != nil {
		s.log.Info().Err(m.err).Msg("adopt: the stub could not take the session; its clients go on following it")
		s.start, s.stub.take = t.start, nil
		s.answerAdopter(ctx, m.err)
		s.refuseFollows(ctx, t)
		if len(s.stub.legs) == 0 {
			s.endStub(ctx, stubHolderGone) // its last connection left meanwhile
			return
		}
		s.unstash(ctx)
		return
	}
	t.taken = m
	self, root := ctx.Self(), ctx.ActorSystem().Root
	time.AfterFunc(s.followTimeout(), func() { root.Send(self, &stubTakeDue{}) })
	s.unstash(ctx)
	s.takeOnceLetGo(ctx)
}

// takeOnceLetGo takes the session when the store's answer is here, no
// leg is served by the old holder any more, and none waits for its old
// holder's answer to a prompt (bounceDue).
func (s *session) takeOnceLetGo(ctx actor.Context) {
	if s.phase.kind != phaseStub || s.stub.take == nil || s.stub.take.taken == nil {
		return
	}
	resumed, ok := resumedPrompt(s.stub.take.taken.store)
	for _, l := range s.stub.legs {
		isResumed := func(key string) bool { return ok && resumed.names(promptKey{client: l.who.client, id: key}) }
		if k := l.state.kind; k == legAttached || k == legSharing || k == legSettling || l.bounceDue(isResumed) {
			return
		}
	}
	s.take(ctx)
}

// resumedPrompt is the prompt of the turn left recorded in st, which the
// take resumes; false when none.
func resumedPrompt(st store.Session) (promptKey, bool) {
	if k, ok := st.(store.TurnKeeper); ok {
		if prior := k.PriorTurn(); prior != nil {
			return keyOfPrompt(recordedClient(prior.Conn), protocol.RawMessage(prior.PromptRequest)), true
		}
	}
	return promptKey{}, false
}

// bounceDue: l's old holder let the session go (its proxy said so, it is
// not gone) and a prompt l relayed reached it unanswered that is not the
// prompt of the paused turn the next holder goes on with (goesOn: the
// turn resumed here, or the prompts the new holder said it owes). That
// holder answered its queued prompts before it said so (the pause and the
// hand-off cancel them), so this one reached it after: its answer "moved"
// follows on the old proxy's stream (fromFormerProxy), and the prompt is
// served by the next holder once it is. Settled before, the prompt would
// be answered as one whose turn was cut (cancelled) though it never ran.
// The wait is bounded by stubTakeDue, or legSettleDue.
func (l *stubLeg) bounceDue(goesOn func(key string) bool) bool {
	if !l.state.formerLeft {
		return false
	}
	for key, r := range l.pending {
		if r.sent && !r.bounced && r.method == protocol.MethodSessionPrompt && !goesOn(key) {
			return true
		}
	}
	return false
}

// take makes the stub the session's holder (see above).
func (s *session) take(ctx actor.Context) {
	t := s.stub.take
	s.store = t.taken.store
	owed, redo := s.takeLegs(ctx)
	s.openWith(ctx, t.taken.entries, nil)
	for _, o := range owed {
		s.settleOwed(ctx, o)
	}
	s.stash = slices.Concat(redo, t.follows, s.stash)
	s.unstash(ctx)
}

// followDuringTake keeps a follow that reached the stub while it takes
// the session (see stubTake), and reports whether it did.
func (s *session) followDuringTake(e envelope) bool {
	if s.stub.take == nil {
		return false
	}
	s.stub.take.follows = append(s.stub.take.follows, stashed(e))
	return true
}

// refuseFollows refuses the follows t kept: the stub did not take the
// session, which another pod holds.
func (s *session) refuseFollows(ctx actor.Context, t *stubTake) {
	for _, e := range t.follows {
		s.refuseFollow(ctx, e.msg.(*attach))
	}
	t.follows = nil
}

// stubTakeDue: a leg still served by the old holder, or waiting for its
// answer (its pod cut off, not dead), does not keep the session from its
// turn any longer.
func (s *session) stubTakeDue(ctx actor.Context) {
	if s.stub.take == nil || s.stub.take.taken == nil {
		return
	}
	s.log.Warn().Msg("adopt: a leg is still served by the old holder, or waits for its answer; the stub takes the session anyway")
	s.take(ctx)
}

// legOwed are the prompts a leg relayed that reached a holder and were
// not answered: the resumed turn may be of one of them. client is the
// leg's connection's id (sessionWho.client), whose prompts they are.
type legOwed struct {
	conn    *actor.PID
	client  string
	prompts []protocol.RawMessage
}

// takeLegs makes each leg's connection a client of the session: the leg
// actors stop (their proxies, which watch them, with them), what their
// proxies asked the clients is withdrawn (the resumed turn asks again),
// and the moves waiting for a leg are told it has none. It returns, per
// leg, the prompts it may be owed, and what else the legs relayed and
// were not answered, as messages to serve here in the order each
// connection sent them.
func (s *session) takeLegs(ctx actor.Context) (owed []legOwed, redo []*envelope) {
	st := s.stub
	s.clients = clients{}
	for _, l := range st.legs {
		if l.proxy != nil {
			ctx.Unwatch(l.proxy)
		}
		withdraw(ctx, l.conn, legRequests{leg: l.pid})
		ctx.Stop(l.pid)
		l.stopFormer(ctx)
		for _, to := range l.outAsked {
			ctx.Send(to, &legInfo{})
		}
		s.clients.add(client{pid: l.conn, who: l.who, caps: l.share.caps, notices: l.share.notices})
		if s.mcp.start == nil {
			s.mcp.start = l.share.servers
		}
		o := legOwed{conn: l.conn, client: l.who.client}
		for _, r := range l.relayedInOrder() {
			if r.req != nil && r.req.sent && !r.req.bounced && r.req.method == protocol.MethodSessionPrompt {
				o.prompts = append(o.prompts, r.req.id)
				continue
			}
			if e := s.servedHere(ctx, l, r); e != nil {
				redo = append(redo, e)
			}
		}
		owed = append(owed, o)
	}
	s.stub, s.conn = nil, nil
	if s.clients.len() > 0 {
		s.conn, s.who = s.clients.list[0].pid, s.clients.list[0].who
	}
	s.startCwd, s.startDirs, s.startReq = "", nil, nil
	return owed, redo
}

// legMessage is a message a leg relayed and was not answered: req is its
// record when it is a request.
type legMessage struct {
	seq uint64
	msg *protocol.Message
	req *relayedRequest
}

// relayedInOrder is what l relayed and was not answered, and what waited
// for its proxy, in the order its connection sent it.
func (l *stubLeg) relayedInOrder() []legMessage {
	bySeq := map[uint64]*legMessage{}
	for _, w := range l.waiting {
		bySeq[w.seq] = &legMessage{seq: w.seq, msg: w.msg}
	}
	for _, r := range l.pending {
		m := bySeq[r.seq]
		if m == nil {
			m = &legMessage{seq: r.seq, msg: r.msg}
			bySeq[r.seq] = m
		}
		m.req = r
	}
	out := make([]legMessage, 0, len(bySeq))
	for _, m := range bySeq {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b legMessage) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// servedHere is r, relayed by l and not answered, as the message its
// connection would have sent this session: a load or resume attaches, a
// cancel cancels, a request or notification is one; nil for an answer to
// a request of the old holder (withdrawn). A request whose message stayed
// with an old leg (restored after a move) cannot be served again and is
// answered with an error naming why.
func (s *session) servedHere(ctx actor.Context, l *stubLeg, r legMessage) *envelope {
	if r.msg == nil {
		if r.req != nil {
			s.respondTo(ctx, l.conn, r.req.id, nil, protocol.ErrSessionHolderGone(s.id, s.stub.holder))
		}
		return nil
	}
	m := r.msg
	switch m.Method {
	case "":
		return nil
	case protocol.MethodSessionLoad, protocol.MethodSessionResume:
		var p struct {
			Cwd     string                     `json:"cwd"`
			Servers []protocol.McpServerConfig `json:"mcpServers"`
			Dirs    []string                   `json:"additionalDirectories"`
		}
		_ = protocol.Unmarshal(m.Params, &p)
		kind := startLoad
		if m.Method == protocol.MethodSessionResume {
			kind = startResume
		}
		return &envelope{msg: &attach{kind: kind, reqID: m.ID, cwd: p.Cwd, conn: l.conn, who: l.who, servers: p.Servers,
			notices: l.share.notices, caps: l.share.caps, dirs: p.Dirs, compaction: s.compactionUpdates, booleanOptions: s.booleanOptions}}
	case shareCancelTurns:
		return &envelope{msg: &cancelTurns{conn: l.conn}}
	case protocol.MethodCancelRequest:
		var p struct {
			RequestID protocol.RawMessage `json:"requestId"`
		}
		_ = protocol.Unmarshal(m.Params, &p)
		return &envelope{msg: &cancelTurns{conn: l.conn, requestID: p.RequestID}}
	}
	return &envelope{msg: &sessionRequest{id: m.ID, method: m.Method, params: m.Params, conn: l.conn, traceparent: m.Traceparent}}
}

// settleOwed answers o's prompts the resumed turn is not of: cancelled,
// as a follow answers a prompt whose turn was cut; the turn's own prompt
// is answered to o's connection when the turn ends (or now, from the
// follow log, when it ended already). A take whose open failed (phase
// failed) goes on with no turn: each prompt is answered cancelled, once.
func (s *session) settleOwed(ctx actor.Context, o legOwed) {
	detached := func(p *actor.PID) bool { return p == nil || s.clients.find(p) == nil }
	for _, id := range o.prompts {
		p := keyOfPrompt(o.client, id)
		if s.phase.kind == phaseLive {
			if s.turn.answerTo(p, o.conn, detached) || s.turn.of(o.conn) && protocol.IDKey(s.turn.prompt.id) == p.id {
				continue
			}
			if data, ok := s.followers.takeAnswer(p); ok {
				ctx.Send(o.conn, &outbound{frame: Frame{Data: data, SessionID: s.id}})
				continue
			}
		}
		s.respondTo(ctx, o.conn, id, cancelledPrompt(), nil)
	}
}
