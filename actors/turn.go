package actors

import (
	"context"
	"errors"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools"
)

// Messages of the turn actor.
type (
	cancelTurn struct{}
	// streamEvent is one provider event; gen tells stale model calls apart.
	streamEvent struct {
		gen int
		ev  llm.Event
	}
	streamEnd struct {
		gen int
		err error
	}
	// goroutinePanic is a panic recovered in a goroutine the actor owns; the
	// actor re-raises it so supervision handles every crash the same way.
	goroutinePanic struct{ p *panicError }
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
	model     string
	history   []llm.Message
	tools     *tools.Registry
	// compactOnly runs /compact: summarise, no model answer.
	compactOnly bool
	// session receives tool actors' updates and permission asks (default:
	// the parent; a sub-agent's parent is its agent tool actor).
	session *actor.PID
	// subagent names the sub-agent type; its text is not streamed.
	subagent string
	// maxCalls overrides Config.MaxTurnRequests when > 0.
	maxCalls int
}

func (*streamEvent) IgnoreDeadLetterLogging()    {}
func (*streamEnd) IgnoreDeadLetterLogging()      {}
func (*goroutinePanic) IgnoreDeadLetterLogging() {}
func (*toolDone) IgnoreDeadLetterLogging()       {}

// pendingCall is a tool call being streamed or run.
type pendingCall struct {
	id      string
	name    string
	done    bool
	res     tools.Result
	display protocol.RawMessage
}

// turn runs the agent loop of one prompt: model call, tools, model call…
type turn struct {
	deps      *Deps
	sessionID string
	cwd       string
	model     string
	tools     *tools.Registry
	log       zerolog.Logger
	messages  []llm.Message
	// compacting is set while a summary call runs; compactOnly ends the
	// turn after it (the /compact command).
	compacting  bool
	compactOnly bool
	compactKeep int
	compactFrom int
	session     *actor.PID
	subagent    string
	maxCalls    int
	// compactedOnce: auto-compaction runs at most once per turn.
	compactedOnce bool
	// lastContext is the context size the last model call reported.
	lastContext int64

	ctx        context.Context
	cancel     context.CancelFunc
	modelCalls int
	usage      llm.Usage
	// pendingUsage is the usage reported by the model call being streamed.
	pendingUsage llm.Usage
	streaming    bool
	gen          int
	ended        bool

	// State of the model call being streamed.
	text    strings.Builder
	asm     llm.Assembler
	pending []*pendingCall
	stop    llm.StopReason

	// Tool phase.
	toolPIDs  map[string]int // tool actor id -> call index
	remaining int
}

func newTurn(deps *Deps, o turnOptions) *turn {
	if o.tools == nil {
		o.tools = deps.Tools
	}
	return &turn{
		deps:        deps,
		sessionID:   o.sessionID,
		cwd:         o.cwd,
		model:       o.model,
		tools:       o.tools,
		log:         deps.Log.With().Str("session", o.sessionID).Logger(),
		messages:    o.history,
		compactOnly: o.compactOnly,
		session:     o.session,
		subagent:    o.subagent,
		maxCalls:    o.maxCalls,
	}
}

func (t *turn) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		t.deps.Metrics.RunningTurns.Add(1)
		t.ctx, t.cancel = context.WithCancel(context.Background())
		if t.compactOnly {
			if !t.startCompaction(ctx, 1) {
				t.emit(ctx, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateAgentMessageChunk, Content: protocol.Text("Nothing to compact yet.")})
				t.finish(ctx, protocol.StopEndTurn, nil)
			}
			return
		}
		t.callModel(ctx)
	case *streamEvent:
		if m.gen == t.gen && !t.ended {
			t.onEvent(ctx, &m.ev)
		}
	case *streamEnd:
		if m.gen == t.gen && !t.ended {
			t.onStreamEnd(ctx, m.err)
		}
	case *goroutinePanic:
		panic(m.p)
	case *cancelTurn:
		t.finish(ctx, protocol.StopCancelled, nil)
	case *toolDone:
		t.onToolDone(ctx, m)
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
	}
}

// emit sends a session/update for this session through the session actor,
// which keeps it ordered with everything else the session says.
func (t *turn) emit(ctx actor.Context, update any) {
	data := protocol.EncodeNotification(protocol.MethodSessionUpdate,
		protocol.SessionNotification{SessionID: t.sessionID, Update: update})
	ctx.Send(ctx.Parent(), &outbound{frame: Frame{Data: data, SessionID: t.sessionID}})
}

// emitRaw sends an already encoded session/update.
func (t *turn) emitRaw(ctx actor.Context, data []byte) {
	ctx.Send(ctx.Parent(), &outbound{frame: Frame{Data: data, SessionID: t.sessionID}})
}

func (t *turn) systemPrompt() string {
	prompt := "You are iac-code, an AI coding agent working for a developer through their editor.\n" +
		"Working directory: " + t.cwd + "\n" +
		"Use the tools to inspect and change files; paths are relative to the working directory unless absolute."
	if t.subagent != "" {
		prompt += "\nYou are a " + t.subagent + " sub-agent: do the task you were given with the tools you have, " +
			"then answer with a complete, self-contained report; nobody sees your intermediate text."
	}
	return prompt
}

func (t *turn) callModel(ctx actor.Context) {
	limit := t.deps.Config.MaxTurnRequests
	if t.maxCalls > 0 {
		limit = t.maxCalls
	}
	if t.modelCalls >= limit {
		t.finish(ctx, protocol.StopMaxTurnRequests, nil)
		return
	}
	if t.needsCompaction() && t.startCompaction(ctx, 3) {
		return
	}
	t.stream(ctx, &llm.Request{
		Model:     t.model,
		System:    t.systemPrompt(),
		Messages:  t.messages,
		Tools:     toolSpecs(t.tools),
		MaxTokens: t.deps.llmConfig().MaxTokens,
	})
}

// stream starts one model call in a goroutine that feeds the actor.
func (t *turn) stream(ctx actor.Context, req *llm.Request) {
	t.modelCalls++
	t.streaming = true
	t.gen++
	t.text.Reset()
	t.asm = llm.Assembler{}
	t.pending = nil
	t.stop = ""

	gen, self, root, provider, runCtx := t.gen, ctx.Self(), ctx.ActorSystem().Root, t.deps.Provider, t.ctx
	go func() {
		defer func() {
			if r := recover(); r != nil {
				root.Send(self, &goroutinePanic{p: recovered(r)})
			}
		}()
		err := provider.Stream(runCtx, req, func(ev llm.Event) {
			root.Send(self, &streamEvent{gen: gen, ev: ev})
		})
		root.Send(self, &streamEnd{gen: gen, err: err})
	}()
}

func toolSpecs(r *tools.Registry) []llm.ToolSpec {
	list := r.List()
	specs := make([]llm.ToolSpec, len(list))
	for i, tl := range list {
		specs[i] = llm.ToolSpec{Name: tl.Name(), Description: tl.Description(), InputSchema: tl.Schema()}
	}
	return specs
}

func (t *turn) onEvent(ctx actor.Context, ev *llm.Event) {
	// The assembler keeps every block in stream order (several signed
	// thinking blocks, redacted thinking, tool calls) for the next call.
	t.asm.Add(*ev)
	switch ev.Type {
	case llm.EventTextDelta:
		if ev.Text == "" {
			return
		}
		t.text.WriteString(ev.Text)
		if t.compacting || t.subagent != "" {
			return // summaries and sub-agent text are not streamed
		}
		t.emitRaw(ctx, protocol.EncodeChunkNotification(t.sessionID, protocol.UpdateAgentMessageChunk, ev.Text))
	case llm.EventThinkingDelta:
		if ev.Text == "" || t.compacting || t.subagent != "" {
			return
		}
		t.emitRaw(ctx, protocol.EncodeChunkNotification(t.sessionID, protocol.UpdateAgentThoughtChunk, ev.Text))
	case llm.EventUsage:
		t.pendingUsage = ev.Usage
	case llm.EventStop:
		t.stop = ev.StopReason
	}
}

// assistantMessage is the message the model produced so far (all of it, or
// what the user saw of a cancelled or failed answer).
func (t *turn) assistantMessage() llm.Message { return t.asm.Message() }

func (t *turn) record(ctx actor.Context, msg llm.Message) {
	if len(msg.Content) == 0 {
		return
	}
	t.messages = append(t.messages, msg)
	ctx.Send(ctx.Parent(), &messageDone{msg: msg})
}

func (t *turn) onStreamEnd(ctx actor.Context, err error) {
	t.streaming = false
	callUsage := t.pendingUsage
	t.usage = t.usage.Add(callUsage)
	t.pendingUsage = llm.Usage{}
	if t.compacting {
		t.endCompaction(ctx, err)
		return
	}
	if err == nil && t.subagent == "" {
		t.lastContext = callUsage.InputTokens + callUsage.OutputTokens
		t.emit(ctx, protocol.UsageUpdate{SessionUpdate: protocol.UpdateUsage,
			Used: callUsage.InputTokens + callUsage.OutputTokens, Size: int64(t.deps.contextWindow(t.model))})
	}
	if err != nil {
		t.record(ctx, t.assistantMessage())
		if errors.Is(err, context.Canceled) {
			t.finish(ctx, protocol.StopCancelled, nil)
			return
		}
		t.failModel(ctx, err)
		return
	}
	msg := t.assistantMessage()
	// Each call is decoded and resolved once, here: what the client is
	// shown and asked about is what runs.
	var calls []toolCall
	env := &tools.Env{Cwd: t.cwd, Home: t.deps.Config.Home}
	for i := range msg.Content {
		if b := &msg.Content[i]; b.Type == llm.BlockToolUse {
			c := prepareCall(len(calls), b.ToolCallID, b.Name, b.Input, t.tools, env)
			b.Display = protocol.MustMarshal(c.startUpdate())
			calls = append(calls, c)
		}
	}
	t.record(ctx, msg)
	switch {
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

// runTools starts one tool actor per call; they run concurrently and their
// results go back to the model in the original order.
func (t *turn) runTools(ctx actor.Context, msg llm.Message, calls []toolCall) {
	t.pending = t.pending[:0]
	t.toolPIDs = map[string]int{}
	session := t.session
	if session == nil {
		session = ctx.Parent()
	}
	for _, b := range msg.Content {
		if b.Type != llm.BlockToolUse {
			continue
		}
		call := calls[len(t.pending)]
		t.pending = append(t.pending, &pendingCall{id: b.ToolCallID, name: b.Name})
		t.emit(ctx, b.Display)
		props := actor.PropsFromProducer(func() actor.Actor {
			return newToolActor(t.deps, t.sessionID, t.cwd, t.model, session, call, t.ctx)
		}, actor.WithReceiverMiddleware(keepStack))
		pid := ctx.Spawn(props)
		t.toolPIDs[pid.Id] = call.index
	}
	t.remaining = len(t.pending)
}

func (t *turn) onToolDone(ctx actor.Context, m *toolDone) {
	if t.ended || m.index >= len(t.pending) || t.pending[m.index].done {
		return
	}
	if m.cancelled {
		t.finish(ctx, protocol.StopCancelled, nil)
		return
	}
	c := t.pending[m.index]
	c.done, c.res, c.display = true, m.result, m.display
	t.usage = t.usage.Add(m.usage)
	t.remaining--
	if t.remaining > 0 {
		return
	}
	results := llm.Message{Role: llm.RoleTool}
	for _, c := range t.pending {
		results.Content = append(results.Content, llm.Block{Type: llm.BlockToolResult, ToolCallID: c.id,
			Name: c.name, Text: c.res.Output, IsError: c.res.IsError, Display: c.display})
	}
	t.record(ctx, results)
	t.callModel(ctx)
}

// finish reports the end of the turn to the session and stops the actor.
// Tool calls still running are cancelled with it (children stop first).
func (t *turn) finish(ctx actor.Context, stopReason string, err *protocol.Error) {
	if t.ended {
		return
	}
	t.ended = true
	if t.cancel != nil {
		t.cancel()
	}
	if t.streaming && !t.compacting {
		// Keep what the user already saw of a cancelled answer (a summary
		// being written is not an answer and is never shown).
		t.record(ctx, t.assistantMessage())
	}
	ctx.Send(ctx.Parent(), &turnFinished{stopReason: stopReason, usage: t.usage, err: err})
	ctx.Stop(ctx.Self())
}
