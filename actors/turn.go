package actors

import (
	"context"
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors/tracing"
	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/tools/sandbox"
)

// Messages of the turn actor.
type (
	cancelTurn struct{}
	// streamEnd: the model call of generation gen returned (its events are
	// in its modelCall); gen tells stale model calls apart.
	streamEnd struct {
		gen int
		err error
	}
	// goroutinePanic is a panic recovered in a goroutine the actor owns; the
	// actor re-raises it so supervision handles every crash the same way.
	goroutinePanic struct{ p *panicError }
	// stopGrace: the tools of an ended turn took too long to stop.
	stopGrace struct{}
	// toolDone is the result of the tool call at index; display is the
	// final tool_call_update the client saw, kept for replay.
	toolDone struct {
		index     int
		result    tools.Result
		display   protocol.RawMessage
		cancelled bool
		// usage of a sub-agent run, counted in the turn's usage.
		usage llm.Usage
	}
)

// turnOptions is what a session gives a new turn.
type turnOptions struct {
	sessionID string
	cwd       string
	// dirs are the session's additional workspace roots (tools.Env).
	dirs []string
	// thinkingBudget is the session's thought_level as a budget (0: the
	// configured one).
	thinkingBudget int
	// compactionUpdates: the client shows compaction updates;
	// noAutoCompact: the session's auto_compact option is off.
	compactionUpdates bool
	noAutoCompact     bool
	model             string
	// mode is the session's mode, whose rules the system prompt states
	// (the permission decisions themselves are the session's).
	mode    string
	history []llm.Message
	tools   *tools.Registry
	// compactOnly runs /compact: summarise, no model answer.
	compactOnly bool
	// session receives tool actors' updates and permission asks (default:
	// the parent; a sub-agent's parent is its agent tool actor).
	session *actor.PID
	// subagent names the sub-agent type; its text is not streamed.
	subagent string
	// maxCalls overrides Config.MaxTurnRequests when > 0.
	maxCalls int
	// mcp is the session's MCP tool list, read at every model request;
	// mcpKeep (nil = all) filters it (plan mode, sub-agent types).
	mcp     *mcpToolSet
	mcpKeep func(tools.Tool) bool
	// turnID is the session's number of the prompt turn (a sub-agent's is
	// its parent's), carried by the tools' requests to the client.
	turnID int64
	// jail is the session's sandbox, for the processes tools start.
	jail *sandbox.Jail
	// owner is the session's principal, whose tokens the turn spends.
	owner string
	// trace is the context whose span the turn's span is a child of: the
	// client's traceparent, or a sub-agent's tool call (nil: a new trace);
	// prompt is the request's text its span carries with content capture.
	trace  context.Context
	prompt string
	// resume: the turn goes on from where another process left it
	// (turn_resume.go); history is the session's. mcpHold: it waits for
	// the session's MCP servers first (resumeGo, session_adopt_mcp.go).
	resume  *store.Step
	mcpHold bool
}

func (*streamEnd) IgnoreDeadLetterLogging()      {}
func (*goroutinePanic) IgnoreDeadLetterLogging() {}
func (*toolDone) IgnoreDeadLetterLogging()       {}
func (*stopGrace) IgnoreDeadLetterLogging()      {}

// toolStopGrace bounds how long an ended turn waits for its tools to clean
// up on the client (kill and release a terminal) before it reports its end.
const toolStopGrace = 15 * time.Second

// turn runs the agent loop of one prompt: model call, tools, model call…
type turn struct {
	deps      *Deps
	sessionID string
	cwd       string
	dirs      []string
	jail      *sandbox.Jail
	model     string
	tools     *tools.Registry
	log       zerolog.Logger
	// thinkingBudget, compactionUpdates: see turnOptions; compactionID is
	// the compaction running, as the client was told of it.
	thinkingBudget    int
	compactionUpdates bool
	noAutoCompact     bool
	compactionID      string
	messages          []llm.Message
	// compacting is set while a summary call runs; compactOnly ends the
	// turn after it (the /compact command).
	compacting  bool
	compactOnly bool
	compactKeep int
	compactFrom int
	session     *actor.PID
	subagent    string
	maxCalls    int
	turnID      int64
	mode        string
	// system and systemTurn are the system prompt's two parts, gathered
	// once at the turn's start (turn_context.go).
	system, systemTurn string
	// compactedOnce: auto-compaction runs at most once per turn.
	compactedOnce bool
	// lastContext is the context size the last model call reported.
	lastContext int64
	// budget counts the turn's tokens and checks its owner's budget.
	budget turnBudget

	ctx        context.Context
	cancel     context.CancelFunc
	modelCalls int
	usage      llm.Usage
	streaming  bool
	gen        int
	ended      bool

	// call is the model call being streamed; stop its stop reason.
	call    *modelCall
	pending []*pendingCall
	stop    llm.StopReason

	// Tool phase: the step's tool actors, by call index (nil: not run by
	// this turn), and how many have not ended.
	toolPIDs  map[string]int // tool actor id -> call index
	toolActs  []*actor.PID
	remaining int
	// unrecorded counts the step's results the session has not recorded
	// yet (toolResultRecorded).
	unrecorded int
	// pausing: the session asked the turn to pause at its next step
	// boundary (turn_pause.go).
	pausing bool
	// resume: the turn goes on from a step recorded by another process
	// (turn_resume.go) once what it waits for is there; nil once under way.
	resume *resumeGate

	// tools are those of the model request being made: base plus the MCP
	// tools of that moment (see currentTools).
	base    *tools.Registry
	mcp     *mcpToolSet
	mcpKeep func(tools.Tool) bool
	// toolsOf is the MCP list (the set's pointer) t.tools was made of:
	// the next request reuses t.tools while the list is the same one.
	toolsOf *[]tools.Tool
	// End: the report waits until every running tool has stopped (stopWait
	// holds their indexes) or toolStopGrace has passed.
	// report is a *turnFinished, or a *turnPaused.
	report   any
	stopWait map[int]bool
	reported bool

	// opts keeps what the turn's span is made of; span and chat are the
	// invoke_agent span and the running model call's (nil: tracing off).
	opts turnOptions
	span *tracing.Span
	chat *tracing.Span
}

// inherited are the session's settings a sub-agent of this turn runs with.
func (t *turn) inherited() turnOptions {
	return turnOptions{dirs: t.dirs, mode: t.mode, jail: t.jail, thinkingBudget: t.thinkingBudget,
		compactionUpdates: t.compactionUpdates, noAutoCompact: t.noAutoCompact, owner: t.budget.owner}
}

func newTurn(deps *Deps, o turnOptions) *turn {
	if o.tools == nil {
		o.tools = deps.Tools
	}
	log := deps.Log.With().Str("session", o.sessionID).Logger()
	return &turn{
		deps:      deps,
		budget:    turnBudget{ledger: deps.Ledger, owner: o.owner, log: log},
		sessionID: o.sessionID,
		cwd:       o.cwd,
		dirs:      o.dirs,

		thinkingBudget:    o.thinkingBudget,
		compactionUpdates: o.compactionUpdates,
		noAutoCompact:     o.noAutoCompact,
		model:             o.model,
		tools:             o.tools,
		base:              o.tools,
		mcp:               o.mcp,
		mcpKeep:           o.mcpKeep,
		log:               log,
		messages:          o.history,
		compactOnly:       o.compactOnly,
		session:           o.session,
		subagent:          o.subagent,
		maxCalls:          o.maxCalls,
		turnID:            o.turnID,
		jail:              o.jail,
		mode:              o.mode,
		opts:              turnOptions{trace: o.trace, prompt: o.prompt},
		resume:            newResumeGate(o.resume, o.mcpHold),
	}
}

func (t *turn) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		t.deps.Metrics.RunningTurns.Add(1)
		t.ctx, t.cancel = context.WithCancel(t.startSpan())
		t.ctx = t.withCaller(t.ctx, ctx)
		if t.compactOnly {
			if !t.startCompaction(ctx, 1) {
				t.emit(ctx, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateAgentMessageChunk, Content: protocol.Text("Nothing to compact yet.")})
				t.finish(ctx, protocol.StopEndTurn, nil)
			}
			return
		}
		t.gatherContext(ctx)
	case *contextReady:
		if !t.ended {
			t.system, t.systemTurn = m.stable, m.turn
			if t.resume != nil {
				t.resume.awaitContext = false
				t.resumeWhenReady(ctx)
				return
			}
			t.callModel(ctx)
		}
	case *streamEnd:
		if m.gen == t.gen && !t.ended {
			t.onStreamEnd(ctx, m.err)
		}
	case *budgetChecked:
		if !t.ended {
			t.onBudgetChecked(ctx, m)
		}
	case *goroutinePanic:
		panic(m.p)
	case *resumeGo:
		if t.resume != nil {
			t.resume.awaitMCP = false
		}
		t.resumeWhenReady(ctx)
	case *cancelTurn:
		t.finish(ctx, protocol.StopCancelled, nil)
	case *pauseTurn:
		t.askPause(ctx, m.cut)
	case *toolHeld:
		t.onToolHeld(ctx, m.index)
	case *toolResultRecorded:
		t.resultRecorded(ctx)
	case *toolDone:
		t.onToolDone(ctx, m)
	case *toolStopped:
		t.toolStopped(ctx, m.index)
	case *stopGrace:
		t.reportEnd(ctx)
	case *turnCounted:
		t.sendReport(ctx)
	case *childCrashed:
		if i, ok := t.toolPIDs[m.child.Id]; ok {
			t.log.Error().Interface("panic", m.reason.value).Bytes("stack", m.reason.stack).Msg("tool actor crashed")
			t.onToolDone(ctx, &toolDone{index: i, result: tools.Errorf("Tool crashed: " + m.reason.Error())})
		}
	case *actor.Stopping:
		if t.cancel != nil {
			t.cancel()
		}
	case *actor.Stopped:
		t.deps.Metrics.RunningTurns.Add(-1)
		if t.span != nil { // a crash: finish ended it otherwise
			t.endSpans("", &protocol.Error{Message: "turn stopped"})
		}
	}
}

// emit sends a session/update for this session through the session actor,
// which keeps it ordered with everything else the session says.
func (t *turn) emit(ctx actor.Context, update any) {
	t.emitRaw(ctx, protocol.EncodeNotification(protocol.MethodSessionUpdate,
		protocol.SessionNotification{SessionID: t.sessionID, Update: update}))
}

// emitRaw sends an already encoded session/update.
func (t *turn) emitRaw(ctx actor.Context, data []byte) {
	ctx.Send(ctx.Parent(), &outbound{frame: Frame{Data: data, SessionID: t.sessionID}})
}

func (t *turn) record(ctx actor.Context, msg llm.Message) {
	if len(msg.Content) == 0 {
		return
	}
	t.messages = append(t.messages, msg)
	ctx.Send(ctx.Parent(), &messageDone{msg: msg})
}

func (t *turn) onStreamEnd(ctx actor.Context, err error) {
	t.streaming = false
	res := t.call.take()
	callUsage := res.usage
	t.budget.count(t.modelName(), callUsage)
	t.usage = t.usage.Add(callUsage)
	t.stop = res.stop
	t.chat.EndChat(callUsage.InputTokens, callUsage.OutputTokens, string(res.stop), err)
	t.chat = nil
	if t.compacting {
		t.endCompaction(ctx, err, res.msg.TextOf())
		return
	}
	if err == nil && t.subagent == "" {
		t.lastContext = callUsage.InputTokens + callUsage.OutputTokens
		t.emit(ctx, protocol.UsageUpdate{SessionUpdate: protocol.UpdateUsage,
			Used: callUsage.InputTokens + callUsage.OutputTokens, Size: int64(t.deps.contextWindow(t.model))})
	}
	msg := res.msg
	if err != nil {
		t.record(ctx, msg)
		if errors.Is(err, context.Canceled) {
			t.finish(ctx, protocol.StopCancelled, nil)
			return
		}
		t.failModel(ctx, err)
		return
	}
	// Each call is decoded and resolved once, here: what the client is
	// shown and asked about is what runs.
	var calls []toolCall
	env := &tools.Env{Cwd: t.cwd, Home: t.deps.Config.Home, AdditionalDirs: t.dirs, Jail: t.jail}
	for i := range msg.Content {
		if b := &msg.Content[i]; b.Type == llm.BlockToolUse {
			c := prepareCall(len(calls), b.ToolCallID, b.Name, b.Input, t.tools, env)
			b.Display = protocol.MustMarshal(c.startUpdate())
			calls = append(calls, c)
		}
	}
	t.record(ctx, msg)
	switch {
	case len(calls) > 0 && t.pausing:
		// Its calls are recorded, none started: the next holder runs them.
		// They are announced here, as when they run, so that every call of
		// a recorded step was shown by the holder that recorded it: the
		// next holder, or a load's replay, shows none twice.
		for i := range msg.Content {
			if b := &msg.Content[i]; b.Type == llm.BlockToolUse {
				t.emit(ctx, b.Display)
			}
		}
		t.pauseNow(ctx)
	case len(calls) > 0:
		t.runTools(ctx, msg, calls)
	case t.stop == llm.StopMaxTokens:
		t.finish(ctx, protocol.StopMaxTokens, nil)
	case t.stop == llm.StopRefusal:
		t.finish(ctx, protocol.StopRefusal, nil)
	default:
		t.finish(ctx, protocol.StopEndTurn, nil)
	}
}

func (t *turn) failModel(ctx actor.Context, err error) {
	if llm.IsAuthError(err) {
		t.finish(ctx, "", t.deps.errAuthRequired())
		return
	}
	errorID := newErrorID()
	t.log.Error().Err(err).Str("error_id", errorID).Msg("model call failed")
	t.emit(ctx, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateAgentMessageChunk,
		Content: protocol.Text("[Error] " + err.Error())})
	t.finish(ctx, "", protocol.ErrInternal(err.Error(), errorID))
}

// finish ends the turn: tool calls still running are cancelled, and the
// end is reported to the session once they have stopped — at once for
// local ones; a call that talks to the client first releases what it holds
// there, so that no request of the turn follows the prompt's answer (see
// toolActor.stop; bounded by toolStopGrace). Then the actor stops.
func (t *turn) finish(ctx actor.Context, stopReason string, err *protocol.Error) {
	if t.ended {
		return
	}
	t.end(ctx, true)
	t.report = &turnFinished{stopReason: stopReason, usage: t.usage, err: err}
	t.endSpans(stopReason, err)
	t.stopTools(ctx)
}

// end ends the turn's model call, keeping (keep) what the user already
// saw of its answer in the history.
func (t *turn) end(ctx actor.Context, keep bool) {
	t.ended = true
	if t.cancel != nil {
		t.cancel()
	}
	if t.compacting {
		t.compactionEnded(ctx, protocol.CompactionCancelled, "")
	}
	if t.streaming {
		// Keep what the user already saw of a cancelled answer (a summary
		// being written is not an answer and is never shown).
		res := t.call.take()
		t.budget.count(t.modelName(), res.usage)
		if keep && !t.compacting {
			t.record(ctx, res.msg)
		}
	}
}

// stopTools stops the tools still running and reports the turn's end once
// they have stopped.
func (t *turn) stopTools(ctx actor.Context) {
	t.stopWait = map[int]bool{}
	for i, c := range t.pending {
		if !c.done && i < len(t.toolActs) && t.toolActs[i] != nil {
			t.stopWait[i] = true
			ctx.Send(t.toolActs[i], &stopTool{})
		}
	}
	if len(t.stopWait) == 0 {
		t.reportEnd(ctx)
		return
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	time.AfterFunc(toolStopGrace, func() { root.Send(self, &stopGrace{}) })
}

// toolStopped: a tool of the ended turn has nothing left on the client.
func (t *turn) toolStopped(ctx actor.Context, index int) {
	if !t.ended || !t.stopWait[index] {
		return
	}
	delete(t.stopWait, index)
	if len(t.stopWait) == 0 {
		t.reportEnd(ctx)
	}
}

func (t *turn) reportEnd(ctx actor.Context) {
	if t.reported {
		return
	}
	t.reported = true
	if counting := t.budget.counting(); counting != nil {
		// A person held to a budget is answered once the turn's usage is
		// in the store (bounded by ledgerTimeout): their next prompt, on
		// this pod or another, is checked against it.
		self, root := ctx.Self(), ctx.ActorSystem().Root
		go func() {
			<-counting
			root.Send(self, &turnCounted{})
		}()
		return
	}
	t.sendReport(ctx)
}

// sendReport gives the session the turn's end, and the actor stops.
func (t *turn) sendReport(ctx actor.Context) {
	ctx.Send(ctx.Parent(), t.report)
	ctx.Stop(ctx.Self())
}
