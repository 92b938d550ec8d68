// Package mcp connects to the MCP servers a client configures for a
// session and offers their tools as tools.Tool. It uses the official MCP Go
// SDK (github.com/modelcontextprotocol/go-sdk) for the protocol: stdio
// servers run as child processes in their own process group, HTTP servers
// are reached over Streamable HTTP or the older SSE transport. It knows
// nothing of actors or ACP framing: a Server reports its state through a
// callback and is closed by its owner.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/tools/sandbox"
)

// Transport is how a server is reached.
type Transport string

const (
	Stdio Transport = "stdio"
	HTTP  Transport = "http"
	SSE   Transport = "sse"
)

// Config is one server as the client configured it.
type Config struct {
	Name      string
	Transport Transport
	// Stdio: the command (a bare name is looked up in PATH), its arguments
	// and the variables added to the agent's environment (they win).
	Command string
	Args    []string
	Env     []Pair
	// HTTP and SSE: the endpoint and headers sent with every request.
	URL     string
	Headers []Pair
}

// Pair is an environment variable or an HTTP header.
type Pair struct{ Name, Value string }

// State is where a server is in its life.
type State string

const (
	Connecting State = "connecting"
	Connected  State = "connected"
	Failed     State = "failed"
)

// Event is a change of a server: its state, and when connected its tools
// and prompts (the whole current lists, again after every
// tools/list_changed or prompts/list_changed).
type Event struct {
	State   State
	Tools   []*sdk.Tool
	Prompts []*sdk.Prompt
	Err     error
}

// Options are what a server gets from its session.
type Options struct {
	// Cwd is the session's working directory: the stdio server's working
	// directory and the root offered to every server.
	Cwd string
	// Version is the client version announced to servers.
	Version string
	Log     zerolog.Logger
	// Grace is how long Close waits for a graceful exit before it kills the
	// server's process group (default DefaultGrace).
	Grace time.Duration
	// OnEvent receives every state change, in order, from the server's own
	// goroutines (never two at once for one server). It must not block.
	OnEvent func(Event)
	// ChildEnv is the base environment of stdio servers (default: the
	// server's environment without its secrets, tools.ChildEnv).
	ChildEnv func() []string
	// Jail, when set, contains a stdio server (its own directory is
	// readable besides the session's).
	Jail *sandbox.Jail
}

// DefaultGrace is how long a closing server gets before SIGKILL.
const DefaultGrace = 2 * time.Second

// ErrNotConnected is a call to a server that is not (or no longer) connected.
var ErrNotConnected = errors.New("not connected")

// Server is one MCP server of a session: started by Start, ended by Close.
type Server struct {
	cfg  Config
	opts Options
	log  zerolog.Logger
	// ctx ends the connection attempt and tool listing when closing.
	ctx    context.Context
	cancel context.CancelFunc
	// relist coalesces tools/list_changed and prompts/list_changed
	// notifications.
	relist chan struct{}
	// closedDone is closed once Close has finished.
	closedDone chan struct{}
	stderr     *stderrTail
	// stderrDone is closed when readStderr, once started (stderrRead), has
	// read the server's stderr to its end.
	stderrDone chan struct{}
	stderrRead atomic.Bool

	mu      sync.Mutex
	state   State
	closed  bool
	cs      *sdk.ClientSession
	pgid    int
	httpTr  *http.Transport
	calls   map[string]*callProgress
	emitted sync.Mutex
}

// Progress is an MCP progress notification of a running call.
type Progress struct {
	Progress, Total float64
	Message         string
}

// Start begins connecting to the server in the background and returns at
// once; the outcome arrives through Options.OnEvent.
func Start(cfg Config, opts Options) *Server {
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, opts: opts, ctx: ctx, cancel: cancel,
		log:        opts.Log.With().Str("mcp_server", cfg.Name).Logger(),
		relist:     make(chan struct{}, 1),
		closedDone: make(chan struct{}),
		stderr:     &stderrTail{},
		stderrDone: make(chan struct{}),
		state:      Connecting,
		calls:      map[string]*callProgress{},
	}
	go s.run()
	return s
}

// Name is the server's configured name.
func (s *Server) Name() string { return s.cfg.Name }

// Config is the server's configuration.
func (s *Server) Config() Config { return s.cfg }

// emit reports a state change unless the server is closing.
func (s *Server) emit(ev Event) {
	s.emitted.Lock()
	defer s.emitted.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.state = ev.State
	s.mu.Unlock()
	if s.opts.OnEvent != nil {
		s.opts.OnEvent(ev)
	}
}

func (s *Server) run() {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error().Interface("panic", r).Msg("MCP server goroutine panicked")
			s.fail(fmt.Errorf("internal error: %v", r))
		}
	}()
	tr, err := s.transport()
	if err != nil {
		s.fail(err)
		return
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "iac-code", Version: s.opts.Version}, &sdk.ClientOptions{
		Logger:                      slog.New(zerolog.NewSlogHandler(s.log.With().Str("lib", "mcp-go-sdk").Logger())),
		ToolListChangedHandler:      func(context.Context, *sdk.ToolListChangedRequest) { s.relistSoon() },
		PromptListChangedHandler:    func(context.Context, *sdk.PromptListChangedRequest) { s.relistSoon() },
		ProgressNotificationHandler: s.onProgress,
	})
	if s.opts.Cwd != "" {
		client.AddRoots(&sdk.Root{URI: fileURI(s.opts.Cwd), Name: "cwd"})
	}
	started := time.Now()
	cs, err := client.Connect(s.ctx, tr, nil)
	if err != nil {
		s.fail(s.describe(err, "cannot connect"))
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = cs.Close()
		return
	}
	s.cs = cs
	s.mu.Unlock()
	list, err := s.listTools(cs)
	if err != nil {
		s.fail(s.describe(err, "cannot list tools"))
		return
	}
	prompts := s.listPrompts(cs)
	s.log.Info().Int("tools", len(list)).Int("prompts", len(prompts)).Dur("took", time.Since(started)).Msg("MCP server connected")
	s.emit(Event{State: Connected, Tools: list, Prompts: prompts})
	go s.relistLoop(cs)
	err = cs.Wait()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if !closed {
		if err == nil {
			err = errors.New("the server closed the connection")
		}
		what := "server exited"
		if s.cfg.Transport == HTTP || s.cfg.Transport == SSE {
			what = "connection lost"
		}
		s.fail(s.describe(err, what))
	}
}

func (s *Server) relistSoon() {
	select {
	case s.relist <- struct{}{}:
	default: // a re-list is already due
	}
}

// relistLoop re-lists the tools and prompts after a list_changed, one at a
// time.
func (s *Server) relistLoop(cs *sdk.ClientSession) {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.relist:
		}
		list, err := s.listTools(cs)
		if err != nil {
			if s.ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("MCP server: re-listing tools after tools/list_changed failed")
			}
			continue
		}
		prompts := s.listPrompts(cs)
		s.log.Info().Int("tools", len(list)).Int("prompts", len(prompts)).Msg("MCP server changed its tools or prompts")
		s.emit(Event{State: Connected, Tools: list, Prompts: prompts})
	}
}

// listPrompts lists the server's prompts, when it has any: a server whose
// prompts/list fails is still usable for its tools (logged, no prompts).
func (s *Server) listPrompts(cs *sdk.ClientSession) []*sdk.Prompt {
	if init := cs.InitializeResult(); init == nil || init.Capabilities == nil || init.Capabilities.Prompts == nil {
		return nil
	}
	var out []*sdk.Prompt
	for p, err := range cs.Prompts(s.ctx, nil) {
		if err != nil {
			if s.ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("MCP server: prompts/list failed; its prompts are not offered")
			}
			return nil
		}
		out = append(out, p)
	}
	return out
}

// GetPrompt gets a prompt of the server with its arguments (prompts/get).
// It returns ErrNotConnected when the server is not connected.
func (s *Server) GetPrompt(ctx context.Context, name string, args map[string]string) (*sdk.GetPromptResult, error) {
	s.mu.Lock()
	cs, state := s.cs, s.state
	s.mu.Unlock()
	if cs == nil || state != Connected {
		return nil, ErrNotConnected
	}
	res, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: name, Arguments: args})
	if err != nil && ctx.Err() == nil {
		err = errors.New(redactURL(err.Error(), s.cfg.URL))
	}
	return res, err
}

func (s *Server) listTools(cs *sdk.ClientSession) ([]*sdk.Tool, error) {
	var out []*sdk.Tool
	for t, err := range cs.Tools(s.ctx, nil) {
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// fail reports the server failed and lets go of what it holds.
func (s *Server) fail(err error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return // Close ends it
	}
	s.cancel()
	s.log.Warn().Err(err).Msg("MCP server failed")
	s.emit(Event{State: Failed, Err: err})
	s.release(false)
}

// describe turns an SDK or process error into what the user is shown: the
// error (URLs without credentials or query) and the server's last stderr
// lines.
func (s *Server) describe(err error, what string) error {
	msg := redactURL(err.Error(), s.cfg.URL)
	if s.stderrRead.Load() {
		// A server that exits at startup closes stdout and stderr at once;
		// its last words may still be on their way through the pipe.
		select {
		case <-s.stderrDone:
		case <-time.After(stderrSettle):
		}
	}
	if tail := s.stderr.String(); tail != "" {
		msg += "; stderr: " + tail
	}
	return fmt.Errorf("%s: %s", what, msg)
}

// Close ends the server: a graceful close (stdin closed, HTTP session
// deleted), then SIGKILL to the whole process group of a stdio server still
// running after the grace. It blocks until then (at most Grace + ~1 s):
// call it off any actor. Calls in flight fail.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.closedDone
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.release(true)
	close(s.closedDone)
}

// release closes the session and ends the process group: gracefully first
// when graceful, else (the server failed or exited) at once.
func (s *Server) release(graceful bool) {
	s.mu.Lock()
	cs, pgid, httpTr := s.cs, s.pgid, s.httpTr
	s.cs, s.pgid = nil, 0
	s.mu.Unlock()
	grace := s.opts.Grace
	if !graceful || cs == nil {
		// A server that failed, or never finished its handshake, has no
		// session to close gracefully.
		grace = 0
	}
	deadline := time.Now().Add(grace)
	if cs != nil {
		done := make(chan struct{})
		go func() {
			_ = cs.Close()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(grace):
		}
	}
	if pgid > 0 {
		endGroup(pgid, time.Until(deadline))
	}
	if httpTr != nil {
		httpTr.CloseIdleConnections()
	}
}

// Call runs a tool of the server. progress (may be nil) gets the server's
// progress notifications for this call; args is a JSON object. It returns ErrNotConnected when
// the server is not connected; when ctx ends, the SDK sends
// notifications/cancelled and Call returns at once.
func (s *Server) Call(ctx context.Context, tool string, args json.RawMessage, progress func(Progress)) (*sdk.CallToolResult, error) {
	s.mu.Lock()
	cs, state := s.cs, s.state
	s.mu.Unlock()
	if cs == nil || state != Connected {
		return nil, ErrNotConnected
	}
	params := &sdk.CallToolParams{Name: tool, Arguments: args}
	if progress != nil {
		token := "iac-" + strconv.FormatUint(progressTokens.Add(1), 10)
		params.SetProgressToken(token)
		cp := &callProgress{f: progress}
		s.mu.Lock()
		s.calls[token] = cp
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.calls, token)
			s.mu.Unlock()
			cp.stop() // no progress after Call returns
		}()
	}
	res, err := cs.CallTool(ctx, params)
	if err != nil && ctx.Err() == nil {
		err = errors.New(redactURL(err.Error(), s.cfg.URL))
	}
	return res, err
}

var progressTokens atomic.Uint64

func (s *Server) onProgress(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
	if req == nil || req.Params == nil {
		return
	}
	token := fmt.Sprint(req.Params.ProgressToken)
	s.mu.Lock()
	cp := s.calls[token]
	s.mu.Unlock()
	if cp != nil {
		cp.send(Progress{Progress: req.Params.Progress, Total: req.Params.Total, Message: req.Params.Message})
	}
}

// callProgress hands a call's progress to its callback until the call
// returns.
type callProgress struct {
	mu   sync.Mutex
	done bool
	f    func(Progress)
}

func (c *callProgress) send(p Progress) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		c.f(p)
	}
}

func (c *callProgress) stop() {
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
}
