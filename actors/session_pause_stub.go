package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// A session paused for a drain keeps its clients of this pod (durable
// turns, issue 29). Its turn goes on at the pod that adopts the session
// (Server.Adopt); the clients of other pods follow it there through their
// stubs (session_follow.go), and this pod's own clients follow it the same
// way: the session becomes a stub (phaseStub) whose legs are those
// clients, each following the session to its next holder and owed the
// prompt it sent, which the adopter's resumed turn answers through the
// leg's new proxy. The connections then move off the draining pod with
// their legs, as any connection with a stub leg (connection_move.go); a
// move asked while a leg still follows waits for it to rejoin (legOut). A
// connection that cannot move (a WebSocket) goes at shutdown; the turn
// goes on without it: the leg's follow said its pod drains
// (followClaim.Drains), the proxy noted it (proxiedStub.drains) and
// its detach keeps the turn (detach.keepTurn: answered to nobody, its end
// recorded, as a turn resumed after a crash). A repoint (the connection
// moved: a live client again) clears it, so a moved client that leaves
// later cancels its turn as any client does.

// stayForClients makes the paused session the stub its clients of this
// pod follow it through, and reports whether it did: in cluster mode, with
// the lease let go of keeping the turn and a client of this pod attached.
// Otherwise the session ends as before (finishEnding), its clients told
// it left. prompt is the paused turn's.
func (s *session) stayForClients(ctx actor.Context, prompt turnPrompt) bool {
	if !s.phase.paused || s.deps.Handover == nil {
		return false
	}
	if _, ok := s.deps.Store.(store.HolderReader); !ok {
		return false
	}
	var own, proxies []*client
	for _, c := range s.clients.list {
		if s.isProxy(ctx, c.pid) {
			proxies = append(proxies, c)
		} else {
			own = append(own, c)
		}
	}
	if len(own) == 0 {
		return false
	}
	p := s.phase
	legs := make([]*stubLeg, 0, len(own))
	for _, c := range own {
		legs = append(legs, s.followingLeg(ctx, c, prompt))
	}
	if s.mcp.pid != nil {
		ctx.Stop(s.mcp.pid) // its servers start again at the adopter
		s.mcp.pid = nil
	}
	s.release(ctx) // the lease let go of already: the handle closes
	for _, c := range proxies {
		ctx.Send(c.pid, &sessionLeft{id: s.id, pid: ctx.Self()})
	}
	for _, a := range p.askers {
		if a != nil {
			ctx.Send(a, &handedOff{})
		}
	}
	s.clients = clients{}
	s.stub = &sessionStub{holder: s.incarnation(), legs: legs}
	s.become(phase{kind: phaseStub})
	s.stub.follow.since = time.Now()
	s.lookUpHolder(ctx)
	s.log.Info().Int("clients", len(legs)).Msg("turn paused: the session's clients on this pod follow it to its next holder")
	if p.pauser != nil {
		ctx.Send(p.pauser, &pauseAnswer{paused: true})
	}
	return true
}

// isProxy reports whether pid is the proxy of another pod's stub (its
// stub follows the session by itself), not a client of this pod.
func (s *session) isProxy(ctx actor.Context, pid *actor.PID) bool {
	if pid.Address != ctx.Self().Address {
		return true
	}
	_, proxy := s.deps.shares.proxies.Load(pid.Id)
	return proxy
}

// followingLeg is the leg of c, a client of this pod, following the
// session: the leg's follow names the paused turn's prompt when c sent
// it (owed, answered by the adopter), and its share is c's initialize and
// the session's open as it stands.
func (s *session) followingLeg(ctx actor.Context, c *client, prompt turnPrompt) *stubLeg {
	l := &stubLeg{conn: c.pid, who: c.who, state: legState{kind: legFollowing}, pid: ctx.Spawn(legProps), pending: map[string]*relayedRequest{},
		share: legShare{init: shareInit(c.caps, c.notices, s.compactionUpdates, s.booleanOptions), cwd: s.meta.Cwd,
			servers: s.mcp.configured, dirs: s.meta.AdditionalDirectories, caps: c.caps, notices: c.notices}}
	if prompt.id != nil && c.pid.Equal(prompt.conn) {
		l.seq++
		l.pending[protocol.IDKey(prompt.id)] = &relayedRequest{relayed: relayed{seq: l.seq}, id: prompt.id,
			method: protocol.MethodSessionPrompt, sent: true}
	}
	return l
}
