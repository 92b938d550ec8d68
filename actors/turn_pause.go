package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
)

// A turn pauses at its next step boundary (durable turns, issue 29): the
// model reply being streamed ends and is recorded (its calls are not
// started), or the tools running end and their results are recorded; then
// the turn reports turnPaused instead of its end, and the session lets go
// of the session keeping the turn recorded, for another process to resume
// it from the history (session_pause.go). A tool still waiting for its
// permission has not started: it is let go of (toolHeld), and the next
// holder runs it, asking again. At the pause's deadline (cut) the turn
// stops where it is: a model reply cut midway is not recorded (asked again
// by the next holder), a tool cut midway keeps its start without a result
// (reported to the model as cut, never run again).

type (
	// pauseTurn asks the turn to pause at its next step boundary, or, cut,
	// now.
	pauseTurn struct{ cut bool }
	// turnPaused: the turn paused; the session keeps it recorded and lets
	// go. usage is what it spent here.
	turnPaused struct{ usage llm.Usage }
	// pauseTool asks a tool actor of a pausing turn that has not started
	// to run (its permission undecided) to let go (toolHeld); one that has
	// runs to its end.
	pauseTool struct{}
	// toolHeld: the call at index never started and never will here.
	toolHeld struct{ index int }
)

func (*pauseTurn) IgnoreDeadLetterLogging()  {}
func (*turnPaused) IgnoreDeadLetterLogging() {}
func (*pauseTool) IgnoreDeadLetterLogging()  {}
func (*toolHeld) IgnoreDeadLetterLogging()   {}

// askPause: the session asks the turn to pause (cut: now).
func (t *turn) askPause(ctx actor.Context, cut bool) {
	if t.ended {
		return
	}
	if cut {
		t.pauseNow(ctx)
		return
	}
	t.pausing = true
	switch {
	case t.streaming:
		// onStreamEnd records the reply and pauses before its calls.
	case t.remaining > 0:
		for i, c := range t.pending {
			if !c.done && t.toolActs[i] != nil {
				ctx.Send(t.toolActs[i], &pauseTool{})
			}
		}
	default:
		// Between steps (the context being gathered, the budget checked):
		// nothing is under way.
		t.pauseNow(ctx)
	}
}

// onToolHeld: a call of the pausing turn let go before it started.
func (t *turn) onToolHeld(ctx actor.Context, index int) {
	if index >= len(t.pending) || t.pending[index].done {
		return
	}
	t.pending[index].done = true
	if t.ended {
		t.toolStopped(ctx, index)
		return
	}
	t.remaining--
	if t.remaining == 0 {
		t.pauseNow(ctx)
	}
}

// pauseNow ends the turn as paused: a model reply still streaming (a cut)
// is dropped, tools still running (a cut) are stopped, and the session is
// told once they have.
func (t *turn) pauseNow(ctx actor.Context) {
	if t.ended {
		return
	}
	t.end(ctx, false)
	t.report = &turnPaused{usage: t.usage}
	t.endSpans("paused", nil)
	t.stopTools(ctx)
}
