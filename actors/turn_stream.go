package actors

import (
	"context"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

// maxQueuedEvents bounds the provider events waiting for the turn actor.
// When the turn falls behind, the model call's reader waits, so the model's
// stream waits in its socket (TCP backpressure) instead of in memory.
const maxQueuedEvents = 1024

// maxMergedChunk bounds the text of one chunk notification made of several
// waiting deltas (see turn.onEvents).
const maxMergedChunk = 64 << 10

// eventQueue hands one model call's events from its reader goroutine to
// the turn actor in batches. The reader appends under a lock and sends the
// actor a streamBatch only when none is pending, so the events decoded from
// one socket read (or arriving while the actor is busy) cost one actor
// message and no allocation each.
type eventQueue struct {
	gen   int
	msg   *streamBatch // the one wake-up message of this queue
	mu    sync.Mutex
	evs   []llm.Event
	spare []llm.Event
	woken bool          // msg is in the mailbox, not yet taken
	taken chan struct{} // a batch was taken (room for a waiting reader)
}

// streamBatch tells the turn that events wait in q.
type streamBatch struct{ q *eventQueue }

func (*streamBatch) IgnoreDeadLetterLogging() {}

func newEventQueue(gen int) *eventQueue {
	q := &eventQueue{gen: gen, taken: make(chan struct{}, 1)}
	q.msg = &streamBatch{q: q}
	return q
}

// push appends ev, waking the actor with wake if no wake-up is pending. It
// waits while the queue is full; it drops ev when ctx ends meanwhile (the
// turn no longer wants it).
func (q *eventQueue) push(ctx context.Context, ev llm.Event, wake func(*streamBatch)) {
	q.mu.Lock()
	for len(q.evs) >= maxQueuedEvents {
		q.mu.Unlock()
		select {
		case <-q.taken:
		case <-ctx.Done():
			return
		}
		q.mu.Lock()
	}
	q.evs = append(q.evs, ev)
	notify := !q.woken
	q.woken = true
	q.mu.Unlock()
	if notify {
		wake(q.msg)
	}
}

// take returns the waiting events (the actor calls it for every
// streamBatch, and hands the slice back with recycle).
func (q *eventQueue) take() []llm.Event {
	q.mu.Lock()
	evs := q.evs
	q.evs, q.spare = q.spare[:0], nil
	q.woken = false
	q.mu.Unlock()
	select {
	case q.taken <- struct{}{}:
	default:
	}
	return evs
}

// recycle keeps evs' array for the next batch, without its strings.
func (q *eventQueue) recycle(evs []llm.Event) {
	clear(evs)
	q.mu.Lock()
	if q.spare == nil {
		q.spare = evs[:0]
	}
	q.mu.Unlock()
}

// onEvents handles a batch of events in order. Consecutive text deltas of
// one kind become one chunk notification: when the turn keeps up with the
// model every delta is its own chunk; when deltas wait (the client, the
// store or the machine are slower than the model), they are sent joined,
// so a backlog costs one message per batch instead of one per token.
func (t *turn) onEvents(ctx actor.Context, evs []llm.Event) {
	var chunk protocol.ChunkNotification
	kind := "" // of the chunk being built
	flush := func() {
		if kind != "" {
			t.emitRaw(ctx, chunk.Bytes())
			kind = ""
		}
	}
	for i := range evs {
		ev := &evs[i]
		// The assembler keeps every block in stream order (several signed
		// thinking blocks, redacted thinking, tool calls) for the next call.
		t.asm.Add(*ev)
		var k string
		switch ev.Type {
		case llm.EventTextDelta:
			k = protocol.UpdateAgentMessageChunk
		case llm.EventThinkingDelta:
			k = protocol.UpdateAgentThoughtChunk
		case llm.EventUsage:
			t.pendingUsage = ev.Usage
		case llm.EventStop:
			t.stop = ev.StopReason
		}
		if k == "" || ev.Text == "" || t.compacting || t.subagent != "" {
			continue // summaries and sub-agent text are not streamed
		}
		if kind != k || chunk.Len() > maxMergedChunk {
			flush()
			kind = k
			chunk = protocol.StartChunkNotification(t.sessionID, k, runLength(evs[i:], ev.Type))
		}
		chunk.Append(ev.Text)
	}
	flush()
}

// runLength is the text length of the deltas of type typ at the start of
// evs (what one merged chunk will hold, for sizing its buffer once).
func runLength(evs []llm.Event, typ llm.EventType) int {
	n := 0
	for i := range evs {
		if evs[i].Type != typ || n > maxMergedChunk {
			break
		}
		n += len(evs[i].Text)
	}
	return n
}
