package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools"
)

// Agent→client requests of a tool call (fs/*, terminal/*). The goroutine
// running the tool asks its tool actor (clientCall), which issues the
// request through the session to the connection that owns it now; the
// answer comes back to the tool actor as a clientAnswer and is handed to
// the goroutine over a buffered channel, so no actor ever waits. The
// goroutine waits for at most the request's deadline, its context, or the
// end of the tool actor.

// DefaultClientTimeout bounds one agent→client request (Config.ClientTimeout).
const DefaultClientTimeout = 60 * time.Second

type (
	// clientCall asks the tool actor to send a request to the client.
	clientCall struct {
		method string
		params any
		reply  chan clientReply
	}
	clientReply struct {
		result protocol.RawMessage
		err    *protocol.Error
	}
)

func (*clientCall) IgnoreDeadLetterLogging() {}

// capsOf reads what a client advertised in initialize.
func capsOf(c *protocol.ClientCapabilities) tools.ClientCaps {
	if c == nil {
		return tools.ClientCaps{}
	}
	caps := tools.ClientCaps{Terminal: c.Terminal, Elicitation: c.Elicitation != nil && c.Elicitation.Form != nil}
	if c.FS != nil {
		caps.ReadTextFile, caps.WriteTextFile = c.FS.ReadTextFile, c.FS.WriteTextFile
	}
	return caps
}

// errToolStopped: the tool actor is gone (its turn ended), so no answer
// can reach the goroutine any more.
var errToolStopped = errors.New("the tool call was stopped")

// toolClient is the tools.Client of one tool actor.
type toolClient struct {
	caps      tools.ClientCaps
	sessionID string
	// toolCallID is the call a question is tied to.
	toolCallID string
	self       *actor.PID
	root       *actor.RootContext
	gone       <-chan struct{}
	timeout    time.Duration
}

func (c *toolClient) Caps() tools.ClientCaps { return c.caps }

// call sends one request and decodes its result into out (may be nil). The
// deadline is the client timeout, or only ctx's when bounded is false.
func (c *toolClient) call(ctx context.Context, method string, params, out any, bounded bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	reply := make(chan clientReply, 1)
	c.root.Send(c.self, &clientCall{method: method, params: params, reply: reply})
	select {
	case r := <-reply:
		if r.err != nil {
			return &tools.ClientError{Method: method, Code: r.err.Code, Message: r.err.Message}
		}
		if out == nil || len(r.result) == 0 || string(r.result) == "null" {
			return nil
		}
		if err := protocol.Unmarshal(r.result, out); err != nil {
			return fmt.Errorf("the editor's answer to %s is malformed: %v", method, err)
		}
		return nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("the editor did not answer %s in time", method)
		}
		return ctx.Err()
	case <-c.gone:
		return errToolStopped
	}
}

func (c *toolClient) ReadTextFile(ctx context.Context, path string, line, limit int) (string, error) {
	p := protocol.ReadTextFileRequest{SessionID: c.sessionID, Path: path}
	if line > 0 {
		p.Line = &line
	}
	if limit > 0 {
		p.Limit = &limit
	}
	var r protocol.ReadTextFileResponse
	err := c.call(ctx, protocol.MethodReadTextFile, p, &r, true)
	return r.Content, err
}

// Ask puts a question to the user (elicitation/create, form mode): one
// field "answer", a choice when there are options. Bounded by ctx only:
// the user takes the time they need.
func (c *toolClient) Ask(ctx context.Context, q tools.Question) (tools.Answer, error) {
	field := map[string]any{"type": "string", "title": "Answer"}
	if len(q.Options) > 0 {
		choices := make([]map[string]string, len(q.Options))
		for i, o := range q.Options {
			choices[i] = map[string]string{"const": o, "title": o}
		}
		field["oneOf"] = choices
	}
	schema := protocol.MustMarshal(map[string]any{"type": "object",
		"properties": map[string]any{"answer": field}, "required": []string{"answer"}})
	var r protocol.CreateElicitationResponse
	err := c.call(ctx, protocol.MethodElicitationCreate, protocol.CreateElicitationRequest{SessionID: c.sessionID,
		ToolCallID: c.toolCallID, Mode: "form", Message: q.Message, RequestedSchema: schema}, &r, false)
	if err != nil {
		return tools.Answer{}, err
	}
	ans := tools.Answer{Action: r.Action}
	if raw, ok := r.Content["answer"]; ok && protocol.Unmarshal(raw, &ans.Text) != nil {
		return tools.Answer{}, errors.New("the answer is not a string")
	}
	return ans, nil
}

func (c *toolClient) WriteTextFile(ctx context.Context, path, content string) error {
	return c.call(ctx, protocol.MethodWriteTextFile,
		protocol.WriteTextFileRequest{SessionID: c.sessionID, Path: path, Content: content}, nil, true)
}

func (c *toolClient) CreateTerminal(ctx context.Context, req tools.TerminalRequest) (string, error) {
	p := protocol.CreateTerminalRequest{SessionID: c.sessionID, Command: req.Command, Args: req.Args,
		Env: make([]protocol.EnvVariable, 0, len(req.Env)), Cwd: req.Cwd, OutputByteLimit: req.OutputByteLimit}
	for _, kv := range req.Env {
		p.Env = append(p.Env, protocol.EnvVariable{Name: kv[0], Value: kv[1]})
	}
	var r protocol.CreateTerminalResponse
	if err := c.call(ctx, protocol.MethodTerminalCreate, p, &r, true); err != nil {
		return "", err
	}
	if r.TerminalID == "" {
		return "", errors.New("the editor's answer to terminal/create has no terminalId")
	}
	return r.TerminalID, nil
}

// WaitForTerminalExit is bounded by ctx only: the command may run as long
// as its timeout allows.
func (c *toolClient) WaitForTerminalExit(ctx context.Context, id string) (tools.TerminalExit, error) {
	var r protocol.TerminalExitStatus
	err := c.call(ctx, protocol.MethodTerminalWait, c.terminal(id), &r, false)
	return exitOf(&r), err
}

func (c *toolClient) TerminalOutput(ctx context.Context, id string) (tools.TerminalOutput, error) {
	var r protocol.TerminalOutputResponse
	if err := c.call(ctx, protocol.MethodTerminalOutput, c.terminal(id), &r, true); err != nil {
		return tools.TerminalOutput{}, err
	}
	out := tools.TerminalOutput{Output: r.Output, Truncated: r.Truncated}
	if r.ExitStatus != nil {
		e := exitOf(r.ExitStatus)
		out.Exit = &e
	}
	return out, nil
}

func (c *toolClient) KillTerminal(ctx context.Context, id string) error {
	return c.call(ctx, protocol.MethodTerminalKill, c.terminal(id), nil, true)
}

func (c *toolClient) ReleaseTerminal(ctx context.Context, id string) error {
	return c.call(ctx, protocol.MethodTerminalRelease, c.terminal(id), nil, true)
}

func (c *toolClient) terminal(id string) protocol.TerminalRequest {
	return protocol.TerminalRequest{SessionID: c.sessionID, TerminalID: id}
}

func exitOf(s *protocol.TerminalExitStatus) tools.TerminalExit {
	e := tools.TerminalExit{ExitCode: s.ExitCode}
	if s.Signal != nil {
		e.Signal = *s.Signal
	}
	return e
}
