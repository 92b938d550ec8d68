package actors

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/tools/mcp"
	"github.com/iac-code/iac-code/tools/sandbox"
)

// mcpMetaKey is the `_meta` key of session responses and
// session_info_update that carries the state of the session's MCP servers.
const mcpMetaKey = "iac-code/mcpServers"

// mcpToolSet holds the current MCP tools of a session: an immutable list
// the MCP actor replaces whenever a server's tools change. Turns read it at
// every model request, so a server that became ready, changed its tools or
// went away is seen at the next request.
type mcpToolSet struct{ p atomic.Pointer[[]tools.Tool] }

func (m *mcpToolSet) list() []tools.Tool {
	if m == nil {
		return nil
	}
	if p := m.p.Load(); p != nil {
		return *p
	}
	return nil
}

// mcpServerStatus is one server as the client is told about it.
type mcpServerStatus struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Status string `json:"status"`
	Tools  int    `json:"tools"`
	Error  string `json:"error,omitempty"`
}

// Messages of the MCP actor.
type (
	// mcpConfigure sets the session's servers: unchanged ones are kept,
	// others are closed, new ones started.
	mcpConfigure struct {
		servers []protocol.McpServerConfig
		cwd     string
		gen     int
		// jail contains the stdio servers (nil: not sandboxed).
		jail *sandbox.Jail
	}
	// mcpEvent is a state change of the server started as gen.
	mcpEvent struct {
		gen int
		ev  mcp.Event
	}
	// mcpStatus tells the session the state of all its servers; settled
	// when none is still connecting. gen is the configuration it reflects.
	mcpStatus struct {
		servers []mcpServerStatus
		settled bool
		gen     int
		// prompts are the connected servers' prompts as slash commands.
		prompts []mcpPrompt
	}
)

func (*mcpEvent) IgnoreDeadLetterLogging()  {}
func (*mcpStatus) IgnoreDeadLetterLogging() {}

// mcpServer is one configured server of the actor.
type mcpServer struct {
	cfg     protocol.McpServerConfig
	cwd     string
	gen     int
	srv     *mcp.Server
	state   mcp.State
	tools   []*sdk.Tool
	prompts []*sdk.Prompt
	err     string
}

// mcpActor owns the MCP servers of one session (it is the session's
// child): it starts them concurrently (each in its own goroutines, see
// mcp.Start), publishes their tools in the session's mcpToolSet and
// reports every state change to the session. Closing a server blocks for
// its grace period, so it always happens in a goroutine, never here.
type mcpActor struct {
	deps    *Deps
	set     *mcpToolSet
	log     zerolog.Logger
	servers []*mcpServer
	nextGen int
	// config is the gen of the latest mcpConfigure.
	config int
}

func newMCPActor(deps *Deps, set *mcpToolSet, log zerolog.Logger) *mcpActor {
	return &mcpActor{deps: deps, set: set, log: log}
}

func (a *mcpActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *mcpConfigure:
		a.config = m.gen
		a.configure(ctx, m)
		a.publish(ctx)
	case *mcpEvent:
		for _, s := range a.servers {
			if s.gen == m.gen {
				a.apply(s, m.ev)
				a.publish(ctx)
				return
			}
		}
	case *actor.Stopping:
		a.set.p.Store(nil)
		for _, s := range a.servers {
			go s.srv.Close()
		}
		a.servers = nil
	}
}

func (a *mcpActor) configure(ctx actor.Context, m *mcpConfigure) {
	old := map[string]*mcpServer{}
	for _, s := range a.servers {
		old[s.cfg.Name] = s
	}
	next := make([]*mcpServer, 0, len(m.servers))
	for _, cfg := range m.servers {
		if s, ok := old[cfg.Name]; ok && s.cfg.Equal(&cfg) && s.cwd == m.cwd {
			delete(old, cfg.Name)
			next = append(next, s)
			continue
		}
		next = append(next, a.start(ctx, cfg, m.cwd, m.jail))
	}
	for _, s := range old {
		a.log.Info().Str("mcp_server", s.cfg.Name).Msg("MCP server no longer configured; closing it")
		go s.srv.Close()
	}
	a.servers = next
}

// start begins connecting to one server; its events come back as messages.
func (a *mcpActor) start(ctx actor.Context, cfg protocol.McpServerConfig, cwd string, jail *sandbox.Jail) *mcpServer {
	a.nextGen++
	gen, self, root := a.nextGen, ctx.Self(), ctx.ActorSystem().Root
	env := make([]mcp.Pair, len(cfg.Env))
	for i, kv := range cfg.Env {
		env[i] = mcp.Pair{Name: kv.Name, Value: kv.Value}
	}
	headers := make([]mcp.Pair, len(cfg.Headers))
	for i, h := range cfg.Headers {
		headers[i] = mcp.Pair{Name: h.Name, Value: h.Value}
	}
	srv := mcp.Start(mcp.Config{Name: cfg.Name, Transport: mcp.Transport(cfg.Type), Command: cfg.Command, Args: cfg.Args,
		Env: env, URL: cfg.URL, Headers: headers},
		mcp.Options{Cwd: cwd, Version: a.deps.Config.Version, Log: a.log, Jail: jail,
			OnEvent: func(ev mcp.Event) { root.Send(self, &mcpEvent{gen: gen, ev: ev}) }})
	return &mcpServer{cfg: cfg, cwd: cwd, gen: gen, srv: srv, state: mcp.Connecting}
}

func (a *mcpActor) apply(s *mcpServer, ev mcp.Event) {
	s.state = ev.State
	s.tools, s.prompts = ev.Tools, ev.Prompts
	s.err = ""
	if ev.Err != nil {
		s.err = ev.Err.Error()
	}
}

// publish replaces the session's tool list and reports the servers' state.
func (a *mcpActor) publish(ctx actor.Context) {
	var refs []mcp.Ref
	var owners []*mcpServer
	var remote []*sdk.Tool
	status := make([]mcpServerStatus, 0, len(a.servers))
	settled := true
	for _, s := range a.servers {
		st := mcpServerStatus{Name: s.cfg.Name, Type: s.cfg.Type, Status: string(s.state), Error: s.err}
		switch s.state {
		case mcp.Connected:
			st.Tools = len(s.tools)
			for _, t := range s.tools {
				refs = append(refs, mcp.Ref{Server: s.cfg.Name, Tool: t.Name})
				owners = append(owners, s)
				remote = append(remote, t)
			}
		case mcp.Connecting:
			settled = false
		}
		status = append(status, st)
	}
	names := mcp.PublicNames(refs)
	list := make([]tools.Tool, len(names))
	for i, name := range names {
		list[i] = mcp.NewTool(name, owners[i].srv, remote[i], a.deps.Config.MCPToolTimeout)
	}
	a.set.p.Store(&list)
	ctx.Send(ctx.Parent(), &mcpStatus{servers: status, settled: settled, gen: a.config, prompts: promptCommands(a.servers)})
}
