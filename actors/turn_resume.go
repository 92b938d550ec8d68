package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
)

// A turn resumed from the history another process left (durable turns,
// issue 29; the session decides the step with store.NextStep, see
// session_resume.go) starts where that process stopped: the model is asked
// (the prompt, or all results are in, or its reply was cut before it was
// recorded), or the calls of its last reply go on — a call whose result is
// recorded is never run again (its result is reused), a call started
// without a result is reported to the model as cut (store.ToolCutText:
// never run again, its side effects may be half done), a call never
// started runs (its permission asked as for any call).

// resumeGate is a resumed turn's wait before its first step: for its
// context (contextReady) and, when it holds for them, for the session's
// MCP servers (resumeGo, session_adopt_mcp.go).
type resumeGate struct {
	step                   *store.Step
	awaitContext, awaitMCP bool
}

// newResumeGate is the gate of a turn resumed from step (nil: a turn not
// resumed has none); mcpHold: it waits for resumeGo too.
func newResumeGate(step *store.Step, mcpHold bool) *resumeGate {
	if step == nil {
		return nil
	}
	return &resumeGate{step: step, awaitContext: true, awaitMCP: mcpHold}
}

// resumeStep takes the turn on from t.resume's step, its context gathered.
func (t *turn) resumeStep(ctx actor.Context) {
	step := t.resume.step
	t.resume = nil
	if step.Call == nil {
		t.callModel(ctx)
		return
	}
	// The history ends with the reply whose calls go on, then the results
	// recorded for them, folded into one tool message (store.Context).
	recorded := map[string]llm.Block{}
	if n := len(t.messages); n > 0 && t.messages[n-1].Role == llm.RoleTool {
		for _, b := range t.messages[n-1].Content {
			if b.Type == llm.BlockToolResult {
				recorded[b.ToolCallID] = b
			}
		}
		t.messages = t.messages[:n-1]
	}
	t.tools = t.currentTools()
	env := &tools.Env{Cwd: t.cwd, Home: t.deps.Config.Home, AdditionalDirs: t.dirs, Jail: t.jail}
	t.pending = t.pending[:0]
	var calls []toolCall
	for _, b := range step.Call.Content {
		if b.Type != llm.BlockToolUse {
			continue
		}
		// Not announced again: the holder that recorded the step did (a
		// load's replay shows it from the history too).
		c := &pendingCall{id: b.ToolCallID, name: b.Name}
		index := len(t.pending)
		t.pending = append(t.pending, c)
		if r, ok := recorded[b.ToolCallID]; ok {
			c.done, c.kept = true, &r
			continue
		}
		if step.Started[b.ToolCallID] {
			t.cut(ctx, c)
			continue
		}
		calls = append(calls, prepareCall(index, b.ToolCallID, b.Name, b.Input, t.tools, env))
	}
	if len(calls) == 0 {
		if t.unrecorded == 0 {
			t.stepDone(ctx)
		}
		return // stepDone once the cut results are recorded
	}
	t.spawnTools(ctx, calls)
}

// cut gives call c, started by another process that stopped before its
// result, the result store.ToolCutText: recorded, shown to the clients as
// failed.
func (t *turn) cut(ctx actor.Context, c *pendingCall) {
	text := protocol.Text(store.ToolCutText)
	u := protocol.ToolCallUpdate{SessionUpdate: protocol.UpdateToolCallUpdate, ToolCallID: c.id, Status: protocol.ToolFailed,
		Content: []protocol.ToolCallContent{{Type: "content", Content: &text}}}
	c.display = protocol.RawMessage(protocol.MustMarshal(u))
	t.emit(ctx, c.display)
	c.done, c.res = true, tools.Result{Output: store.ToolCutText, IsError: true}
	t.recordResult(ctx, c)
}
