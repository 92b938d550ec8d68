package tools

import (
	"context"
	"errors"
	"fmt"
)

// Client is the editor at the other end of the session when it offers to
// serve files or run commands itself (ACP fs/* and terminal/*): reads see
// its unsaved buffers, writes go through its review, commands run in a
// terminal the user watches. The actor layer implements it; every method
// returns when the client answers, ctx is done or the request's deadline
// passes (wait for exit: ctx's deadline only).
type Client interface {
	// Caps is what the client advertised; a call uses only what is set.
	Caps() ClientCaps
	// ReadTextFile reads path (absolute); line (1-based) and limit (lines)
	// select a range when > 0.
	ReadTextFile(ctx context.Context, path string, line, limit int) (string, error)
	WriteTextFile(ctx context.Context, path, content string) error
	CreateTerminal(ctx context.Context, req TerminalRequest) (id string, err error)
	WaitForTerminalExit(ctx context.Context, id string) (TerminalExit, error)
	TerminalOutput(ctx context.Context, id string) (TerminalOutput, error)
	KillTerminal(ctx context.Context, id string) error
	ReleaseTerminal(ctx context.Context, id string) error
}

// ClientCaps are the client capabilities a call may use.
type ClientCaps struct {
	ReadTextFile  bool
	WriteTextFile bool
	Terminal      bool
	// Elicitation: the client shows form questions (ask_user).
	Elicitation bool
}

// Any reports whether the client offers anything at all.
func (c ClientCaps) Any() bool {
	return c.ReadTextFile || c.WriteTextFile || c.Terminal || c.Elicitation
}

// TerminalRequest is a command for the client to run in a terminal.
type TerminalRequest struct {
	Command string
	Args    []string
	// Env is added to the client's environment, in order.
	Env             [][2]string
	Cwd             string
	OutputByteLimit int64
}

// TerminalExit is how a terminal's command ended: ExitCode is nil when it
// was killed by Signal.
type TerminalExit struct {
	ExitCode *int
	Signal   string
}

// TerminalOutput is what the client kept of a terminal's output.
type TerminalOutput struct {
	Output string
	// Truncated: the client dropped the start to stay within the limit.
	Truncated bool
	// Exit is set once the command has ended.
	Exit *TerminalExit
}

// ClientError is the client's error answer to a request (as opposed to no
// answer at all).
type ClientError struct {
	Method  string
	Code    int
	Message string
}

func (e *ClientError) Error() string {
	return fmt.Sprintf("the editor answered %s with error %d: %s", e.Method, e.Code, e.Message)
}

// clientNotFound is ACP's "Resource not found" code.
const clientNotFound = -32002

// isClientNotFound reports a client error saying the file does not exist.
func isClientNotFound(err error) bool {
	var ce *ClientError
	return errors.As(err, &ce) && ce.Code == clientNotFound
}

// ClientCall is a Call that can run through the client instead of on this
// machine. The tool actor calls RunVia when the session's client offers
// anything; a call uses the client only for what it advertised and runs
// locally otherwise. What the client is asked to touch is the call's
// resolved path (the one shown and decided on), in the client's spelling
// of the cwd (Resolved.Location); the permission policy is the same either
// way. A client error fails the call naming the path: it never falls back
// to a local run.
type ClientCall interface {
	Call
	RunVia(ctx context.Context, c Client, progress func(text string)) Result
}
