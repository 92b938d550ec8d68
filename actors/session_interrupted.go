package actors

import (
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// A turn whose process died (kill -9, OOM) cannot go on with the file
// store (one process; the cluster's pods resume such turns instead), but
// it is not lost silently: the process that takes the session next finds
// the turn left recorded (store.TurnKeeper.PriorTurn) and records it as
// interrupted — a history entry the model reads at the next prompt (after
// the results store.RepairSession gave the calls cut short), and the
// session's meta, which session/load, session/resume and session/list
// show as _meta.activeTurn {state: "interrupted"} until the next turn
// starts — then clears the recorded turn. Recording is idempotent: a
// process killed after the entry but before the clearing leaves the turn,
// and the next one finds the entry after the last prompt
// (store.LastPromptInterrupted).

// recordInterrupted records the turn left in the session, if any. The
// history is repaired already (openWith, reacquired). Only a store whose
// hold is a lock of this machine (store.TurnMarker: the file store) has
// no pod to resume the turn; its turns are never paused (Pause is the
// drain of a pod).
func (s *session) recordInterrupted() {
	keeper, ok := s.store.(store.TurnKeeper)
	if _, local := s.store.(store.TurnMarker); !ok || !local || s.lease.fenced != nil {
		return
	}
	prior := keeper.PriorTurn()
	if prior == nil {
		return
	}
	turn := prior.Interrupted()
	if !store.LastPromptInterrupted(s.entries) {
		s.append(store.InterruptedEntry(turn, interruptedNote(s.entries, turn)))
		s.syncStore()
		s.deps.Metrics.TurnsInterrupted.Add(1)
	}
	s.meta.InterruptedTurn = turn
	if err := s.store.SaveMeta(s.meta); err != nil { // keep the turn for the next holder
		s.writeFailed(err, "save session metadata")
		return
	}
	s.meta, s.metaDirty = s.store.Meta(), false
	if err := keeper.RecordTurn(nil); err != nil {
		s.writeFailed(err, "clear the interrupted turn")
		return
	}
	s.log.Warn().Time("turn_started", turn.StartedAt).RawJSON("prompt_request", orNull(turn.PromptRequest)).
		Msg("turn interrupted: its process stopped while it ran; recorded in the history")
}

// noticeInterrupted tells a client that shows notices, after its load or
// resume answer, that the session's last turn was interrupted (the answer's
// _meta.activeTurn says so to every client).
func (s *session) noticeInterrupted(ctx actor.Context, conn *actor.PID) {
	t := s.meta.InterruptedTurn
	if t == nil {
		return
	}
	if c := s.clients.find(conn); c == nil || !c.notices {
		return
	}
	when := ""
	if !t.StartedAt.IsZero() {
		when = " (started " + t.StartedAt.UTC().Format(time.RFC3339) + ")"
	}
	s.emitTo(ctx, conn, protocol.NoticeUpdate{SessionUpdate: protocol.UpdateNotice, Severity: "warning",
		Title:       "The last turn was interrupted",
		Description: "The agent process stopped while the last turn" + when + " ran. Its completed steps are kept; a tool call it cut may have had part of its effects and was not run again. Prompt again to continue."})
}

// clearInterrupted: a turn starts, so the interrupted one is no longer the
// session's last (one metadata write, the first turn after it only).
func (s *session) clearInterrupted() {
	if s.meta.InterruptedTurn == nil {
		return
	}
	s.meta.InterruptedTurn = nil
	s.changeMeta()
}

func orNull(raw []byte) []byte {
	if len(raw) == 0 {
		return []byte("null")
	}
	return raw
}

// interruptedNote is what the model is told about the interrupted turn:
// the steps after its prompt that completed, and the tool calls cut
// midway, which may have had part of their effects and were not run again.
func interruptedNote(entries []store.Entry, turn *store.InterruptedTurn) string {
	var done, cut []string
	results := map[string]llm.Block{}
	start := 0
	for i := len(entries) - 1; i >= 0; i-- {
		if e := &entries[i]; e.Kind == store.KindMessage && e.Message.Role == llm.RoleUser {
			start = i + 1
			break
		}
	}
	for i := start; i < len(entries); i++ {
		for _, b := range entries[i].Message.Content {
			if b.Type == llm.BlockToolResult {
				results[b.ToolCallID] = b
			}
		}
	}
	for i := start; i < len(entries); i++ {
		if entries[i].Message.Role != llm.RoleAssistant {
			continue
		}
		for _, b := range entries[i].Message.Content {
			if b.Type != llm.BlockToolUse {
				continue
			}
			name := fmt.Sprintf("%s (%s)", b.Name, b.ToolCallID)
			if r, ok := results[b.ToolCallID]; ok && r.Text != store.InterruptedText && r.Text != store.ToolCutText {
				done = append(done, name)
			} else {
				cut = append(cut, name)
			}
		}
	}
	var sb strings.Builder
	sb.WriteString("[The previous turn was interrupted: the agent process stopped (killed or crashed) while it ran")
	if !turn.StartedAt.IsZero() {
		sb.WriteString(", in the turn started at " + turn.StartedAt.UTC().Format(time.RFC3339))
	}
	sb.WriteString(". Nothing after the last recorded step ran.")
	if len(done) > 0 {
		sb.WriteString(" Tool calls that completed: " + strings.Join(done, ", ") + ".")
	}
	if len(cut) > 0 {
		sb.WriteString(" Tool calls cut midway or never finished: " + strings.Join(cut, ", ") +
			"; they may have had part of their effects (check before relying on or repeating them) and were not run again.")
	}
	if len(done) == 0 && len(cut) == 0 {
		sb.WriteString(" No step of it had completed.")
	}
	sb.WriteString(" The user may ask to continue.]")
	return sb.String()
}
