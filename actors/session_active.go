package actors

import (
	"bytes"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// The running turn as a client that comes in during it sees it (issue 22):
// session/load and session/resume answers and session/list entries carry
// _meta.activeTurn = {startedAt, promptRequest} while a turn runs; when it
// ends, every attached client gets a session_info_update with
// _meta.activeTurn null; a load replays, after the history, what the turn
// sent since its last completed message (the message so far), then the rest
// comes live, so the loader sees the whole answer exactly once.

// activeTurnKey is the _meta key of the running turn.
const activeTurnKey = "activeTurn"

// ActiveTurn is the running turn of a session as _meta.activeTurn says it:
// when it started (RFC 3339) and the JSON-RPC id of its session/prompt
// request exactly as its client sent it.
type ActiveTurn struct {
	// State is "running", or "interrupted": the process running the turn
	// stopped (killed, crashed) before it ended; shown until the next turn
	// starts (see interruptedTurn).
	State         string              `json:"state"`
	StartedAt     string              `json:"startedAt,omitempty"`
	PromptRequest protocol.RawMessage `json:"promptRequest,omitempty"`
	// started is StartedAt as a time, for the store (markTurn); conn,
	// firstSeq and id are what a holder resuming the turn needs
	// (store.RunningTurn).
	started  time.Time
	conn     string
	firstSeq int64
	id       string
}

// record is the turn as the session's store records it for the lists of
// other processes and for the next holder (store.TurnRecorder).
func (t *ActiveTurn) record() *store.RunningTurn {
	return &store.RunningTurn{StartedAt: t.started, PromptRequest: t.PromptRequest, Conn: t.conn, FirstSeq: t.firstSeq, ID: t.id}
}

// activeTurns are this process's sessions with a running turn (session id
// → *ActiveTurn), for session/list: the list is read from the store in a
// goroutine and asks no session actor. The turns of sessions another
// process holds come from the store (store.Meta.RunningTurn, see of).
type activeTurns struct{ m sync.Map }

// of is the running turn session/list shows for meta: this process's own,
// else the one the session's holder recorded in the store — another
// process, or a pod of the cluster; the store reports it only while that
// holder's hold is live.
func (a *activeTurns) of(meta store.Meta) *ActiveTurn {
	if t := a.get(meta.ID); t != nil {
		return t
	}
	if rt := meta.RunningTurn; rt != nil {
		return &ActiveTurn{State: turnRunningState, StartedAt: rt.StartedAt.UTC().Format(time.RFC3339Nano), PromptRequest: protocol.RawMessage(rt.PromptRequest)}
	}
	return interruptedActive(meta.InterruptedTurn)
}

// States of ActiveTurn.
const (
	turnRunningState     = "running"
	turnInterruptedState = "interrupted"
)

// interruptedActive is _meta.activeTurn of an interrupted turn (nil: none).
func interruptedActive(t *store.InterruptedTurn) *ActiveTurn {
	if t == nil {
		return nil
	}
	a := &ActiveTurn{State: turnInterruptedState, PromptRequest: t.PromptRequest}
	if !t.StartedAt.IsZero() {
		a.StartedAt = t.StartedAt.UTC().Format(time.RFC3339Nano)
	}
	return a
}

func (a *activeTurns) get(id string) *ActiveTurn {
	if a == nil {
		return nil
	}
	if v, ok := a.m.Load(id); ok {
		return v.(*ActiveTurn)
	}
	return nil
}

// Bounds of the message so far: past them the rest of that message is not
// kept (a load meanwhile misses it in its replay; the log says so). A
// message is one model answer or one round of tool results; these bounds
// are far above what one holds.
const (
	maxSoFarFrames = 10000
	maxSoFarBytes  = 16 << 20
)

// turnSoFar is what the running turn sent to its clients since its last
// completed message was recorded, in order: the frames as they were sent,
// except the chunks of the model's answer, whose text the model call keeps
// anyway (its assembler): of those only how far the clients got is noted,
// per chunk a pointer and a number. A session nobody loads during the turn
// pays nothing more per chunk.
type turnSoFar struct {
	active  *ActiveTurn
	entries []soFarEntry
	bytes   int // of the frames kept
	// call and callShown: the model call of the last chunk and how far its
	// shown text went then (a frame between two of its chunks starts a new
	// entry from there).
	call      *modelCall
	callShown int
	// full: a frame was not kept (the bounds).
	full bool
	// recordedCalls are the tool calls of the turn's recorded messages: the
	// history replays their tool_call, so the one their tool actor sends
	// once it starts (after the record) is not kept again.
	recordedCalls map[string]bool
}

// soFarEntry is a frame as sent, or (call set) the shown text of call
// from byte from to byte to.
type soFarEntry struct {
	frame    []byte
	call     *modelCall
	from, to int
}

// beginTurn notes the turn of prompt request id starting now. The time is
// cut to microseconds, as the shared store keeps it, so that every pod
// shows the same startedAt.
// conn is the id of the connection the prompt's client is on
// (sessionWho.client: through a stub, the stub's), firstSeq the seq of the
// turn's first history entry.
func (s *session) beginTurn(id protocol.RawMessage, conn string, firstSeq int64) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	s.turn.soFar = turnSoFar{active: &ActiveTurn{State: turnRunningState, StartedAt: now.Format(time.RFC3339Nano),
		PromptRequest: id, started: now, conn: conn, firstSeq: firstSeq, id: uuid.NewString()}}
	s.deps.active.m.Store(s.id, s.turn.soFar.active)
}

// keepSoFar keeps what a frame the running turn sends its clients shows.
func (s *session) keepSoFar(m *outbound) {
	if !s.turn.running() || s.turn.soFar.active == nil {
		return
	}
	sf := &s.turn.soFar
	if m.call != nil {
		from := 0
		if sf.call == m.call {
			from = sf.callShown
		}
		sf.call, sf.callShown = m.call, m.shown
		if n := len(sf.entries); n > 0 && sf.entries[n-1].call == m.call {
			sf.entries[n-1].to = m.shown
			return
		}
		sf.entries = append(sf.entries, soFarEntry{call: m.call, from: from, to: m.shown})
		return
	}
	f := m.frame.Data
	if id, ok := toolCallAnnounced(f); ok && s.turn.soFar.recordedCalls[id] {
		return
	}
	if len(s.turn.soFar.entries) >= maxSoFarFrames || s.turn.soFar.bytes+len(f) > maxSoFarBytes {
		if !s.turn.soFar.full {
			s.log.Warn().Msg("running message too large to keep for a load: a load meanwhile misses part of it")
		}
		s.turn.soFar.full = true
		return
	}
	s.turn.soFar.entries = append(s.turn.soFar.entries, soFarEntry{frame: f})
	s.turn.soFar.bytes += len(f)
}

// messageRecorded: the message so far is msg, in the history now.
func (s *session) messageRecorded(msg *llm.Message) {
	sf := &s.turn.soFar
	sf.entries, sf.bytes, sf.full, sf.call, sf.callShown = nil, 0, false, nil, 0
	if s.turn.soFar.active == nil {
		return
	}
	for i := range msg.Content {
		if b := &msg.Content[i]; b.Type == llm.BlockToolUse {
			if s.turn.soFar.recordedCalls == nil {
				s.turn.soFar.recordedCalls = map[string]bool{}
			}
			s.turn.soFar.recordedCalls[b.ToolCallID] = true
		}
	}
}

// toolResultRecorded: the result of tool call id is in the history now,
// whose replay shows it: its frames so far are not kept for a load.
func (s *session) toolResultRecorded(id string) {
	if len(s.turn.soFar.entries) == 0 {
		return
	}
	mark := []byte(`"toolCallId":` + string(protocol.MustMarshal(id)))
	kept := s.turn.soFar.entries[:0]
	size := 0
	for _, e := range s.turn.soFar.entries {
		if e.call != nil || !bytes.Contains(e.frame, mark) {
			kept = append(kept, e)
			size += len(e.frame)
		}
	}
	clear(s.turn.soFar.entries[len(kept):])
	s.turn.soFar.entries, s.turn.soFar.bytes = kept, size
}

// toolCallAnnounced is the toolCallId of a `tool_call` update frame.
func toolCallAnnounced(f []byte) (string, bool) {
	if !bytes.Contains(f, []byte(`"sessionUpdate":"tool_call"`)) {
		return "", false
	}
	var n struct {
		Params struct {
			Update protocol.ToolCallUpdate `json:"update"`
		} `json:"params"`
	}
	if protocol.Unmarshal(f, &n) != nil || n.Params.Update.SessionUpdate != protocol.UpdateToolCall {
		return "", false
	}
	return n.Params.Update.ToolCallID, true
}

// finishTurn forgets the running turn and tells every attached client that
// it is over.
func (s *session) finishTurn(ctx actor.Context) {
	if s.turn.soFar.active == nil {
		return
	}
	s.deps.active.m.CompareAndDelete(s.id, s.turn.soFar.active)
	s.turn.soFar = turnSoFar{}
	s.emit(ctx, protocol.SessionInfoUpdate{SessionUpdate: protocol.UpdateSessionInfo, Meta: map[string]any{activeTurnKey: nil}})
}

// forgetTurn drops the registry entry when the actor stops.
func (s *session) forgetTurn() {
	if s.turn.soFar.active != nil {
		s.deps.active.m.CompareAndDelete(s.id, s.turn.soFar.active)
	}
}

// replaySoFar sends conn the running turn's message so far (after the
// history of a load).
func (s *session) replaySoFar(ctx actor.Context, conn *actor.PID) {
	for _, e := range s.turn.soFar.entries {
		if e.call == nil {
			ctx.Send(conn, &outbound{frame: Frame{Data: e.frame, SessionID: s.id}})
			continue
		}
		for _, f := range e.call.shownFrames(e.from, e.to) {
			ctx.Send(conn, &outbound{frame: Frame{Data: f, SessionID: s.id}})
		}
	}
}

// withActiveTurn adds _meta.activeTurn to meta while a turn runs, or
// the interrupted one until the next turn starts.
func (s *session) withActiveTurn(meta map[string]any) map[string]any {
	active := s.turn.soFar.active
	if !s.turn.running() || active == nil {
		if active = interruptedActive(s.meta.InterruptedTurn); active == nil {
			return meta
		}
	}
	if meta == nil {
		meta = map[string]any{}
	}
	meta[activeTurnKey] = active
	return meta
}
