package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
)

// The holder's side of a follow (session_follow.go): a session keeps, for
// a short while after this pod took it, every update it sent all its
// clients, so that a client following it here from the pod that let it go
// gets them all, then the rest live — nothing from before (the old holder
// sent that) and nothing twice.

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
		// tenure numbers the takes, so that the timer of an earlier one
		// ends nothing.
		tenure int
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
	f.on, f.frames, f.bytes = true, nil, 0
	self, root, tenure := ctx.Self(), ctx.ActorSystem().Root, f.tenure
	time.AfterFunc(followWindow, func() { root.Send(self, &followWindowOver{tenure: tenure}) })
}

// endFollowLog: the window of tenure is over.
func (s *session) endFollowLog(m *followWindowOver) {
	if f := &s.followers; m.tenure == f.tenure && f.on {
		f.on, f.frames, f.bytes = false, nil, 0
	}
}

// keep keeps a frame sent to every client.
func (f *followLog) keep(data []byte) {
	if !f.on {
		return
	}
	if len(f.frames) >= maxFollowFrames || f.bytes+len(data) > maxFollowBytes {
		f.on, f.frames, f.bytes = false, nil, 0
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
// the following client c is owed this session answers: the running
// turn's, when its own connection is gone (a turn resumed here).
func (s *session) claimFollow(c *client, claim *followClaim) {
	owes := []protocol.RawMessage{}
	detached := func(p *actor.PID) bool { return p == nil || s.clients.find(p) == nil }
	for _, id := range claim.Owed {
		if s.turn.answerTo(id, c.pid, detached) {
			owes = append(owes, id)
		}
	}
	c.follow = &followClaim{Owed: owes}
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
	c.follow = nil
	return meta
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
