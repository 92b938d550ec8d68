package actors

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools"
)

// Messages of the tool actor.
type (
	// toolRan is the outcome of the tool's goroutine.
	toolRan struct{ result tools.Result }
	// toolProgress is new output of a running tool (bash), already rate-limited.
	toolProgress struct{ text string }
)

func (*toolRan) IgnoreDeadLetterLogging()      {}
func (*toolProgress) IgnoreDeadLetterLogging() {}

// toolCall is one tool invocation requested by the model, prepared once:
// the tool_call update, the permission request, the policy decision and the
// run all use the same tools.Call.
type toolCall struct {
	index int
	id    string
	name  string
	input json.RawMessage
	tool  tools.Tool // nil when the model named an unknown tool
	call  tools.Call // nil when tool is nil or Prepare failed
	// prepErr is Prepare's error: the call fails with it, never asked about.
	prepErr error
}

// prepareCall decodes and resolves a call of the model (see tools.Tool).
func prepareCall(index int, id, name string, input json.RawMessage, reg *tools.Registry, env *tools.Env) toolCall {
	c := toolCall{index: index, id: id, name: name, input: input}
	c.tool, _ = reg.Get(name)
	if c.tool != nil {
		c.call, c.prepErr = c.tool.Prepare(env, input)
		if c.call == nil && c.prepErr == nil {
			c.prepErr = fmt.Errorf("Invalid input for tool '%s'", name)
		}
	}
	return c
}

func (c *toolCall) kind() string {
	if c.tool == nil {
		return string(tools.KindOther)
	}
	return string(c.tool.Kind())
}

// startUpdate is the `tool_call` announcing the call (status pending).
func (c *toolCall) startUpdate() protocol.ToolCallUpdate {
	title := c.name
	var locs []protocol.ToolCallLocation
	if c.call != nil {
		if t := c.call.Title(); t != "" {
			title = t
		}
		locs = toLocations(c.call.Locations())
	}
	return protocol.ToolCallUpdate{
		SessionUpdate: protocol.UpdateToolCall,
		ToolCallID:    c.id,
		Title:         title,
		Kind:          c.kind(),
		Status:        protocol.ToolPending,
		Locations:     locs,
		RawInput:      c.input,
	}
}

func toLocations(in []tools.Location) []protocol.ToolCallLocation {
	if len(in) == 0 {
		return nil
	}
	out := make([]protocol.ToolCallLocation, len(in))
	for i, l := range in {
		out[i] = protocol.ToolCallLocation{Path: l.Path, Line: l.Line}
	}
	return out
}

// toolActor runs one tool invocation: permission, execution in a goroutine,
// and the tool_call_update lifecycle. Its parent is the turn.
type toolActor struct {
	deps      *Deps
	sessionID string
	cwd       string
	model     string
	session   *actor.PID
	call      toolCall
	parentCtx context.Context
	cancel    context.CancelFunc
	done      bool
	// Sub-agent state (the agent tool runs a child turn).
	subTurn     *actor.PID
	subMessages []llm.Message
	// subUpdates are the sub-agent's tool call updates as sent live, kept
	// with this call's result so session/load replays them.
	subUpdates []protocol.RawMessage
	subUsage   llm.Usage
}

// subagentMaxCalls bounds the model calls of one sub-agent run.
const subagentMaxCalls = 30

// startSubagent runs the agent tool: a child turn with a restricted tool
// set. Its tool calls reach the client like the parent's (they are sent to
// the session), its permission requests too; its text is not streamed, the
// final answer becomes this tool's result. Stopping this actor (cancel of the
// parent turn) stops the child turn.
func (a *toolActor) startSubagent(ctx actor.Context, in tools.AgentInput) {
	reg, err := tools.SubagentTools(a.deps.Tools, in.SubagentType)
	if err != nil {
		a.complete(ctx, tools.Errorf(err.Error()))
		return
	}
	opts := turnOptions{
		sessionID: a.sessionID, cwd: a.cwd, model: a.model, tools: reg, session: ctx.Self(),
		history:  []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: in.Prompt}}}},
		subagent: in.SubagentType, maxCalls: subagentMaxCalls,
	}
	props := actor.PropsFromProducer(func() actor.Actor { return newTurn(a.deps, opts) },
		actor.WithReceiverMiddleware(keepStack), actor.WithSupervisor(reportAndStop{}))
	a.subTurn = ctx.Spawn(props)
}

func (a *toolActor) subagentFinished(ctx actor.Context, m *turnFinished) {
	a.subUsage = m.usage
	var answer string
	for i := len(a.subMessages) - 1; i >= 0 && answer == ""; i-- {
		if a.subMessages[i].Role == llm.RoleAssistant {
			answer = a.subMessages[i].TextOf()
		}
	}
	switch {
	case m.err != nil:
		a.complete(ctx, tools.Errorf("Sub-agent failed: "+m.err.Message))
	case m.stopReason == protocol.StopCancelled:
		a.complete(ctx, tools.Errorf("Sub-agent cancelled."))
	case answer == "":
		a.complete(ctx, tools.Errorf("Sub-agent ended ("+m.stopReason+") without an answer."))
	default:
		if m.stopReason != protocol.StopEndTurn {
			answer += "\n\n[sub-agent stopped: " + m.stopReason + "]"
		}
		a.complete(ctx, tools.Result{Output: answer})
	}
}

func newToolActor(deps *Deps, sessionID, cwd, model string, session *actor.PID, call toolCall, parentCtx context.Context) *toolActor {
	return &toolActor{deps: deps, sessionID: sessionID, cwd: cwd, model: model, session: session, call: call, parentCtx: parentCtx}
}

func (a *toolActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.deps.Metrics.RunningTools.Add(1)
		a.start(ctx)
	case *actor.Stopped:
		a.deps.Metrics.RunningTools.Add(-1)
	case *permissionDecision:
		switch {
		case m.cancelled:
			a.done = true
			ctx.Send(ctx.Parent(), &toolDone{index: a.call.index, cancelled: true})
			ctx.Stop(ctx.Self())
		case m.allow:
			a.run(ctx)
		default:
			a.complete(ctx, tools.Errorf(m.reason))
		}
	case *toolRan:
		a.complete(ctx, m.result)
	case *toolProgress:
		if !a.done {
			text := protocol.Text(m.text)
			a.emit(ctx, protocol.ToolCallUpdate{Content: []protocol.ToolCallContent{{Type: "content", Content: &text}}})
		}
	case *goroutinePanic:
		a.complete(ctx, tools.Errorf(fmt.Sprintf("Tool %s crashed: %v", a.call.name, m.p.value)))
	// A sub-agent's turn reports to this actor as a turn reports to its session.
	case *outbound:
		if a.subTurn != nil {
			a.keepSubUpdate(m.frame.Data)
		}
		ctx.Send(a.session, m)
	case *permissionAsk:
		ctx.Send(a.session, m) // a sub-agent's tool asks like any other
	case *messageDone:
		a.subMessages = append(a.subMessages, m.msg)
	case *turnFinished:
		a.subagentFinished(ctx, m)
	case *childCrashed:
		a.complete(ctx, tools.Errorf(fmt.Sprintf("Sub-agent crashed: %v", m.reason.value)))
	case *actor.Stopping:
		if a.cancel != nil {
			a.cancel()
		}
	}
}

// emit sends a tool_call_update and returns its encoded update object.
func (a *toolActor) emit(ctx actor.Context, u protocol.ToolCallUpdate) protocol.RawMessage {
	u.SessionUpdate = protocol.UpdateToolCallUpdate
	u.ToolCallID = a.call.id
	update := protocol.RawMessage(protocol.MustMarshal(u))
	data := protocol.EncodeNotification(protocol.MethodSessionUpdate,
		protocol.SessionNotification{SessionID: a.sessionID, Update: update})
	ctx.Send(a.session, &outbound{frame: Frame{Data: data, SessionID: a.sessionID}})
	return update
}

func (a *toolActor) start(ctx actor.Context) {
	if a.call.tool == nil {
		a.complete(ctx, tools.Errorf(fmt.Sprintf("Unknown tool: %s", a.call.name)))
		return
	}
	if a.call.prepErr != nil {
		a.complete(ctx, tools.Errorf(a.call.prepErr.Error()))
		return
	}
	// The session decides from its mode and remembered decisions, and asks
	// the client when needed, about what the prepared call reaches.
	u := a.call.startUpdate()
	u.SessionUpdate = ""
	ctx.Send(a.session, newPermissionAsk(a.call.name, a.call.tool, a.call.call.Access(), u, ctx.Self()))
}

func (a *toolActor) run(ctx actor.Context) {
	a.emit(ctx, protocol.ToolCallUpdate{Status: protocol.ToolInProgress})
	if ac, ok := a.call.call.(*tools.AgentCall); ok {
		a.startSubagent(ctx, ac.Input)
		return
	}
	runCtx, cancel := context.WithCancel(a.parentCtx)
	a.cancel = cancel
	self, root, call := ctx.Self(), ctx.ActorSystem().Root, a.call.call
	progress := func(text string) { root.Send(self, &toolProgress{text: text}) }
	go func() {
		defer func() {
			if r := recover(); r != nil {
				root.Send(self, &goroutinePanic{p: recovered(r)})
			}
		}()
		root.Send(self, &toolRan{result: call.Run(runCtx, progress)})
	}()
}

// complete reports the final tool_call_update and hands the result to the turn.
func (a *toolActor) complete(ctx actor.Context, res tools.Result) {
	if a.done {
		return
	}
	a.done = true
	// The model and the client get the same bounded text; the whole output
	// is spilled to a file under the state root.
	res = tools.Bound(res, a.deps.Config.Home, 0)
	u := protocol.ToolCallUpdate{Status: protocol.ToolCompleted, RawOutput: res.Raw}
	if res.IsError {
		u.Status = protocol.ToolFailed
	}
	if res.Output != "" {
		text := protocol.Text(res.Output)
		u.Content = append(u.Content, protocol.ToolCallContent{Type: "content", Content: &text})
	}
	if res.Diff != nil {
		newText := res.Diff.NewText
		u.Content = append(u.Content, protocol.ToolCallContent{Type: "diff", Path: res.Diff.Path, OldText: res.Diff.OldText, NewText: &newText})
	}
	if u.RawOutput == nil {
		// The text is already in content; rawOutput stays small.
		u.RawOutput = map[string]any{"isError": res.IsError, "outputChars": len(res.Output)}
	}
	display := a.emit(ctx, u)
	if len(a.subUpdates) > 0 {
		display = protocol.RawMessage(protocol.MustMarshal(append(a.subUpdates, display)))
	}
	ctx.Send(ctx.Parent(), &toolDone{index: a.call.index, result: res, display: display, usage: a.subUsage})
	ctx.Stop(ctx.Self())
}

// keepSubUpdate records the update of a sub-agent frame for replay.
func (a *toolActor) keepSubUpdate(frame []byte) {
	var n struct {
		Params struct {
			Update protocol.RawMessage `json:"update"`
		} `json:"params"`
	}
	if protocol.Unmarshal(frame, &n) != nil || len(n.Params.Update) == 0 {
		return
	}
	// Like the session's own history: the tool_call and its final update;
	// in-progress and streamed output are not replayed.
	var u struct {
		SessionUpdate string `json:"sessionUpdate"`
		Status        string `json:"status"`
	}
	if protocol.Unmarshal(n.Params.Update, &u) == nil &&
		(u.SessionUpdate == protocol.UpdateToolCall || u.Status == protocol.ToolCompleted || u.Status == protocol.ToolFailed) {
		a.subUpdates = append(a.subUpdates, n.Params.Update)
	}
}
