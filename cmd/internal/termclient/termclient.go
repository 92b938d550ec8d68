// Package termclient is `iac-code prompt`: a one-shot ACP client for the
// terminal. It speaks the real protocol (the official Go SDK's client side)
// to an agent over a pair of streams — in iac-code, an in-process pipe to
// the same stdio transport an editor uses — and shows the answer, tool calls
// and plans as they stream, asking for permissions on the terminal.
package termclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	acp "github.com/coder/acp-go-sdk"
)

// Options are the command's flags.
type Options struct {
	// Cwd is the session's working directory (absolute). With SessionID and
	// no Cwd the session keeps its own.
	Cwd       string
	SessionID string
	Mode      string
	// Yes approves every permission request (allow once).
	Yes bool
	// JSON prints the raw session/update notifications, then the answer.
	JSON    bool
	Text    string
	Version string
}

// Terminal is where the command talks to the user.
type Terminal struct {
	Stdout, Stderr io.Writer
	// TTY, when set, is the terminal permissions are asked on; without it
	// (and without --yes) every request is rejected.
	TTY io.ReadWriter
	// Color: stderr is a terminal (dim thoughts, bold tool titles).
	Color bool
	// StdoutTTY: stdout is a terminal, so the answer may be broken to let
	// tool lines start on a line of their own.
	StdoutTTY bool
}

// Exit codes by stop reason (README, "Terminal client").
const (
	ExitOK              = 0
	ExitError           = 1
	ExitUsage           = 2
	ExitMaxTokens       = 3
	ExitMaxTurnRequests = 4
	ExitRefusal         = 5
	ExitCancelled       = 130
)

// ExitCode maps a stop reason to the command's exit status.
func ExitCode(r acp.StopReason) int {
	switch r {
	case acp.StopReasonEndTurn:
		return ExitOK
	case acp.StopReasonMaxTokens:
		return ExitMaxTokens
	case acp.StopReasonMaxTurnRequests:
		return ExitMaxTurnRequests
	case acp.StopReasonRefusal:
		return ExitRefusal
	case acp.StopReasonCancelled:
		return ExitCancelled
	}
	return ExitError
}

// Run sends one prompt over the connection (toAgent is the agent's input,
// fromAgent its output) and returns the exit code. The first value on
// interrupts cancels the turn (session/cancel; the answer still comes, as
// cancelled); the second returns ExitCancelled at once.
func Run(ctx context.Context, opts Options, toAgent io.Writer, fromAgent io.Reader, interrupts <-chan os.Signal, term Terminal) int {
	c := &client{opts: opts, term: term, cancelled: make(chan struct{}), titles: map[acp.ToolCallId]string{}}
	if term.TTY != nil {
		c.answers = lines(term.TTY)
	}
	if opts.JSON {
		fromAgent = &updateTap{r: fromAgent, out: term.Stdout, mu: &c.mu}
	}
	conn := acp.NewClientSideConnection(c, toAgent, fromAgent)
	// The SDK's own log: its warnings (malformed lines) only.
	conn.SetLogger(slog.New(slog.NewTextHandler(term.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))

	if _, err := conn.Initialize(ctx, acp.InitializeRequest{
		ProtocolVersion:    acp.ProtocolVersionNumber,
		ClientCapabilities: acp.ClientCapabilities{}, // the agent's own tools serve files and commands here
		ClientInfo:         &acp.Implementation{Name: "iac-code prompt", Version: opts.Version},
	}); err != nil {
		return c.fail("initialize", err)
	}
	sid, err := c.session(ctx, conn)
	if err != nil {
		return c.fail("session", err)
	}
	if opts.Mode != "" {
		if _, err := conn.SetSessionMode(ctx, acp.SetSessionModeRequest{SessionId: sid, ModeId: acp.SessionModeId(opts.Mode)}); err != nil {
			return c.fail("mode", err)
		}
	}

	type answer struct {
		res acp.PromptResponse
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := conn.Prompt(ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock(opts.Text)}})
		done <- answer{res, err}
	}()
	var a answer
	for waiting := true; waiting; {
		select {
		case a = <-done:
			waiting = false
		case <-interrupts:
			if c.cancel() {
				c.note("cancelling… (Ctrl-C again to quit now)")
				_ = conn.Cancel(ctx, acp.CancelNotification{SessionId: sid})
				continue
			}
			c.note("interrupted")
			return ExitCancelled
		}
	}
	c.endLine()
	if a.err != nil {
		return c.fail("prompt", a.err)
	}
	if opts.JSON {
		c.mu.Lock()
		b, _ := json.Marshal(a.res)
		fmt.Fprintf(term.Stdout, "%s\n", b)
		c.mu.Unlock()
	}
	if a.res.StopReason != acp.StopReasonEndTurn {
		c.note(fmt.Sprintf("[stopped: %s]", a.res.StopReason))
	}
	c.note(fmt.Sprintf("session %s (continue it with --session %s)", sid, sid))
	return ExitCode(a.res.StopReason)
}

// session opens a new session, or resumes opts.SessionID (in its own cwd
// unless one is given: looked up with session/list).
func (c *client) session(ctx context.Context, conn *acp.ClientSideConnection) (acp.SessionId, error) {
	if c.opts.SessionID == "" {
		s, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: c.opts.Cwd, McpServers: []acp.McpServer{}})
		return s.SessionId, err
	}
	sid := acp.SessionId(c.opts.SessionID)
	cwd := c.opts.Cwd
	if cwd == "" {
		var err error
		if cwd, err = storedCwd(ctx, conn, sid); err != nil {
			return "", err
		}
	}
	_, err := conn.ResumeSession(ctx, acp.ResumeSessionRequest{SessionId: sid, Cwd: cwd, McpServers: []acp.McpServer{}})
	return sid, err
}

func storedCwd(ctx context.Context, conn *acp.ClientSideConnection, sid acp.SessionId) (string, error) {
	var cursor *string
	for page := 0; page < 100; page++ {
		res, err := conn.ListSessions(ctx, acp.ListSessionsRequest{Cursor: cursor})
		if err != nil {
			return "", err
		}
		for _, s := range res.Sessions {
			if s.SessionId == sid {
				return s.Cwd, nil
			}
		}
		if res.NextCursor == nil || *res.NextCursor == "" {
			break
		}
		cursor = res.NextCursor
	}
	return "", fmt.Errorf("no stored session %s", sid)
}

// client is the acp.Client: it renders updates and answers permissions.
type client struct {
	opts Options
	term Terminal

	mu sync.Mutex
	// open: the answer's last line on stdout has no newline yet.
	open     bool
	thinking bool
	titles   map[acp.ToolCallId]string

	cancelOnce sync.Once
	cancelled  chan struct{}
	answers    <-chan string
}

// cancel marks the turn cancelled; it reports whether this was the first time.
func (c *client) cancel() bool {
	first := false
	c.cancelOnce.Do(func() { first = true; close(c.cancelled) })
	return first
}

func (c *client) fail(what string, err error) int {
	c.endLine()
	msg := err.Error()
	var re *acp.RequestError
	if errors.As(err, &re) {
		msg = re.Message
		if d, ok := re.Data.(map[string]any); ok {
			for _, k := range []string{"hint", "error", "session_id", "prompt", "cwd", "modeId"} {
				if v, ok := d[k].(string); ok && v != "" && !strings.Contains(msg, v) {
					msg += ": " + v
				}
			}
		}
	}
	c.note(fmt.Sprintf("iac-code: %s failed: %s", what, msg))
	return ExitError
}

// note writes a line to stderr, after the answer's open line if any.
func (c *client) note(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.breakLine()
	fmt.Fprintln(c.term.Stderr, s)
}

func (c *client) endLine() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open {
		fmt.Fprintln(c.term.Stdout)
		c.open = false
	}
	c.endThought()
}

// breakLine ends the answer's open line on a terminal before something
// else is written there (with c.mu held).
func (c *client) breakLine() {
	c.endThought()
	if c.open && c.term.StdoutTTY {
		fmt.Fprintln(c.term.Stdout)
		c.open = false
	}
}

func (c *client) endThought() {
	if c.thinking {
		fmt.Fprint(c.term.Stderr, c.style("0")+"\n")
		c.thinking = false
	}
}

func (c *client) style(code string) string {
	if !c.term.Color {
		return ""
	}
	return "\x1b[" + code + "m"
}

// SessionUpdate renders the stream: the answer on stdout, everything else
// (thoughts, tool calls, plans) on stderr, so `> file` keeps only the answer.
func (c *client) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	if c.opts.JSON {
		return nil // the tap prints the raw notifications
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u := n.Update
	switch {
	case u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil:
		c.endThought()
		text := u.AgentMessageChunk.Content.Text.Text
		fmt.Fprint(c.term.Stdout, text)
		if text != "" {
			c.open = !strings.HasSuffix(text, "\n")
		}
	case u.AgentThoughtChunk != nil && u.AgentThoughtChunk.Content.Text != nil:
		if !c.thinking {
			c.breakLine()
			fmt.Fprint(c.term.Stderr, c.style("2")+"thinking: ")
			c.thinking = true
		}
		fmt.Fprint(c.term.Stderr, u.AgentThoughtChunk.Content.Text.Text)
	case u.ToolCall != nil:
		c.breakLine()
		c.titles[u.ToolCall.ToolCallId] = u.ToolCall.Title
		fmt.Fprintf(c.term.Stderr, "%s● %s%s (%s)\n", c.style("1"), oneLine(u.ToolCall.Title), c.style("0"), u.ToolCall.Kind)
	case u.ToolCallUpdate != nil && u.ToolCallUpdate.Status != nil:
		t := u.ToolCallUpdate
		title := c.titles[t.ToolCallId]
		switch *t.Status {
		case acp.ToolCallStatusCompleted:
			c.breakLine()
			fmt.Fprintf(c.term.Stderr, "  ✓ %s\n", oneLine(title))
		case acp.ToolCallStatusFailed:
			c.breakLine()
			fmt.Fprintf(c.term.Stderr, "  ✗ %s: %s\n", oneLine(title), firstLine(toolText(t.Content)))
		}
	case u.Plan != nil:
		c.breakLine()
		fmt.Fprintln(c.term.Stderr, "Plan:")
		for _, e := range u.Plan.Entries {
			mark := map[acp.PlanEntryStatus]string{acp.PlanEntryStatusCompleted: "[x]", acp.PlanEntryStatusInProgress: "[~]"}[e.Status]
			if mark == "" {
				mark = "[ ]"
			}
			fmt.Fprintf(c.term.Stderr, "  %s %s\n", mark, e.Content)
		}
	}
	return nil
}

// RequestPermission asks on the terminal (once / always / reject); --yes
// allows once; without a terminal the request is rejected. A cancel while
// asking answers cancelled, as the protocol requires.
func (c *client) RequestPermission(ctx context.Context, r acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	pick := func(kind acp.PermissionOptionKind) acp.RequestPermissionResponse {
		for _, o := range r.Options {
			if o.Kind == kind {
				return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
					Selected: &acp.RequestPermissionOutcomeSelected{OptionId: o.OptionId}}}
			}
		}
		return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}
	}
	cancelled := acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}
	title := "this tool call"
	if r.ToolCall.Title != nil {
		title = oneLine(*r.ToolCall.Title)
	}
	select {
	case <-c.cancelled:
		return cancelled, nil
	default:
	}
	switch {
	case c.opts.Yes:
		return pick(acp.PermissionOptionKindAllowOnce), nil
	case c.answers == nil:
		c.note(fmt.Sprintf("rejected: %s (no terminal to ask on; --yes approves)", title))
		return pick(acp.PermissionOptionKindRejectOnce), nil
	}
	for {
		c.mu.Lock()
		c.breakLine()
		fmt.Fprintf(c.term.TTY, "%sAllow %s?%s [o]nce, [a]lways, [r]eject: ", c.style("1"), title, c.style("0"))
		c.mu.Unlock()
		select {
		case line, ok := <-c.answers:
			if !ok {
				return pick(acp.PermissionOptionKindRejectOnce), nil
			}
			switch strings.ToLower(strings.TrimSpace(line)) {
			case "o", "once", "y", "yes":
				return pick(acp.PermissionOptionKindAllowOnce), nil
			case "a", "always":
				return pick(acp.PermissionOptionKindAllowAlways), nil
			case "r", "reject", "n", "no":
				return pick(acp.PermissionOptionKindRejectOnce), nil
			}
		case <-c.cancelled:
			return cancelled, nil
		case <-ctx.Done():
			return cancelled, nil
		}
	}
}

// The agent's own tools serve files and terminals: none is advertised.
func (c *client) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsReadTextFile)
}
func (c *client) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsWriteTextFile)
}
func (c *client) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalCreate)
}
func (c *client) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalKill)
}
func (c *client) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalOutput)
}
func (c *client) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalRelease)
}
func (c *client) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalWaitForExit)
}

// lines reads the terminal line by line for the permission questions.
func lines(r io.Reader) <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

func toolText(content []acp.ToolCallContent) string {
	for _, c := range content {
		if c.Content != nil && c.Content.Content.Text != nil {
			return c.Content.Content.Text.Text
		}
	}
	return ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// updateTap copies the agent's session/update notifications, verbatim, to
// out as they pass to the SDK (--json).
type updateTap struct {
	r   io.Reader
	out io.Writer
	mu  *sync.Mutex
	buf []byte
}

func (t *updateTap) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.buf = append(t.buf, p[:n]...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			break
		}
		line := t.buf[:i]
		var m struct {
			Method string `json:"method"`
		}
		if json.Unmarshal(line, &m) == nil && m.Method == acp.ClientMethodSessionUpdate {
			t.mu.Lock()
			_, _ = t.out.Write(append(append([]byte(nil), line...), '\n'))
			t.mu.Unlock()
		}
		t.buf = t.buf[i+1:]
	}
	return n, err
}
