package actors

import (
	"context"
	"fmt"
	"slices"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/actors/tracing"
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
	// stopTool: the turn has ended; the tool actor answers toolStopped once
	// nothing of it is left on the client (a terminal is released).
	stopTool    struct{}
	toolStopped struct{ index int }
)

func (*toolRan) IgnoreDeadLetterLogging()      {}
func (*toolProgress) IgnoreDeadLetterLogging() {}
func (*stopTool) IgnoreDeadLetterLogging()     {}
func (*toolStopped) IgnoreDeadLetterLogging()  {}

// toolActor runs one tool invocation: permission, execution in a goroutine,
// and the tool_call_update lifecycle. Its parent is the turn.
type toolActor struct {
	deps      *Deps
	sessionID string
	cwd       string
	model     string
	// inherit are the session's settings a sub-agent's turn runs with
	// (its directories, mode, sandbox, thought level, compaction).
	inherit   turnOptions
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
	// mcp is the session's MCP tool list, for a sub-agent's turn.
	mcp *mcpToolSet

	// Requests to the client (see client.go). turnID tags them so the
	// session sends none for a turn that has ended; caps are the client's,
	// given with the permission decision; calls are those awaiting an
	// answer; issued counts them all.
	turnID int64
	caps   tools.ClientCaps
	gone   chan struct{}
	calls  map[int]*clientCall
	tags   int
	issued int
	// record: a session turn's call, whose start the session records
	// before it runs (durable turns); started: it asked for that (or
	// needs none) and runs whatever comes, a pause waits for its end.
	record  bool
	started bool
	// running: the tool's goroutine has not returned yet. stopping: the
	// turn ended (stopTool); nothing is reported but toolStopped.
	running      bool
	stopping     bool
	stopReported bool
	// terminalID is the client terminal running this call, embedded in
	// its live updates.
	terminalID string
	// span is the call's execute_tool span (nil: tracing off); parentCtx
	// carries it to the run, MCP calls and a sub-agent's turn.
	span *tracing.Span
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
	keep, _ := tools.SubagentKeep(in.SubagentType)
	opts := a.inherit
	opts.sessionID, opts.cwd, opts.model, opts.tools, opts.session = a.sessionID, a.cwd, a.model, reg, ctx.Self()
	opts.mcp, opts.mcpKeep = a.mcp, keep
	opts.history = []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: in.Prompt}}}}
	opts.subagent, opts.maxCalls, opts.turnID = in.SubagentType, subagentMaxCalls, a.turnID
	opts.trace = a.parentCtx
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

func newToolActor(deps *Deps, sessionID, cwd, model string, session *actor.PID, call toolCall, parentCtx context.Context, turnID int64, mcp *mcpToolSet) *toolActor {
	return &toolActor{deps: deps, sessionID: sessionID, cwd: cwd, model: model, session: session, call: call,
		parentCtx: parentCtx, turnID: turnID, gone: make(chan struct{}), calls: map[int]*clientCall{}, mcp: mcp}
}

func (a *toolActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.deps.Metrics.RunningTools.Add(1)
		a.parentCtx, a.span = a.deps.Trace.StartTool(a.parentCtx, a.call.name, a.call.id, a.sessionID, a.call.input)
		a.start(ctx)
	case *actor.Stopped:
		a.deps.Metrics.RunningTools.Add(-1)
		a.span.EndTool(a.deps.Trace, "", true) // still open: stopped before its result (cancelled)
		close(a.gone)
	case *previewWanted:
		a.previewed(ctx, m)
	case *previewRead:
		a.previewDone(ctx, m)
	case *permissionDecision:
		switch {
		case a.stopping:
		case m.cancelled:
			a.done = true
			ctx.Send(ctx.Parent(), &toolDone{index: a.call.index, cancelled: true})
			ctx.Stop(ctx.Self())
		case m.allow:
			a.caps = m.caps
			a.begin(ctx)
		default:
			a.complete(ctx, tools.Errorf(m.reason))
		}
	case *toolRan:
		a.running = false
		if a.stopping {
			a.reportStopped(ctx)
			return
		}
		a.complete(ctx, m.result)
	case *clientCall:
		a.askClient(ctx, m)
	case *clientAnswer:
		a.clientAnswered(ctx, m)
	case *stopTool:
		a.stop(ctx)
	case *toolsStartRecorded:
		if !a.done && !a.stopping {
			a.run(ctx)
		}
	case *pauseTool:
		if !a.started && !a.done && !a.stopping {
			// Not started: the next holder runs it (and asks again).
			a.done = true
			ctx.Send(ctx.Parent(), &toolHeld{index: a.call.index})
			ctx.Stop(ctx.Self())
		}
	case *outboundRequest:
		ctx.Send(a.session, m) // a sub-agent's tool asks the client like any other
	case *toolProgress:
		if !a.done {
			text := protocol.Text(m.text)
			a.emit(ctx, protocol.ToolCallUpdate{Content: []protocol.ToolCallContent{{Type: "content", Content: &text}}})
		}
	case *goroutinePanic:
		a.running = false
		if a.stopping {
			a.reportStopped(ctx)
			return
		}
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
		if a.stopping {
			a.reportStopped(ctx)
			return
		}
		a.subagentFinished(ctx, m)
	case *childCrashed:
		if a.stopping {
			a.reportStopped(ctx)
			return
		}
		a.complete(ctx, tools.Errorf(fmt.Sprintf("Sub-agent crashed: %v", m.reason.value)))
	case *actor.Stopping:
		if a.cancel != nil {
			a.cancel()
		}
	}
}

// emit sends a tool_call_update and returns its encoded update object.
func (a *toolActor) emit(ctx actor.Context, u protocol.ToolCallUpdate) protocol.RawMessage {
	return a.emitUpdate(ctx, a.encode(u))
}

// emitUpdate sends a session/update and returns its encoded update object.
func (a *toolActor) emitUpdate(ctx actor.Context, u any) protocol.RawMessage {
	update := protocol.RawMessage(protocol.MustMarshal(u))
	data := protocol.EncodeNotification(protocol.MethodSessionUpdate,
		protocol.SessionNotification{SessionID: a.sessionID, Update: update})
	ctx.Send(a.session, &outbound{frame: Frame{Data: data, SessionID: a.sessionID}})
	return update
}

// encode is the update object of a tool_call_update of this call.
func (a *toolActor) encode(u protocol.ToolCallUpdate) protocol.RawMessage {
	u.SessionUpdate = protocol.UpdateToolCallUpdate
	u.ToolCallID = a.call.id
	return protocol.RawMessage(protocol.MustMarshal(u))
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
	ask := newPermissionAsk(a.call.name, a.call.tool, a.call.call, u, ctx.Self())
	// The user reviews the change before approving it: the session asks
	// for the diff when it asks the user (previewWanted).
	ask.preview, _ = a.call.call.(tools.Previewer)
	ctx.Send(a.session, ask)
}

// previewed has the diff the session asks for read off this actor (a
// large file, a slow disk or the editor's answer must not hold the tool's
// stop or cancel), through the client when the run would go through it.
// previewDone sends the ask back.
func (a *toolActor) previewed(ctx actor.Context, m *previewWanted) {
	if a.done || a.stopping {
		a.previewDone(ctx, &previewRead{wanted: m})
		return
	}
	self, root, p := ctx.Self(), ctx.ActorSystem().Root, m.ask.preview
	var cl tools.Client
	if _, ok := a.call.call.(tools.ClientCall); ok && m.caps.Any() {
		cl = &toolClient{caps: m.caps, sessionID: a.sessionID, toolCallID: a.call.id, self: self, root: root, gone: a.gone,
			timeout: a.deps.Config.ClientTimeout}
	}
	readCtx := a.parentCtx
	go func() {
		root.Send(self, &previewRead{wanted: m, diff: a.readPreview(readCtx, p, cl)})
	}()
}

// previewDone always sends the ask back: with the diff; without it when
// reading it failed or panicked; withdrawn when the call is done or
// stopping (the session drops it, or, when only a sub-agent's turn ended,
// goes on with the asks behind it).
func (a *toolActor) previewDone(ctx actor.Context, m *previewRead) {
	withDiff := *m.wanted.ask
	withDiff.preview, withDiff.previewOf = nil, m.wanted.ask
	if a.done || a.stopping {
		withDiff.withdrawn = true
	} else if m.diff != nil {
		withDiff.toolCall.Content = append(slices.Clip(withDiff.toolCall.Content), diffContent(m.diff))
	}
	ctx.Send(m.wanted.session, &withDiff)
}

// readPreview is p.Preview(ctx, cl), nil when it panics: the user is asked
// without the diff rather than never. It runs on its own goroutine and
// touches nothing of the actor but its logger and names.
func (a *toolActor) readPreview(ctx context.Context, p tools.Previewer, cl tools.Client) (d *tools.Diff) {
	defer func() {
		if r := recover(); r != nil {
			a.deps.Log.Error().Str("session", a.sessionID).Str("tool", a.call.name).Interface("panic", r).
				Msg("reading the diff of a permission request panicked; asking without it")
			d = nil
		}
	}()
	return p.Preview(ctx, cl)
}

// begin runs the call, allowed: a session turn's call once the session
// recorded its start (toolsStartRecorded; a fenced session never answers
// and its turn is cancelled).
func (a *toolActor) begin(ctx actor.Context) {
	a.started = true
	if !a.record {
		a.run(ctx)
		return
	}
	ctx.Request(a.session, &toolsStarting{ids: []string{a.call.id}, names: []string{a.call.name}})
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
	var client *toolClient
	if cc, ok := call.(tools.ClientCall); ok && a.caps.Any() {
		client = &toolClient{caps: a.caps, sessionID: a.sessionID, toolCallID: a.call.id, self: self, root: root, gone: a.gone,
			timeout: a.deps.Config.ClientTimeout}
		call = &viaClient{cc, client}
	}
	a.running = true
	go func() {
		defer func() {
			if r := recover(); r != nil {
				root.Send(self, &goroutinePanic{p: recovered(r)})
			}
		}()
		root.Send(self, &toolRan{result: call.Run(runCtx, progress)})
	}()
}

// viaClient runs a ClientCall through the session's client.
type viaClient struct {
	tools.ClientCall
	client *toolClient
}

func (v *viaClient) Run(ctx context.Context, progress func(string)) tools.Result {
	return v.RunVia(ctx, v.client, progress)
}

// askClient issues a request of the tool's goroutine. Once the turn has
// ended only a call that already talks to the client (to release its
// terminal) may go on.
func (a *toolActor) askClient(ctx actor.Context, m *clientCall) {
	if a.done || (a.stopping && a.issued == 0) {
		m.reply <- clientReply{err: protocol.NewError(protocol.CodeRequestCancelled, "the turn has ended", nil)}
		return
	}
	a.tags++
	a.issued++
	a.calls[a.tags] = m
	ctx.Send(a.session, &outboundRequest{sessionID: a.sessionID, method: m.method, params: m.params,
		replyTo: ctx.Self(), tag: a.tags, turn: a.turnID})
}

// clientAnswered hands an answer to the goroutine. A terminal the client
// created is shown in the tool call at once, so the user watches it run.
func (a *toolActor) clientAnswered(ctx actor.Context, m *clientAnswer) {
	tag, _ := m.tag.(int)
	c, ok := a.calls[tag]
	if !ok {
		return
	}
	delete(a.calls, tag)
	if c.method == protocol.MethodTerminalCreate && m.err == nil && !a.done && !a.stopping {
		var r protocol.CreateTerminalResponse
		if protocol.Unmarshal(m.result, &r) == nil && r.TerminalID != "" {
			a.terminalID = r.TerminalID
			a.emit(ctx, protocol.ToolCallUpdate{Content: []protocol.ToolCallContent{{Type: "terminal", TerminalID: r.TerminalID}}})
		}
	}
	c.reply <- clientReply{result: m.result, err: m.err}
}

// stop: the turn has ended. A call that talks to the client is let finish
// its cleanup (its context is cancelled; it kills and releases its
// terminal); a sub-agent's turn is cancelled and awaited; anything else is
// done at once (a local bash group is killed by the goroutine in the
// background, as its context is cancelled).
func (a *toolActor) stop(ctx actor.Context) {
	if a.stopping {
		return
	}
	a.stopping = true
	if a.cancel != nil {
		a.cancel()
	}
	switch {
	case a.done:
		a.reportStopped(ctx)
	case a.subTurn != nil:
		ctx.Send(a.subTurn, &cancelTurn{})
	case a.running && a.issued > 0:
	default:
		a.reportStopped(ctx)
	}
}

func (a *toolActor) reportStopped(ctx actor.Context) {
	if a.stopReported {
		return
	}
	a.stopReported = true
	ctx.Send(ctx.Parent(), &toolStopped{index: a.call.index})
}

// complete reports the final tool_call_update and hands the result to the turn.
func (a *toolActor) complete(ctx actor.Context, res tools.Result) {
	if a.done {
		return
	}
	a.done = true
	a.span.EndTool(a.deps.Trace, res.Output, res.IsError)
	a.span = nil
	// The model and the client get the same bounded text; the whole output
	// is spilled to a file under the state root.
	full := res.Output
	res = tools.Bound(res, a.deps.Config.Home, 0)
	u := protocol.ToolCallUpdate{Status: protocol.ToolCompleted, RawOutput: res.Raw}
	if res.IsError {
		u.Status = protocol.ToolFailed
	}
	u.Content = resultContent(res, res.Output != full)
	if res.Diff != nil {
		u.Content = append(u.Content, diffContent(res.Diff))
	}
	if u.RawOutput == nil {
		// The text is already in content; rawOutput stays small.
		u.RawOutput = map[string]any{"isError": res.IsError, "outputChars": len(res.Output)}
	}
	var plan protocol.RawMessage
	if res.Plan != nil {
		// The whole list, which replaces the client's: sent before the
		// call completes and kept with its result for replay.
		plan = a.emitUpdate(ctx, planUpdate(res.Plan))
	}
	var display protocol.RawMessage
	if a.terminalID != "" {
		// The client keeps showing its terminal; a replay (another client,
		// the terminal long released) shows the text.
		live := u
		live.Content = append([]protocol.ToolCallContent{{Type: "terminal", TerminalID: a.terminalID}}, u.Content...)
		a.emit(ctx, live)
		display = a.encode(u)
	} else {
		display = a.emit(ctx, u)
	}
	if plan != nil {
		display = protocol.RawMessage(protocol.MustMarshal([]protocol.RawMessage{plan, display}))
	}
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
