package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools"
)

// The turn's tool step: the calls of a model reply run as tool actors, their
// results recorded as each ends, and the model asked again once all are.

// pendingCall is a tool call being streamed or run.
type pendingCall struct {
	id   string
	name string
	done bool
	res  tools.Result
	// display: the tool_call update the client is shown when it starts,
	// then its final update, kept for replay.
	display protocol.RawMessage
	// kept: the result another process recorded (a resumed turn).
	kept *llm.Block
}

// result is the call's tool_result block, once done.
func (c *pendingCall) result() llm.Block {
	if c.kept != nil {
		return *c.kept
	}
	return llm.Block{Type: llm.BlockToolResult, ToolCallID: c.id, Name: c.name, Text: c.res.Output, IsError: c.res.IsError,
		Display: c.display}
}

// runTools starts one tool actor per call; they run concurrently and their
// results go back to the model in the original order.
func (t *turn) runTools(ctx actor.Context, msg llm.Message, calls []toolCall) {
	t.pending = t.pending[:0]
	for _, b := range msg.Content {
		if b.Type == llm.BlockToolUse {
			t.pending = append(t.pending, &pendingCall{id: b.ToolCallID, name: b.Name, display: b.Display})
		}
	}
	t.spawnTools(ctx, calls)
}

// spawnTools runs calls, some of the step's (t.pending, by index). A
// session's turn has each call's start recorded before it runs (durable
// turns: a turn resumed elsewhere never runs again a call that may have
// run; the tool actor asks, see toolActor.begin).
func (t *turn) spawnTools(ctx actor.Context, calls []toolCall) {
	t.toolPIDs = map[string]int{}
	t.toolActs = append(t.toolActs[:0], make([]*actor.PID, len(t.pending))...)
	session := t.session
	if session == nil {
		session = ctx.Parent()
	}
	record := t.subagent == ""
	for _, call := range calls {
		c := t.pending[call.index]
		if c.display != nil {
			t.emit(ctx, c.display)
			c.display = nil
		}
		props := actor.PropsFromProducer(func() actor.Actor {
			a := newToolActor(t.deps, t.sessionID, t.cwd, t.model, session, call, t.ctx, t.turnID, t.mcp)
			a.inherit, a.record = t.inherited(), record
			return a
		}, actor.WithReceiverMiddleware(keepStack))
		pid := ctx.Spawn(props)
		t.toolPIDs[pid.Id] = call.index
		t.toolActs[call.index] = pid
	}
	t.remaining = len(calls)
}

func (t *turn) onToolDone(ctx actor.Context, m *toolDone) {
	if m.index >= len(t.pending) || t.pending[m.index].done {
		return
	}
	if t.ended {
		t.toolStopped(ctx, m.index)
		return
	}
	c := t.pending[m.index]
	if m.cancelled {
		c.done = true // it stopped itself
		t.finish(ctx, protocol.StopCancelled, nil)
		return
	}
	c.done, c.res, c.display = true, m.result, m.display
	t.usage = t.usage.Add(m.usage)
	t.remaining--
	if t.subagent == "" {
		// Recorded as it ends, not with the step's other calls: a turn
		// resumed elsewhere reuses it.
		t.recordResult(ctx, c)
	}
	if t.remaining > 0 || t.unrecorded > 0 {
		return
	}
	t.stepDone(ctx)
}

// recordResult has the session record the result of call c: the model is
// asked again only once every result of the step is recorded (a holder
// that lost the session to another process asks it nothing more).
func (t *turn) recordResult(ctx actor.Context, c *pendingCall) {
	t.unrecorded++
	ctx.Request(ctx.Parent(), &toolResultDone{result: c.result()})
}

// resultRecorded: the session recorded a result of the step.
func (t *turn) resultRecorded(ctx actor.Context) {
	t.unrecorded--
	if !t.ended && t.remaining == 0 && t.unrecorded == 0 && len(t.pending) > 0 {
		t.stepDone(ctx)
	}
}

// stepDone: every call of the step has its result; the model is asked
// again.
func (t *turn) stepDone(ctx actor.Context) {
	results := llm.Message{Role: llm.RoleTool}
	for _, c := range t.pending {
		results.Content = append(results.Content, c.result())
	}
	if t.subagent == "" {
		t.messages = append(t.messages, results) // the session has them, call by call
	} else {
		t.record(ctx, results)
	}
	t.callModel(ctx)
}
