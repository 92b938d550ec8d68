package actors

import (
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// The session's permission arbiter: one request asked at a time, of every
// attached client; the first answer wins, the others are withdrawn
// (permission.go has the policy deciding without asking).

// permissionArbiter asks the session's permission requests one at a time;
// only this file writes its fields.
type permissionArbiter struct {
	// active is the ask being asked; queue the asks behind it.
	active *permissionAsk
	queue  []*permissionAsk
	// asked are the clients asked active that have not answered.
	asked []*permissionTag
}

// queueAsk keeps a for after the active ask.
func (s *session) queueAsk(a *permissionAsk) { s.perm.queue = append(s.perm.queue, a) }

// activeGone: the active ask went without an answer (its diff's tool
// stopped, or withdrew it); the asks behind it go on.
func (s *session) activeGone(ctx actor.Context) {
	s.perm.active = nil
	s.decideQueued(ctx)
}

// permissionTag tags the request of ask sent to the client of conn.
type permissionTag struct {
	ask  *permissionAsk
	conn *actor.PID
}

func (s *session) askClient(ctx actor.Context, a *permissionAsk) {
	s.perm.active = a // later asks queue behind this one meanwhile
	if a.preview != nil {
		// The tool's actor has the file read, off this one. Should it stop
		// before it answers (a crash, a sub-agent's turn stopping its
		// tools), previewGone lets the asks behind it go on.
		ctx.Watch(a.replyTo)
		ctx.Send(a.replyTo, &previewWanted{ask: a, session: ctx.Self(), caps: s.promptCaps()})
		return
	}
	s.sendAsk(ctx, a)
}

// sendAsk sends the request of a to every client of the session.
func (s *session) sendAsk(ctx actor.Context, a *permissionAsk) {
	s.perm.active = a
	sandboxedToolCall(a, s.promptCaps())
	s.perm.asked = nil
	for _, c := range s.clients.list {
		s.askOne(ctx, a, c.pid)
	}
}

// askOne sends the request of a to the client of conn.
func (s *session) askOne(ctx actor.Context, a *permissionAsk, conn *actor.PID) {
	if a.preview != nil {
		return // its diff is being read: sendAsk asks every client, conn too
	}
	tag := &permissionTag{ask: a, conn: conn}
	s.perm.asked = append(s.perm.asked, tag)
	ctx.Send(conn, &outboundRequest{
		sessionID: s.id,
		method:    protocol.MethodRequestPermission,
		params: protocol.RequestPermissionRequest{
			SessionID: s.id,
			ToolCall:  a.toolCall,
			Options:   a.options(),
		},
		replyTo: ctx.Self(),
		tag:     tag,
	})
}

// unasked drops tag from the clients still asked.
func (s *session) unasked(tag *permissionTag) {
	for i, t := range s.perm.asked {
		if t == tag {
			s.perm.asked = append(s.perm.asked[:i], s.perm.asked[i+1:]...)
			return
		}
	}
}

// withdrawAsked withdraws the request from every client still asked.
func (s *session) withdrawAsked(ctx actor.Context) {
	for _, t := range s.perm.asked {
		withdraw(ctx, t.conn, t)
	}
	s.perm.asked = nil
}

// forgetAsked: conn left while the turn goes on; its answer is not waited
// for. When it was the last one asked, the request is answered as rejected
// (as an error answer is).
func (s *session) forgetAsked(ctx actor.Context, conn *actor.PID) {
	for _, t := range s.perm.asked {
		if t.conn.Equal(conn) {
			s.permissionAnswered(ctx, &clientAnswer{tag: t, err: protocol.NewError(protocol.CodeRequestCancelled, "the client left", nil)})
			return
		}
	}
}

func (s *session) permissionAnswered(ctx actor.Context, m *clientAnswer) {
	tag, ok := m.tag.(*permissionTag)
	if !ok || tag.ask != s.perm.active {
		return // an answer for a turn that has ended
	}
	a := tag.ask
	s.unasked(tag)
	if m.err != nil && len(s.perm.asked) > 0 {
		s.log.Info().Int("code", m.err.Code).Str("message", m.err.Message).Msg("a client did not answer a permission request; waiting for the others")
		return
	}
	s.withdrawAsked(ctx) // the first answer wins
	s.perm.active = nil
	d := permissionDecision{reason: permissionDenied, caps: s.promptCaps()}
	if m.err != nil {
		s.log.Warn().Int("code", m.err.Code).Str("message", m.err.Message).Msg("permission request failed; treating as reject")
	} else {
		kind, cancelled := permissionOutcome(m.result)
		d.cancelled = cancelled
		d.allow = strings.HasPrefix(kind, "allow_")
		switch kind {
		case protocol.AllowAlways:
			s.remember(a.key, store.Allow)
		case protocol.RejectAlways:
			s.remember(a.key, store.Deny)
		}
	}
	outcome := "deny"
	switch {
	case d.cancelled:
		outcome = "cancelled"
	case d.allow:
		outcome = "allow"
	}
	s.auditPermission(a, outcome, "client")
	ctx.Send(a.replyTo, &d)
	// Queued asks may now be answered by what was just remembered.
	s.decideQueued(ctx)
}

// decideQueued decides the asks that queued behind the one that was
// active, in order (the first the policy does not answer becomes active).
func (s *session) decideQueued(ctx actor.Context) {
	queue := s.perm.queue
	s.perm.queue = nil
	for _, next := range queue {
		s.decidePermission(ctx, next)
	}
}

// previewGone: the actor of a tool stopped. When its ask is the active one
// and its diff is still being read, no answer will come: the asks queued
// behind it go on.
func (s *session) previewGone(ctx actor.Context, who *actor.PID) {
	if a := s.perm.active; a != nil && a.preview != nil && a.replyTo.Equal(who) {
		s.activeGone(ctx)
	}
}

// dropPermissionAsks forgets the pending requests (the turn ended). Clients
// of a shared session are told that theirs is moot; a single client, which
// cancelled or was moved away, answers (or forgets) its own.
func (s *session) dropPermissionAsks(ctx actor.Context) {
	if len(s.perm.asked) > 1 || s.clients.len() > 1 {
		s.withdrawAsked(ctx)
	}
	s.perm.asked = nil
	s.perm.queue = nil
	s.perm.active = nil
}
