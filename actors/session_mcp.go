package actors

import (
	"context"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools"
)

// The session's MCP servers: configured from session/new, load, resume and
// fork, run by a child mcpActor. The request that configured them is
// answered once every server is connected or failed, or after
// MCPStartupTimeout, whichever comes first, from a message: the session's
// mailbox never waits. A prompt that arrives while servers are still
// within that budget (a session brought back after eviction) waits the
// same way. Each later change is told to the client as a
// session_info_update with the same _meta, and each failure as a notice
// when the client shows notices.

// sessionMCP is the session's view of its MCP servers.
type sessionMCP struct {
	// start are the servers of the request that started the session.
	start []protocol.McpServerConfig
	set   *mcpToolSet
	pid   *actor.PID
	// configured is the last configuration sent to the actor (with cwd).
	configured []protocol.McpServerConfig
	cwd        string
	status     []mcpServerStatus
	settled    bool
	// deadline ends the startup budget of the latest configuration; gen
	// tells its budget timer from older ones.
	deadline time.Time
	gen      int
	// pending are start requests answered when the servers settle.
	pending []pendingStart
	// held is a prompt waiting for the servers (see holdPrompt), or for
	// prompts/get when resolving (session_mcp_prompts.go).
	held      *sessionRequest
	resolving bool
	// stopGet ends the prompts/get of a resolving prompt.
	stopGet context.CancelFunc
	// prompts are the servers' prompts as slash commands; commandsSent the
	// command list last sent to the client.
	prompts      []mcpPrompt
	commandsSent []protocol.AvailableCommand
	// reported is the status last told to the client; noticed the failures
	// already told as notices.
	reported []mcpServerStatus
	noticed  map[string]bool
	// resume: a resumed turn's wait for the servers (session_adopt_mcp.go).
	resume mcpResume
}

type pendingStart struct {
	kind  startKind
	reqID protocol.RawMessage
	conn  *actor.PID
}

// mcpBudget is the startup budget of configuration gen running out.
type mcpBudget struct{ gen int }

func (*mcpBudget) IgnoreDeadLetterLogging() {}

// configureMCP gives the session its servers (an empty list closes them).
// An unchanged configuration keeps the running servers as they are.
func (s *session) configureMCP(ctx actor.Context, servers []protocol.McpServerConfig, cwd string) {
	m := &s.mcp
	if m.pid == nil && len(servers) == 0 {
		return
	}
	if m.pid != nil && m.cwd == cwd && slices.EqualFunc(m.configured, servers,
		func(a, b protocol.McpServerConfig) bool { return a.Equal(&b) }) {
		return
	}
	if m.pid == nil {
		set, log := m.set, s.log
		props := actor.PropsFromProducer(func() actor.Actor { return newMCPActor(s.deps, set, log) },
			actor.WithReceiverMiddleware(keepStack))
		m.pid = ctx.Spawn(props)
	}
	m.configured, m.cwd = servers, cwd
	m.gen++
	ctx.Send(m.pid, &mcpConfigure{servers: servers, cwd: cwd, gen: m.gen, jail: s.sandboxJail()})
	if len(servers) == 0 {
		m.status, m.settled = []mcpServerStatus{}, true
		return
	}
	m.settled = false
	budget := s.deps.Config.MCPStartupTimeout
	m.deadline = time.Now().Add(budget)
	gen, self, root := m.gen, ctx.Self(), ctx.ActorSystem().Root
	time.AfterFunc(budget, func() { root.Send(self, &mcpBudget{gen: gen}) })
}

// mcpWaiting: a start request or a prompt waits for the servers (the
// session is not idle).
func (s *session) mcpWaiting() bool { return len(s.mcp.pending) > 0 || s.mcp.held != nil }

// mcpStarting: servers are still connecting within their startup budget.
func (s *session) mcpStarting() bool {
	return !s.mcp.settled && time.Now().Before(s.mcp.deadline)
}

// answerWhenReady answers a start request now, or once the servers settle
// or their budget runs out.
func (s *session) answerWhenReady(ctx actor.Context, kind startKind, reqID protocol.RawMessage, conn *actor.PID) {
	if reqID != nil && s.mcpStarting() {
		s.mcp.pending = append(s.mcp.pending, pendingStart{kind: kind, reqID: reqID, conn: conn})
		return
	}
	s.answerStart(ctx, kind, reqID, conn)
	s.reportMCP(ctx, reqID != nil)
}

// flushMCPWaits reports the servers' state and, once they are no longer
// starting, answers what waited for them: pending start requests (with the
// state as it is), then a held prompt.
func (s *session) flushMCPWaits(ctx actor.Context) {
	s.releaseResume(ctx)
	if s.mcpStarting() {
		s.reportMCP(ctx, false)
		return
	}
	pending := s.mcp.pending
	s.mcp.pending = nil
	for _, p := range pending {
		s.answerStart(ctx, p.kind, p.reqID, p.conn)
	}
	s.reportMCP(ctx, len(pending) > 0)
	if held := s.mcp.held; held != nil && !s.mcp.resolving {
		s.mcp.held = nil
		s.prompt(ctx, held)
	}
}

// answerPendingStarts answers the waiting start requests now (the session
// moves to another connection).
func (s *session) answerPendingStarts(ctx actor.Context) { s.answerPendingStartsOf(ctx, nil) }

// answerPendingStartsOf answers now, with the servers' state as it is, the
// waiting start requests of conn (every one when conn is nil).
func (s *session) answerPendingStartsOf(ctx actor.Context, conn *actor.PID) {
	kept := s.mcp.pending[:0]
	answered := 0
	for _, p := range s.mcp.pending {
		if conn != nil && !conn.Equal(p.conn) {
			kept = append(kept, p)
			continue
		}
		s.answerStart(ctx, p.kind, p.reqID, p.conn)
		answered++
	}
	clear(s.mcp.pending[len(kept):])
	s.mcp.pending = kept
	if answered > 0 {
		s.mcp.reported = s.mcp.status
	}
}

func (s *session) onMCPStatus(ctx actor.Context, m *mcpStatus) {
	if s.mcp.pid == nil || m.gen != s.mcp.gen {
		return // stale: an older configuration, or an actor that is gone
	}
	s.mcp.status, s.mcp.settled, s.mcp.prompts = m.servers, m.settled, m.prompts
	s.flushMCPWaits(ctx)
}

func (s *session) onMCPBudget(ctx actor.Context, m *mcpBudget) {
	if m.gen != s.mcp.gen {
		return
	}
	s.mcp.deadline = time.Time{}
	if !s.mcp.settled {
		for _, st := range s.mcp.status {
			if st.Status == "connecting" {
				s.log.Warn().Str("mcp_server", st.Name).Dur("budget", s.deps.Config.MCPStartupTimeout).
					Msg("MCP server still starting after the startup budget; it keeps starting in the background")
			}
		}
	}
	s.flushMCPWaits(ctx)
}

// mcpMeta is the _meta of responses and session_info_update (nil when the
// session has no MCP server).
func (s *session) mcpMeta() map[string]any {
	if s.mcp.pid == nil && len(s.mcp.status) == 0 {
		return nil // never had a server
	}
	status := s.mcp.status
	if status == nil {
		status = []mcpServerStatus{}
	}
	return map[string]any{mcpMetaKey: status}
}

// reportMCP tells the client a change of the servers' state (nothing while
// a start request waits: its answer will carry the state; answered: a
// response just carried it) and each new failure as a notice.
func (s *session) reportMCP(ctx actor.Context, answered bool) {
	m := &s.mcp
	if len(m.pending) > 0 {
		return
	}
	if !answered && !slices.Equal(m.reported, m.status) && (m.reported != nil || len(m.status) > 0) {
		s.emit(ctx, protocol.SessionInfoUpdate{SessionUpdate: protocol.UpdateSessionInfo, Meta: s.mcpMeta()})
	}
	m.reported = m.status
	s.reportCommands(ctx)
	if m.noticed == nil {
		m.noticed = map[string]bool{}
	}
	for _, st := range m.status {
		failed := st.Status == "failed"
		if failed && !m.noticed[st.Name] {
			s.emitNotice(ctx, protocol.NoticeUpdate{SessionUpdate: protocol.UpdateNotice, Severity: "warning",
				Title: "MCP server '" + st.Name + "' failed", Description: st.Error})
		}
		m.noticed[st.Name] = failed
	}
}

// holdPrompt keeps a prompt until the servers settle (or their budget
// ends), so its first model request already has their tools.
func (s *session) holdPrompt(r *sessionRequest) bool {
	if !s.mcpStarting() {
		return false
	}
	s.mcp.held = r
	s.inHand.handedOff(r)
	return true
}

// cancelHeldPrompt answers a held prompt cancelled (cancel, close, the
// session moving or going away).
func (s *session) cancelHeldPrompt(ctx actor.Context) {
	if r := s.mcp.held; r != nil {
		if s.mcp.stopGet != nil {
			s.mcp.stopGet()
		}
		s.mcp.held, s.mcp.resolving, s.mcp.stopGet = nil, false, nil
		s.respondTo(ctx, r.conn, r.id, cancelledPrompt(), nil)
	}
}

// mcpTurnTools is the MCP tool source and filter of a new turn: in plan
// mode only the read-only ones.
func (s *session) mcpTurnTools() (*mcpToolSet, func(tools.Tool) bool) {
	if s.meta.Mode == "plan" {
		return s.mcp.set, func(t tools.Tool) bool { return t.ReadOnly() }
	}
	return s.mcp.set, nil
}

// onMCPCrash: the MCP actor panicked (it is stopped, its servers closed).
func (s *session) onMCPCrash(ctx actor.Context, m *childCrashed) {
	s.log.Error().Interface("panic", m.reason.value).Bytes("stack", m.reason.stack).Msg("MCP actor crashed; the session's MCP servers are closed")
	s.mcp.pid, s.mcp.configured = nil, nil
	failed := make([]mcpServerStatus, len(s.mcp.status))
	for i, st := range s.mcp.status {
		failed[i] = mcpServerStatus{Name: st.Name, Type: st.Type, Status: "failed", Error: "internal error"}
	}
	s.mcp.status, s.mcp.prompts = failed, nil
	s.mcp.settled = true
	s.flushMCPWaits(ctx)
}
