package actors

import (
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
)

// The holder's side of a follow (session_follow.go): a session keeps, for
// a short while after this pod took it, every update it sent all its
// clients, so that a client following it here from the pod that let it go
// gets them all, then the rest live — nothing from before (the old holder
// sent that) and nothing twice. So too the answer of a resumed turn whose
// prompt's connection was not here: a turn may end before the client
// that sent its prompt follows the session here (its stub finds the new
// holder within followPoll), and is answered once it does. The session
// stays while it keeps an answer nobody took (endUnattended).

// followWindow is how long after taking the session it keeps what it sent
// (a follower finds the new holder within Config.FollowTimeout); past the bounds
// it keeps nothing and refuses followers.
const (
	followWindow    = 10 * time.Second
	maxFollowFrames = 4096
	maxFollowBytes  = 4 << 20
)

type (
	// followLog is what the session sent every client since this pod took
	// it, while on.
	followLog struct {
		// on: keeping; off, a follower would miss something.
		on     bool
		frames [][]byte
		bytes  int
		// answers are the answers of resumed turns that went to nobody
		// (their prompt's connection was not here), in the order kept: a
		// list, not a map by prompt, as a prompt is found by promptKey.names
		// (an unknown client is any client), never by its key alone.
		answers []keptAnswer
		// tenure numbers the takes, so that the timer of an earlier one
		// ends nothing.
		tenure int
	}
	// keptAnswer is the answer data of prompt, kept (keepAnswer).
	keptAnswer struct {
		prompt promptKey
		data   []byte
	}
	// followWindowOver ends the log of tenure.
	followWindowOver struct{ tenure int }
)

func (*followWindowOver) IgnoreDeadLetterLogging() {}

// startFollowLog: this pod took the session (opened or acquired it back),
// in cluster mode: what it sends all its clients is kept for followWindow.
func (s *session) startFollowLog(ctx actor.Context) {
	if s.deps.Handover == nil {
		return
	}
	f := &s.followers
	f.tenure++
	f.on, f.frames, f.bytes, f.answers = true, nil, 0, nil
	self, root, tenure := ctx.Self(), ctx.ActorSystem().Root, f.tenure
	time.AfterFunc(followWindow, func() { root.Send(self, &followWindowOver{tenure: tenure}) })
}

// endFollowLog: the window of tenure is over; a session kept for an
// answer nobody took ends now if nothing else keeps it.
func (s *session) endFollowLog(ctx actor.Context, m *followWindowOver) {
	if f := &s.followers; m.tenure == f.tenure && f.on {
		f.on, f.frames, f.bytes, f.answers = false, nil, 0, nil
		s.endUnattended(ctx)
	}
}

// keepAnswer keeps the answer data of prompt p, which went to nobody
// here, for a client following the session here (claimFollow).
func (f *followLog) keepAnswer(p promptKey, data []byte) {
	if !f.on || p.id == "" {
		return
	}
	for i, a := range f.answers {
		if a.prompt == p {
			f.answers[i].data = data // kept again: the last answer stands
			return
		}
	}
	f.answers = append(f.answers, keptAnswer{prompt: p, data: data})
}

// takeAnswer is the kept answer of prompt p, once: the first kept that
// names it.
func (f *followLog) takeAnswer(p promptKey) ([]byte, bool) {
	for i, a := range f.answers {
		if a.prompt.names(p) {
			f.answers = slices.Delete(f.answers, i, i+1)
			return a.data, true
		}
	}
	return nil, false
}

// owesAnswers: a kept answer waits for its client.
func (f *followLog) owesAnswers() bool { return len(f.answers) > 0 }

// keep keeps a frame sent to every client.
func (f *followLog) keep(data []byte) {
	if !f.on {
		return
	}
	if len(f.frames) >= maxFollowFrames || f.bytes+len(data) > maxFollowBytes {
		f.on, f.frames, f.bytes, f.answers = false, nil, 0, nil
		return
	}
	f.frames = append(f.frames, data)
	f.bytes += len(data)
}

// followFrom serves the attach of a client following the session here:
// it is sent what the session sent every client since this pod took it,
// or, when that was not kept whole, refused (it reports false).
func (s *session) followFrom(ctx actor.Context, m *attach) bool {
	if !s.followers.on {
		s.respondTo(ctx, m.conn, m.reqID, nil, protocol.ErrInvalidParams(map[string]string{
			"_meta": "cannot follow the session without missing updates: load it"}))
		return false
	}
	for _, f := range s.followers.frames {
		ctx.Send(m.conn, &outbound{frame: Frame{Data: f, SessionID: s.id}})
	}
	return true
}

// claimFollow notes, for the answer to its follow, which of the prompts
// claim names the session owes client c: its running turn's, when that
// turn's connection is gone (it answers c instead), or a resumed turn's
// that ended before c came (its kept answer, sent after the follow's).
// Each is c's client's own: the claim names ids, the connection whose
// they are is c's (sessionWho.client), never the claim's say.
func (s *session) claimFollow(c *client, claim *followClaim) {
	owes := []protocol.RawMessage{}
	var kept [][]byte
	detached := func(p *actor.PID) bool { return p == nil || s.clients.find(p) == nil }
	for _, id := range claim.Owed {
		p := keyOfPrompt(c.who.client, id)
		if s.turn.answerTo(p, c.pid, detached) {
			owes = append(owes, id)
		} else if data, ok := s.followers.takeAnswer(p); ok {
			owes = append(owes, id)
			kept = append(kept, data)
		}
	}
	c.follow = &followClaim{Owed: owes, answers: kept}
}

// followMeta adds to a resume's answer to conn, when it is a follow, the
// prompts the session owes it (claimFollow).
func (s *session) followMeta(conn *actor.PID, meta map[string]any) map[string]any {
	c := s.clients.find(conn)
	if c == nil || c.follow == nil {
		return meta
	}
	if meta == nil {
		meta = map[string]any{}
	}
	meta[followMetaKey] = followAnswer{Owes: c.follow.Owed}
	return meta
}

// sendOwedAnswers sends conn, once its follow is answered, the kept
// answers it is owed (claimFollow): the follow is done.
func (s *session) sendOwedAnswers(ctx actor.Context, conn *actor.PID) {
	c := s.clients.find(conn)
	if c == nil || c.follow == nil {
		return
	}
	for _, data := range c.follow.answers {
		ctx.Send(conn, &outbound{frame: Frame{Data: data, SessionID: s.id}})
	}
	c.follow = nil
}

// followOf is the follow a resume relayed by a stub asks for (its
// _meta), nil for any other; only a proxy connection may follow.
func (c *connection) followOf(m *protocol.Message) *followClaim {
	if c.stub == nil {
		return nil
	}
	var p struct {
		Meta map[string]*followClaim `json:"_meta"`
	}
	if protocol.Unmarshal(m.Params, &p) != nil {
		return nil
	}
	if f := p.Meta[followMetaKey]; f != nil {
		return f
	}
	return nil
}
