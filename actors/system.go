// Package actors is the actor tree of the server: one connection actor per
// client connection, one session actor per session, one turn actor per
// session/prompt and one tool actor per tool invocation. Transports only
// translate bytes to messages for the connection actor and back.
package actors

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors/sysprompt"
	"github.com/iac-code/iac-code/actors/tracing"
	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/tools/sandbox"
)

// Config holds the server's behaviour settings.
type Config struct {
	Version string
	// Home is the state root (IAC_CODE_HOME).
	Home string
	LLM  llm.Config
	// MaxTurnRequests caps model calls per prompt.
	MaxTurnRequests int
	// SessionIdle evicts a session from memory after this long without a
	// message (0 = never); it comes back from disk on the next request.
	SessionIdle time.Duration
	// SessionRelease lets go of an idle session's store handle (its file
	// descriptors and its cross-process lock) after this long without a
	// request or a running turn; the session stays in memory and takes the
	// handle back on its next request (default 30 s).
	SessionRelease time.Duration
	// MaxSessions caps the live sessions of one connection (default 1,000);
	// more get a -32011 error until some are closed.
	MaxSessions int
	// Models are the choices of the `model` config option (default: the
	// configured model only).
	Models []string
	// CompactThreshold is the share of the context window that triggers
	// compaction (default 0.93).
	CompactThreshold float64
	// MCPStartupTimeout bounds how long session/new (load, resume, fork)
	// waits for the session's MCP servers before it answers (default 10 s);
	// a server still starting then keeps starting in the background.
	MCPStartupTimeout time.Duration
	// MCPToolTimeout bounds one MCP tool call (default 600 s).
	MCPToolTimeout time.Duration
	// ClientTimeout bounds each request a tool sends the client (fs/*,
	// terminal/*; default 60 s). Waiting for a terminal's command is
	// bounded by the command's timeout instead.
	ClientTimeout time.Duration
	// MaxImageBytes caps one image of a prompt (default 5 MiB); a larger
	// one is refused with -32602.
	MaxImageBytes int
	// SessionAttach is what a session/load or session/resume of a session
	// live on another connection does: AttachShare (default) attaches that
	// connection too, AttachMove moves the session to it.
	SessionAttach string
	// FollowTimeout bounds how long the clients of a session another pod
	// held wait for the next pod to take it (session_follow.go); 0 means
	// defaultFollowTimeout. IAC_CODE_FOLLOW_TIMEOUT.
	FollowTimeout time.Duration
	// PromptQueue caps the prompts that wait for a session's running turn
	// (default 8); more are refused.
	PromptQueue int
	// WorkspaceRoot (IAC_CODE_WORKSPACE_ROOT), when set, is the directory a
	// session's cwd must resolve into; "{user}" stands for the principal.
	WorkspaceRoot string
	// MaxTurnsPerUser caps the running prompt turns of one principal (0: no
	// cap); a prompt beyond it is refused with -32011.
	MaxTurnsPerUser int
	// Sandbox is the sandbox in force for the processes tools start
	// (zero: none, as with IAC_CODE_SANDBOX=off).
	Sandbox sandbox.Status
	// Unusable, when set, is why this server cannot serve sessions (no
	// state directory): initialize is answered as usual, so that the
	// editor shows this error as the answer to every later request instead
	// of a process that died before the handshake. Store may then be nil.
	Unusable *protocol.Error
}

// Defaults of Config.
const (
	DefaultSessionRelease    = 30 * time.Second
	DefaultMaxSessions       = 1000
	DefaultMCPStartupTimeout = 10 * time.Second
	DefaultMCPToolTimeout    = 600 * time.Second
)

// Deps is what every actor of the tree shares. It is read-only after start.
type Deps struct {
	Config   Config
	Provider llm.Provider
	// LLM, when set, is the provider configuration that authenticate can
	// re-read; it wins over Config.LLM.
	LLM   *llm.Live
	Tools *tools.Registry
	Store store.Store
	Log   zerolog.Logger
	// Metrics may be shared with an edge that exports them; nil = private.
	Metrics *Metrics
	// Ledger counts tokens per principal and holds principals to their
	// token budgets; nil: neither.
	Ledger *Ledger
	// Trace makes the spans of turns, model calls and tool calls; nil when
	// tracing is off (no OTEL_* variable set).
	Trace *tracing.Tracer

	// sessionGuardian is the one guardian of every session actor (see
	// stopOnCrash).
	sessionGuardian *stopOnCrash
	// Handover, in cluster mode, brings a session held by another pod here
	// (see Server.SetHandover); nil otherwise.
	Handover Handover
	// leaving are the sessions letting go (ending for good: closed, handed
	// off, ...) that are still stopping: id → channel closed once stopped
	// (see HandOff: a handOff that reaches a stopping actor is dropped).
	leaving *sync.Map
	// shares are the proxy connections serving other pods' stubs
	// (session_remote.go).
	shares *shareRegistry
	// active are the sessions with a running turn (session_active.go).
	active *activeTurns
	// turns counts the running turns of each principal.
	turns *userTurns
	// conns are the connection actors by connection id (session_resume.go).
	conns *connections
	// parcels are the MCP servers of the sessions paused here, until
	// handed over (session_adopt_mcp.go).
	parcels *mcpParcels
	// projects are the AGENTS.md files by working directory (turn_context.go).
	projects *sysprompt.Projects
}

// Handover moves sessions between processes that share a store (cluster
// pods).
type Handover interface {
	// TakeOver asks owner, the incarnation holding sessionID's lease, to let
	// go of the session (its running prompt ends cancelled). nil once it
	// did, or once owner is known dead (its lease can be taken at once).
	TakeOver(sessionID, owner string) error
	// Share asks owner, holding sessionID, to attach a proxy connection to
	// it for stub, a session actor of this process (see session_remote.go):
	// the proxy is sent init (initialize) and open (the client's load or
	// resume), and every frame it writes goes to stub as a
	// *clusterpb.Relay. The proxy's pid, or an error (then the session is
	// taken over instead).
	// principal is the identity of the stub's connection, and the proxy's;
	// conn is that connection's id, which the prompts it sends through the
	// proxy belong to wherever the session goes (promptKey).
	Share(sessionID, owner, principal, conn string, stub *actor.PID, init, open []byte) (*actor.PID, error)
}

// Frame is one encoded outbound JSON-RPC message. SessionID names the
// session it belongs to ("" for connection-level traffic) so transports with
// per-session streams can route it.
type Frame struct {
	Data      []byte
	SessionID string
	// pool, when set, takes Data back for a later frame once the outlet
	// wrote it (Written). Only a frame with one owner has it: a streamed
	// chunk the session sends its one client and keeps nothing of
	// (session.broadcast).
	pool *framePool
}

// Written tells that the outlet is done with f.Data: written out, not
// kept, not referenced any more. An outlet that keeps frames (for a
// resume) or hands them on does not call it.
func (f Frame) Written() {
	if f.pool != nil {
		f.pool.put(f.Data)
	}
}

// Outlet receives a connection's outbound frames in order. Send must not
// block for long: it is called from inside the connection actor.
type Outlet interface {
	Send(f Frame)
}

// Server owns the actor system.
type Server struct {
	sys  *actor.ActorSystem
	deps *Deps
}

// NewServer starts an actor system whose own logging goes to deps.Log.
func NewServer(deps Deps) *Server {
	if deps.Config.MaxTurnRequests <= 0 {
		deps.Config.MaxTurnRequests = 100
	}
	if deps.Config.SessionRelease <= 0 {
		deps.Config.SessionRelease = DefaultSessionRelease
	}
	if deps.Config.MaxSessions <= 0 {
		deps.Config.MaxSessions = DefaultMaxSessions
	}
	if deps.Config.MCPStartupTimeout <= 0 {
		deps.Config.MCPStartupTimeout = DefaultMCPStartupTimeout
	}
	if deps.Config.MCPToolTimeout <= 0 {
		deps.Config.MCPToolTimeout = DefaultMCPToolTimeout
	}
	if deps.Config.MaxImageBytes <= 0 {
		deps.Config.MaxImageBytes = DefaultMaxImageBytes
	}
	if deps.Config.ClientTimeout <= 0 {
		deps.Config.ClientTimeout = DefaultClientTimeout
	}
	if deps.Config.SessionAttach != AttachMove {
		deps.Config.SessionAttach = AttachShare
	}
	if deps.Config.PromptQueue <= 0 {
		deps.Config.PromptQueue = DefaultPromptQueue
	}
	if deps.Metrics == nil {
		deps.Metrics = &Metrics{}
	}
	deps.leaving = &sync.Map{}
	deps.shares = &shareRegistry{}
	deps.active = &activeTurns{}
	deps.turns = &userTurns{}
	deps.conns = &connections{}
	deps.parcels = &mcpParcels{}
	deps.projects = sysprompt.NewProjects(deps.Config.Home)
	if deps.Tools == nil {
		deps.Tools = tools.Default()
	}
	if deps.Store == nil && deps.Config.Unusable == nil {
		panic("actors: Deps.Store is required")
	}
	deps.sessionGuardian = &stopOnCrash{log: deps.Log}
	lib := deps.Log.With().Str("lib", "protoactor").Logger()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(s *actor.ActorSystem) *slog.Logger {
		return slog.New(zerolog.NewSlogHandler(lib.With().Str("system", s.ID).Logger()))
	}))
	return &Server{sys: sys, deps: &deps}
}

// llmConfig is the model configuration in force now.
func (d *Deps) llmConfig() llm.Config {
	if d.LLM != nil {
		return d.LLM.Config()
	}
	return d.Config.LLM
}

// Conn is a transport's handle on its connection actor.
type Conn struct {
	ID   string
	pid  *actor.PID
	root *actor.RootContext
}

// SetHandover makes session/load and session/resume take a session held
// by another process over through h. Call it before serving.
func (s *Server) SetHandover(h Handover) { s.deps.Handover = h }

// System is the actor system, for a transport that makes its actors
// reachable from other processes (cluster mode). Call it before serving.
func (s *Server) System() *actor.ActorSystem { return s.sys }

// Identity is who opened a connection: the principal the transport
// authenticated (DefaultPrincipal for stdio and unauthenticated HTTP) and,
// for the audit log, the client's address.
type Identity struct {
	Principal string
	Remote    string
}

// DefaultPrincipal is the principal of stdio, of the shared HTTP token, and
// the owner of sessions stored before sessions had owners.
const DefaultPrincipal = store.DefaultOwner

// Connect spawns a connection actor of DefaultPrincipal writing to out.
func (s *Server) Connect(out Outlet) *Conn { return s.ConnectID(uuid.NewString(), out) }

// ConnectID is Connect with the connection id chosen by the transport
// (cluster mode: it names the pod).
func (s *Server) ConnectID(id string, out Outlet) *Conn {
	return s.ConnectAs(id, Identity{Principal: DefaultPrincipal}, out)
}

// ConnectAs is ConnectID for a connection of principal who.Principal: its
// sessions are that principal's, and it sees no one else's.
func (s *Server) ConnectAs(id string, who Identity, out Outlet) *Conn {
	if who.Principal == "" {
		who.Principal = DefaultPrincipal
	}
	log := s.deps.Log.With().Str("conn", id).Logger()
	props := actor.PropsFromProducer(func() actor.Actor { return newConnection(s.deps, id, who, out) },
		actor.WithReceiverMiddleware(survivePanics(log, out)))
	pid := s.sys.Root.Spawn(props)
	return &Conn{ID: id, pid: pid, root: s.sys.Root}
}

// Deliver hands one decoded inbound message to the connection actor.
func (c *Conn) Deliver(m *protocol.Message) { c.root.Send(c.pid, &inbound{msg: m}) }

// Reject makes the connection answer a message that could not be decoded.
// id may be nil (written as null).
func (c *Conn) Reject(id protocol.RawMessage, e *protocol.Error) {
	c.root.Send(c.pid, &inbound{rejectID: id, reject: e})
}

// CancelTurns cancels the running turns this connection started (their
// prompts answer cancelled); the connection and its sessions stay. For a
// transport whose client can no longer receive anything.
func (c *Conn) CancelTurns() { c.root.Send(c.pid, &cancelTurns{}) }

// Close cancels the connection's running turns, waits (up to timeout) until
// their prompts are answered, then stops the connection actor.
func (c *Conn) Close(timeout time.Duration) {
	_, _ = c.root.RequestFuture(c.pid, &drain{}, timeout).Result()
	_ = c.root.StopFuture(c.pid).Wait()
}

// HandOff makes the live session sessionID of this process let go of its
// store lease for another process: its running prompt ends cancelled, its
// connection answers later requests for it "Session moved to another
// connection", and the actor stops. nil also when no session of that id is
// live here.
func (s *Server) HandOff(sessionID string, timeout time.Duration) error {
	pid := actor.NewPID(s.sys.Address(), sessionActorName(sessionID))
	f := s.sys.Root.RequestFuture(pid, &handOff{}, timeout)
	answered := make(chan error, 1)
	go func() {
		_, err := f.Result()
		answered <- err
	}()
	// A session that is leaving already (for another asker) drops the
	// request unanswered while it stops: its stop answers it.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-answered:
			if errors.Is(err, actor.ErrDeadLetter) {
				return nil
			}
			return err
		case <-tick.C:
			if left, ok := s.deps.leaving.Load(sessionID); ok {
				select {
				case <-left.(chan struct{}):
					return nil
				case err := <-answered:
					if errors.Is(err, actor.ErrDeadLetter) {
						return nil
					}
					return err
				}
			}
		}
	}
}

// Metrics returns the live counters of the tree.
func (s *Server) Metrics() *Metrics { return s.deps.Metrics }

// Shutdown stops the actor system.
func (s *Server) Shutdown() { s.sys.Shutdown() }

// newErrorID makes a short id that ties a client-visible error to a log line.
func newErrorID() string { return uuid.NewString()[:8] }
