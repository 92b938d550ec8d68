package actors

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// An adopted turn keeps its client's MCP servers (durable turns, issue 29).
// A session opened by Server.Adopt has no client, so no servers; the model
// would see their tools vanish mid-turn. So:
//
//   - A drain hands the servers over: the paused session leaves its
//     configuration (env and headers included: the client's secrets) with
//     the Server, in memory only (mcpParcels); PauseTurns passes it to its
//     caller with the session's id, the cluster carries it in its Adopt
//     request to the adopting pod (pods' own link), and Server.AdoptHanded
//     opens the session with them as its servers.
//   - The turn record names the servers (store.RunningTurn.MCPServers, names
//     only). A turn resumed without any (its holder died: the recovery
//     scan's Adopt) holds its next step until a client brings servers — a
//     client following the session here rejoins with its own — or
//     followTimeout passes, then goes on without them.
//   - Either way a resumed turn's next step (model request, or the calls
//     of its last reply) waits for servers still starting, within their
//     startup budget (MCPStartupTimeout), as a prompt does (holdPrompt).

type (
	// mcpResume is the resumed turn's wait for the session's MCP servers.
	mcpResume struct {
		// turn is the resumed turn (its record names awaited, see
		// mcpServerNames); holding: it waits for resumeGo.
		turn    *actor.PID
		holding bool
		// awaited are the servers the turn record names that no client
		// brought yet; waitOver: followTimeout passed since the resume.
		awaited  []string
		waitOver bool
		since    time.Time
		gen      int
	}
	// resumeGo, from the session to its resumed turn holding its next
	// step: the servers are there (or will not be): go on.
	resumeGo struct{}
	// mcpAwaitOver: the wait of resume gen for a client's servers is over.
	mcpAwaitOver struct{ gen int }
	// mcpParcels are the MCP configurations of the sessions this process
	// paused, by session id, until PauseTurns hands them to its caller.
	mcpParcels struct{ m sync.Map }
)

func (*resumeGo) IgnoreDeadLetterLogging()     {}
func (*mcpAwaitOver) IgnoreDeadLetterLogging() {}

// leaveMCPParcel leaves the paused session's servers for PauseTurns to
// hand over with it (nothing when it has none).
func (s *session) leaveMCPParcel() {
	if len(s.mcp.configured) > 0 && s.deps.parcels != nil {
		s.deps.parcels.m.Store(s.id, protocol.MustMarshal(s.mcp.configured))
	}
}

// take is the parcel left by session id, once (nil when none).
func (p *mcpParcels) take(id string) []byte {
	if p == nil {
		return nil
	}
	v, ok := p.m.LoadAndDelete(id)
	if !ok {
		return nil
	}
	return v.([]byte)
}

// parcelServers decodes a parcel (nil, or unreadable: none).
func parcelServers(parcel []byte) []protocol.McpServerConfig {
	if len(parcel) == 0 {
		return nil
	}
	var servers []protocol.McpServerConfig
	if protocol.Unmarshal(parcel, &servers) != nil {
		return nil
	}
	return servers
}

// handedServers makes servers, handed over with an Adopt, the session's
// when it has none of its own (its clients' configuration wins).
func (s *session) handedServers(ctx actor.Context, servers []protocol.McpServerConfig) {
	if len(servers) > 0 && len(s.mcp.configured) == 0 {
		s.configureMCP(ctx, servers, s.meta.Cwd)
	}
}

// mcpServerNames are the names the turn record gives: the configured
// servers', else, for the resumed turn, those it still awaits.
func (s *session) mcpServerNames() []string {
	if len(s.mcp.configured) > 0 {
		names := make([]string, len(s.mcp.configured))
		for i := range s.mcp.configured {
			names[i] = s.mcp.configured[i].Name
		}
		return names
	}
	if r := &s.mcp.resume; r.turn != nil && r.turn.Equal(s.turn.pid) {
		return r.awaited
	}
	return nil
}

// holdResume reports whether the turn resuming prior is to hold its next
// step for the session's MCP servers: some are starting, or its record
// names servers the session has none of and no client is attached to
// say otherwise (then the wait is bounded by followTimeout).
func (s *session) holdResume(ctx actor.Context, prior *store.RunningTurn) bool {
	r := &s.mcp.resume
	r.gen++
	*r = mcpResume{gen: r.gen, since: time.Now()}
	if len(s.mcp.configured) == 0 && len(prior.MCPServers) > 0 && s.clients.len() == 0 {
		r.awaited = prior.MCPServers
		gen, self, root := r.gen, ctx.Self(), ctx.ActorSystem().Root
		time.AfterFunc(s.followTimeout(), func() { root.Send(self, &mcpAwaitOver{gen: gen}) })
	}
	r.holding = !s.resumeReady()
	return r.holding
}

// resumeReady: the resumed turn may take its next step — no server is
// starting, and none is awaited (or the wait is over).
func (s *session) resumeReady() bool {
	r := &s.mcp.resume
	return !s.mcpStarting() && (len(s.mcp.configured) > 0 || len(r.awaited) == 0 || r.waitOver)
}

// resumed notes the resumed turn's actor (spawned after holdResume).
func (s *session) resumed(pid *actor.PID) { s.mcp.resume.turn = pid }

// releaseResume lets the holding resumed turn go on once it may
// (resumeReady): the servers settled, or the wait for them is over.
func (s *session) releaseResume(ctx actor.Context) {
	r := &s.mcp.resume
	if !r.holding || !s.resumeReady() {
		return
	}
	r.holding = false
	if !s.turn.running() || !r.turn.Equal(s.turn.pid) {
		return
	}
	ev := s.log.Info().Dur("waited", time.Since(r.since)).Int("mcp_servers", len(s.mcp.configured))
	if len(s.mcp.configured) == 0 && len(r.awaited) > 0 {
		ev = ev.Strs("missing", r.awaited)
	}
	ev.Msg("resumed turn goes on with the session's MCP servers as they are")
	ctx.Send(r.turn, &resumeGo{})
}

// mcpAwaited: followTimeout passed since the resume; no client brought
// the servers the turn record names (or they are still starting).
func (s *session) mcpAwaited(ctx actor.Context, m *mcpAwaitOver) {
	if r := &s.mcp.resume; m.gen == r.gen {
		r.waitOver = true
		s.releaseResume(ctx)
	}
}

// resumeWhenReady takes the resumed turn's next step once its context is
// gathered and the session let it go (resumeGo).
func (t *turn) resumeWhenReady(ctx actor.Context) {
	if t.ended || t.resume == nil || t.resume.awaitContext || t.resume.awaitMCP {
		return
	}
	t.resumeStep(ctx)
}
