package actors

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// Following a session to its next holder (issue 29). The clients of a stub
// stay with the session when it leaves the pod holding it — handed over
// (Server.HandOff), paused for another pod to adopt, or its pod died: each
// leg whose proxy says the session left (shareLeft) or whose proxy is gone
// follows. The stub reads the store for the session's next holder (its
// lease; nobody holds it for a moment while another pod takes or adopts
// it), asks that pod for a proxy again, and the leg's connection goes on
// there: the same connection record on this pod, no replay.
//
// No gap, no duplicate: what the old holder sent reached the leg before its
// proxy said the session left (one ordered stream); the new holder sends
// the new proxy first what it sent every client since it took the session
// (followLog, session_followlog.go), then the rest as it comes. A holder
// that cannot (it holds the session for longer than it keeps that) refuses
// the follow, and the stub ends as when nobody takes the session.
//
// The requests the leg relayed and is owed: the follow names its prompts
// (the new holder answers those of its resumed turn: owes in the answer);
// a request the old proxy answered "moved" (it came after the session left)
// and every other request but a prompt is sent again; a prompt neither owed
// nor bounced is answered cancelled (its turn was cut and goes on nowhere).
// What the connection sends meanwhile waits, and goes after, in order.
//
// The old proxy's "moved" and the new holder's answer to the follow come
// from two pods, in no set order. A holder that let the session go answered
// its queued prompts (cancelled) before it said so, and the next holder
// owes the prompt of a turn it paused (it goes on with it), so a prompt the
// follow's answer does not owe, which that holder did not answer, reached
// it after it let the session go: its "moved" is on its way, and the leg
// waits for it (legSettling, bounceDue) before it settles, within
// followTimeout.

// legKind is where one leg of the stub is.
type legKind uint8

const (
	// legSharing: its first Share is under way; messages wait.
	legSharing legKind = iota
	// legAttached: its proxy serves it.
	legAttached
	// legFollowing: the session left its holder; the next one is looked up.
	legFollowing
	// legRejoining: a proxy of the next holder is asked for or made, the
	// follow not answered yet; messages wait.
	legRejoining
	// legSettling: the follow is answered (owes), the old holder's "moved"
	// to a prompt it got after the session left not yet: messages wait, so
	// that prompt goes first (settle).
	legSettling
)

var legKindNames = [...]string{"sharing", "attached", "following", "rejoining", "settling"}

func (k legKind) String() string { return legKindNames[k] }

// legState is the leg's kind with what only that kind has; become sets it
// whole, so that entering a state resets what the last one had.
type legState struct {
	kind legKind
	// former: following, rejoining or settling; the leg actors of the
	// proxies of the holders the leg followed the session away from: their
	// frames still come (fromFormerProxy) until it settles (stopFormer).
	former []*actor.PID
	// formerLeft: following, rejoining or settling; the last holder the
	// leg followed the session away from said the session left (it is
	// not gone): it answers "moved" to what it got after (bounceDue).
	formerLeft bool
	// rejoined: rejoining; the answer to its follow, come before its Share
	// returned the proxy (the proxy answers as soon as it is made): taken
	// once it has (legShared). Set, the follow is answered (followAwaited).
	rejoined *protocol.Message
	// owes: settling; the prompts the holder that answered its follow
	// owes it.
	owes map[string]bool
}

// followAwaited: the leg's follow is asked and not answered yet
// (rejoining, its answer not come early). An answer with followID is the
// follow's then, and only then: the proxy asked was sent nothing else (what
// the connection sends waits), so no request of the leg's client can be
// answered; at any other time the id is a client's, who may use any id,
// and so is the answer (fromProxy).
func (st legState) followAwaited() bool { return st.kind == legRejoining && st.rejoined == nil }

// owedThere: the holder that answered the leg's follow owes it the prompt
// key (settling).
func (st legState) owedThere(key string) bool { return st.owes[key] }

// legalLegKinds are the kinds each leg kind may become.
var legalLegKinds = [...][]legKind{
	legSharing:   {legAttached, legFollowing},
	legAttached:  {legFollowing},
	legFollowing: {legRejoining},
	legRejoining: {legAttached, legFollowing, legSettling},
	legSettling:  {legAttached, legFollowing},
}

// become moves l to state to, and reports whether it did. What the leg
// followed the session away from stays with the follow: rejoining and
// settling keep its former proxies' leg actors and whether the last
// holder said the session left; following adds the leg's actor of the
// moment to the former (followLeg spawns it another) and is told the word
// anew. A follow's answer that came before its Share returned (rejoined)
// is that rejoin's alone: a leg that follows the session on before that
// Share returns drops it, as its next rejoin asks another proxy, on the
// leg's next actor, which answers that follow itself (an answer kept
// would settle the leg twice, once on the holder it left). Attached, the
// leg has none of these (settle stops the former first).
func (l *stubLeg) become(to legState) bool {
	if !slices.Contains(legalLegKinds[l.state.kind], to.kind) {
		return false
	}
	switch to.kind {
	case legFollowing:
		to.former = append(l.state.former, l.pid)
	case legRejoining, legSettling:
		to.former, to.formerLeft = l.state.former, l.state.formerLeft
	}
	l.state = to
	return true
}

// defaultFollowTimeout bounds the search for the next holder
// (Config.FollowTimeout): past it the stub ends as before (its clients
// load the session again). followPoll is how often the store is read
// meanwhile.
const (
	defaultFollowTimeout = 3 * time.Second
	followPoll           = 50 * time.Millisecond
	// followTurnTimeout bounds the search instead while the store shows
	// the session's turn recorded with its lease free: paused by a drain
	// or left by a dead pod, it is adopted by a live pod (the drain's
	// hand-over, or the recovery scan every few seconds), which takes
	// longer than followTimeout when a pod hands over many turns at once.
	followTurnTimeout = 30 * time.Second
)

func (s *session) followTimeout() time.Duration {
	if t := s.deps.Config.FollowTimeout; t > 0 {
		return t
	}
	return defaultFollowTimeout
}

// followID is the id of a leg's follow (a session/resume); its answer is
// the stub's, not its client's, while the leg awaits it (followAwaited).
var followID = protocol.RawMessage(`"iac-code-follow"`)

// shareLeft, from a proxy to its stub: the session left the holding pod
// (handed over, paused to be adopted): follow it.
const shareLeft = "$/iac-code/share_left"

// followMetaKey is the _meta key of a follow: {"owed": [prompt ids]} in
// the request, {"owes": [...]} in its answer.
const followMetaKey = "iac-code/follow"

type (
	// stubFollow is the stub's search for the next holder.
	stubFollow struct {
		// since: when the search started (zero when no leg follows);
		// reading: a store read is under way; dead: an incarnation whose
		// proxies went away, not to be followed to.
		since   time.Time
		reading bool
		dead    string
	}
	// holderRead is the store's answer to the search.
	holderRead struct {
		holder store.Holder
		err    error
	}
	// lookAgain: read the store again.
	lookAgain struct{}
	// legSettleDue: the leg (its actor then) waited long enough for its
	// old holder's "moved" (legSettling).
	legSettleDue struct{ leg *actor.PID }
	// followClaim is what a follow says it is owed (its prompts' ids).
	followClaim struct {
		Owed []protocol.RawMessage `json:"owed,omitempty"`
		// Drains: the stub's pod drains, its clients may go with it
		// (session_pause_stub.go).
		Drains bool `json:"drains,omitempty"`
		// answers: the kept answers of owed prompts whose turn ended,
		// sent after the follow's answer (the holder's side only).
		answers [][]byte
	}
	// followAnswer is what the holder answers it owes.
	followAnswer struct {
		Owes []protocol.RawMessage `json:"owes,omitempty"`
	}
)

func (*holderRead) IgnoreDeadLetterLogging()   {}
func (*lookAgain) IgnoreDeadLetterLogging()    {}
func (*legSettleDue) IgnoreDeadLetterLogging() {}

// looking: some leg follows the session.
func (f *stubFollow) looking() bool { return !f.since.IsZero() }

func (st *sessionStub) legOfFormer(pid *actor.PID) *stubLeg {
	for _, l := range st.legs {
		for _, f := range l.state.former {
			if f.Equal(pid) {
				return l
			}
		}
	}
	return nil
}

// stopFormer stops the leg actors of l's former proxies (which stop with
// them), as l is attached (become drops them) or dropped.
func (l *stubLeg) stopFormer(ctx actor.Context) {
	for _, f := range l.state.former {
		ctx.Stop(f)
	}
}

// followLeg: l's holder let the session go (or died: dead names it). Its
// proxy is let go of (its frames still come, to the leg actor become
// adds to the state's former), what that
// proxy asked l's client is withdrawn, and the next holder is looked up.
func (s *session) followLeg(ctx actor.Context, l *stubLeg, dead string) {
	// Its former holder said the session left when its proxy did
	// (shareLeft); a Share that failed is no holder: the last one's word
	// stands.
	left := dead == "" && (l.proxy != nil || l.state.formerLeft)
	// A stub stopping spawns no more leg actors: it would wait for them.
	if s.stub.ending != "" || !l.become(legState{kind: legFollowing, formerLeft: left}) {
		return
	}
	if l.proxy != nil {
		ctx.Unwatch(l.proxy)
	}
	withdraw(ctx, l.conn, legRequests{leg: l.pid})
	l.pid, l.proxy = ctx.Spawn(legProps), nil
	st := s.stub
	if dead != "" {
		st.follow.dead = dead
	}
	if !st.follow.looking() {
		st.follow.since = time.Now()
	}
	s.lookUpHolder(ctx)
	s.takeOnceLetGo(ctx)
}

// lookUpHolder reads who holds the session now, off the actor.
func (s *session) lookUpHolder(ctx actor.Context) {
	st := s.stub
	if st.follow.reading || !st.follow.looking() || st.ending != "" {
		return
	}
	reader, ok := s.deps.Store.(store.HolderReader)
	if !ok {
		s.endStub(ctx, stubHolderGone)
		return
	}
	st.follow.reading = true
	id, self, root, timeout := s.id, ctx.Self(), ctx.ActorSystem().Root, s.followTimeout()
	go func() {
		c, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		h, err := reader.Holder(c, id)
		root.Send(self, &holderRead{holder: h, err: err})
	}()
}

// holderRead: the legs following rejoin the holder found, or the store is
// read again a moment later, until followTimeout.
func (s *session) holderRead(ctx actor.Context, m *holderRead) {
	st := s.stub
	st.follow.reading = false
	if !st.follow.looking() || st.ending != "" {
		return
	}
	owner := m.holder.Owner
	switch {
	case st.take != nil && (owner == "" || owner == s.incarnation()):
		// The stub takes the session to adopt it (session_stub_adopt.go):
		// its legs wait for that, not for the timeout.
		self, root := ctx.Self(), ctx.ActorSystem().Root
		time.AfterFunc(followPoll, func() { root.Send(self, &lookAgain{}) })
	case errors.Is(m.err, store.ErrNotFound):
		s.endStub(ctx, stubDeleted)
	case m.err == nil && owner != "" && owner != st.follow.dead && (owner != s.incarnation() || s.besideSession(ctx)):
		s.log.Info().Str("from", st.holder).Str("to", owner).Dur("took", time.Since(st.follow.since)).Msg("share: following the session to its new holder")
		st.holder, st.follow.since = owner, time.Time{}
		for _, l := range st.legs {
			if l.state.kind == legFollowing {
				s.rejoin(ctx, l)
			}
		}
	case time.Since(st.follow.since) >= s.followTimeout() && (!m.holder.Turn || time.Since(st.follow.since) >= followTurnTimeout):
		s.log.Info().Err(m.err).Str("holder", st.holder).Msg("share: no pod took the session; its clients load it again")
		s.endStub(ctx, stubHolderGone)
	default:
		self, root := ctx.Self(), ctx.ActorSystem().Root
		time.AfterFunc(followPoll, func() { root.Send(self, &lookAgain{}) })
	}
}

// besideSession: this stub is not the pod's session actor but one made
// beside it for a moved connection (Server.adoptStub, `~moved~`). The
// session this pod holds is another actor for it, rejoined as another
// pod's is (shareLeg); the pod's own stub instead takes the session when
// its pod adopts it (session_stub_adopt.go).
func (s *session) besideSession(ctx actor.Context) bool {
	return ctx.Self().Id != sessionActorName(s.id)
}

// incarnation is this pod's (shared store), "" for a store of one process.
func (s *session) incarnation() string {
	if p, ok := s.deps.Store.(interface{ Incarnation() string }); ok {
		return p.Incarnation()
	}
	return ""
}

// rejoin asks the new holder for a proxy for l, sent the follow: a
// session/resume (no replay) naming the prompts l is owed.
func (s *session) rejoin(ctx actor.Context, l *stubLeg) {
	l.become(legState{kind: legRejoining})
	claim := followClaim{Drains: s.deps.shares.draining.Load()}
	for _, r := range l.pending {
		if r.sent && !r.bounced && r.method == protocol.MethodSessionPrompt {
			claim.Owed = append(claim.Owed, r.id)
		}
	}
	params := map[string]any{"sessionId": s.id, "cwd": l.share.cwd, "mcpServers": l.share.servers,
		"_meta": map[string]any{followMetaKey: claim}}
	if l.share.servers == nil {
		params["mcpServers"] = []protocol.McpServerConfig{}
	}
	if len(l.share.dirs) > 0 {
		params["additionalDirectories"] = l.share.dirs
	}
	s.shareLeg(ctx, l, protocol.MustMarshal(&protocol.Message{JSONRPC: "2.0", ID: followID,
		Method: protocol.MethodSessionResume, Params: protocol.MustMarshal(params)}))
}

// followAnswered: the new holder answered l's follow. Refused, the stub
// ends (its clients load the session again). Else the leg settles, once
// its old holder's "moved" to each prompt it got after the session left
// came (bounceDue; at most followTimeout).
func (s *session) followAnswered(ctx actor.Context, l *stubLeg, msg *protocol.Message) {
	if msg.Error != nil {
		s.log.Info().Str("holder", s.stub.holder).Str("error", msg.Error.Message).Msg("share: the new holder refused the follow")
		s.endStub(ctx, stubHolderGone)
		return
	}
	var res struct {
		Meta map[string]followAnswer `json:"_meta"`
	}
	_ = protocol.Unmarshal(msg.Result, &res)
	settling := legState{kind: legSettling, owes: map[string]bool{}}
	for _, id := range res.Meta[followMetaKey].Owes {
		settling.owes[protocol.IDKey(id)] = true
	}
	if l.bounceDue(settling.owedThere) {
		l.become(settling)
		self, root, leg := ctx.Self(), ctx.ActorSystem().Root, l.pid
		time.AfterFunc(s.followTimeout(), func() { root.Send(self, &legSettleDue{leg: leg}) })
		return
	}
	s.settle(ctx, l, settling.owes)
}

// settle attaches l to the holder that answered its follow: the requests
// the old holder did not answer are sent again, but those the new holder
// owes, and the prompts whose turn was cut (or whose "moved" did not come
// in time), answered cancelled; then what waited, all in the order the
// connection sent them. owes are the prompts that holder owes it.
func (s *session) settle(ctx actor.Context, l *stubLeg, owes map[string]bool) {
	l.stopFormer(ctx)
	l.become(legState{kind: legAttached})
	var again []relayed
	for key, r := range l.pending {
		switch {
		case !r.sent || owes[key]:
			// waiting, or answered by the new holder
		case r.method == protocol.MethodSessionPrompt && !r.bounced:
			delete(l.pending, key)
			s.respondTo(ctx, l.conn, r.id, cancelledPrompt(), nil)
		case r.msg == nil:
			// restored after a connection move (legRestore): the request
			// itself stayed with the old leg, so it cannot be sent again
			delete(l.pending, key)
			s.respondTo(ctx, l.conn, r.id, nil, protocol.ErrSessionHolderGone(s.id, s.stub.holder))
		default:
			again = append(again, r.relayed)
		}
	}
	again = append(again, l.waiting...)
	slices.SortFunc(again, func(a, b relayed) int { return cmp.Compare(a.seq, b.seq) })
	l.waiting = nil
	for _, r := range again {
		s.sendRelayed(ctx, l, r.msg)
	}
	s.answerLegOut(ctx, l)
}

// fromFormerProxy: a frame of a proxy l followed the session away from.
// Only its answer "moved" to a request that reached it after the session
// left matters: that request is sent again (now, or once l is attached).
func (s *session) fromFormerProxy(ctx actor.Context, l *stubLeg, body []byte) {
	msg, e := protocol.Decode(body)
	if e != nil || !msg.IsResponse() || msg.Error == nil || !isMovedError(msg.Error) {
		return
	}
	r := l.pending[protocol.IDKey(msg.ID)]
	if r == nil || r.msg == nil {
		return
	}
	r.bounced = true
	switch l.state.kind {
	case legAttached:
		s.sendRelayed(ctx, l, r.msg)
	case legSettling:
		if !l.bounceDue(l.state.owedThere) {
			s.settle(ctx, l, l.state.owes)
		}
	default:
		s.takeOnceLetGo(ctx) // it may have waited for this answer (bounceDue)
	}
}

// settleDue: l waited for its old holder's "moved" as long as it follows
// a session; it settles now.
func (s *session) settleDue(ctx actor.Context, m *legSettleDue) {
	if l := s.stub.legAt(m.leg); l != nil && l.state.kind == legSettling {
		s.log.Warn().Str("holder", s.stub.holder).Msg("share: the old holder's answer to a prompt it got after the session left did not come; the leg goes on")
		s.settle(ctx, l, l.state.owes)
	}
}

// isMovedError is errSessionMoved as a proxy answers it.
func isMovedError(e *protocol.Error) bool {
	moved := errSessionMoved()
	return e.Code == moved.Code && e.Message == moved.Message && string(protocol.MustMarshal(e.Data)) == string(protocol.MustMarshal(moved.Data))
}

// legRequests is the tag of every request a leg's proxy asked its client
// (withdrawn when the leg follows: the new holder asks again).
type legRequests struct{ leg *actor.PID }
