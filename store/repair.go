package store

import (
	"slices"
	"time"

	"github.com/iac-code/iac-code/llm"
)

// InterruptedText is the result recorded for a tool call that never finished.
const InterruptedText = "Session interrupted before tool execution completed."

// ToolCutText is the result a resumed turn records for a tool call that had
// started (its KindToolStart is in the history) when the process running it
// stopped: it is never run again, since its side effects may be half done.
// (Repair, for a turn that ended here, cancelled or failed, gives every call
// without a result InterruptedText.)
const ToolCutText = "This tool call was cut off: the server running it stopped while it ran. " +
	"It was not run again, so its side effects may be partial (some done, some not). " +
	"Check the state it was changing before relying on it or retrying it."

func isMessage(e *Entry) bool { return e.Kind == KindMessage || e.Kind == "" }

// Repair gives every tool_use without a tool_result a synthetic error result
// (role tool, IsError, same ToolCallID and Name, text InterruptedText). The
// results of one assistant message form one tool message placed right after
// that assistant message and the tool messages already following it, so
// results always directly follow their calls and precede any later user or
// assistant message.
//
// repaired is the new history; added are the inserted entries (nil: nothing
// to do, repaired is entries). Seqs stay strictly increasing: an entry keeps
// its Seq unless an insertion before it forces a shift, and compaction UpTo
// values are moved along (covering results inserted right after the last
// replaced entry). entries is not modified.
//
// After a crash the open calls are always in the last turn, so the results
// land at the end and the repair is persisted by Append; a hole in the middle
// (only possible when a corrupt line was skipped) needs Session.Rewrite.
// RepairSession picks the right one.
func Repair(entries []Entry) (repaired, added []Entry) {
	repaired, added, _ = repair(entries)
	return repaired, added
}

// repair also reports whether all added entries are at the end.
func repair(entries []Entry) (repaired, added []Entry, atEnd bool) {
	answered := map[string]bool{}
	for i := range entries {
		for _, b := range entries[i].Message.Content {
			if b.Type == llm.BlockToolResult {
				answered[b.ToolCallID] = true
			}
		}
	}
	type insert struct {
		pos int // index in entries the result message goes before
		msg llm.Message
	}
	var inserts []insert
	for i := range entries {
		e := &entries[i]
		if !isMessage(e) || e.Message.Role != llm.RoleAssistant {
			continue
		}
		var missing []llm.Block
		for _, b := range e.Message.Content {
			if b.Type == llm.BlockToolUse && !answered[b.ToolCallID] {
				answered[b.ToolCallID] = true
				missing = append(missing, llm.Block{Type: llm.BlockToolResult, ToolCallID: b.ToolCallID,
					Name: b.Name, Text: InterruptedText, IsError: true})
			}
		}
		if len(missing) == 0 {
			continue
		}
		pos := i + 1
		for pos < len(entries) && (isMessage(&entries[pos]) && entries[pos].Message.Role == llm.RoleTool ||
			entries[pos].Kind == KindToolStart || entries[pos].Kind == KindToolResult) {
			pos++
		}
		inserts = append(inserts, insert{pos: pos, msg: llm.Message{Role: llm.RoleTool, Content: missing}})
	}
	if len(inserts) == 0 {
		return entries, nil, false
	}
	// Positions strictly increase: an assistant message is never inside the
	// tool run following an earlier one.
	now := time.Now().UTC()
	repaired = make([]Entry, 0, len(entries)+len(inserts))
	synthetic := make([]bool, 0, cap(repaired))
	oldSeq := make([]int64, 0, cap(repaired))
	var prev int64
	next := 0
	for i := 0; i <= len(entries); i++ {
		for next < len(inserts) && inserts[next].pos == i {
			prev++
			repaired = append(repaired, Entry{Seq: prev, Time: now, Kind: KindMessage, Message: inserts[next].msg})
			synthetic = append(synthetic, true)
			oldSeq = append(oldSeq, 0)
			next++
		}
		if i == len(entries) {
			break
		}
		e := entries[i]
		e.Seq = max(e.Seq, prev+1)
		prev = e.Seq
		repaired = append(repaired, e)
		synthetic = append(synthetic, false)
		oldSeq = append(oldSeq, entries[i].Seq)
	}
	// A compaction covered everything up to the entry with Seq UpTo; it now
	// covers up to the last entry before the first original one past UpTo.
	for i := range repaired {
		if repaired[i].Kind != KindCompaction {
			continue
		}
		upTo := repaired[i].UpTo
		var cover int64
		for j := range repaired {
			if !synthetic[j] && oldSeq[j] > upTo {
				break
			}
			cover = repaired[j].Seq
		}
		repaired[i].UpTo = cover
	}
	for i := range repaired {
		if synthetic[i] {
			added = append(added, repaired[i])
		}
	}
	atEnd = inserts[0].pos == len(entries)
	return repaired, added, atEnd
}

// RepairSession repairs entries (see Repair) and persists the repair on s:
// appended when the results go at the end, else by rewriting the history.
// Call it after Open or Fork and at the end of a cancelled or failed turn.
// It returns the history to use from now on and the added entries.
func RepairSession(s Session, entries []Entry) (repaired, added []Entry, err error) {
	repaired, added, atEnd := repair(entries)
	if len(added) == 0 {
		return entries, nil, nil
	}
	if !atEnd {
		if err := s.Rewrite(repaired); err != nil {
			return entries, nil, err
		}
		return repaired, added, nil
	}
	for i := range added {
		added[i].Seq = 0 // let the log number them after its last entry
	}
	if err := s.Append(added...); err != nil {
		return entries, nil, err
	}
	copy(repaired[len(repaired)-len(added):], added)
	return repaired, added, nil
}

// Context is what the model sees: the summary of the latest compaction
// followed by the messages after the entry it covers (Seq > UpTo); without
// a compaction, every message. Compaction entries themselves are not
// messages of the conversation, nor are tool starts (interrupted records
// are); the tool results recorded one by one after an assistant message
// (KindToolResult) are one tool message, in the order of that message's
// calls.
func Context(entries []Entry) []llm.Message {
	c := -1
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Kind == KindCompaction {
			c = i
			break
		}
	}
	var upTo int64
	out := make([]llm.Message, 0, len(entries)+1)
	if c >= 0 {
		upTo = entries[c].UpTo
		out = append(out, entries[c].Message)
	}
	fold := -1 // the tool message being made of tool_result entries
	for i := range entries {
		e := &entries[i]
		if c >= 0 && e.Seq <= upTo {
			continue
		}
		switch {
		case e.Kind == KindToolResult:
			if fold < 0 {
				out = append(out, llm.Message{Role: llm.RoleTool})
				fold = len(out) - 1
			}
			out[fold].Content = append(out[fold].Content, e.Message.Content...)
		case fold >= 0 && isMessage(e) && e.Message.Role == llm.RoleTool:
			// the results Repair gave the calls left without one
			out[fold].Content = append(out[fold].Content, e.Message.Content...)
		case isMessage(e) || e.Kind == KindInterrupted:
			if fold >= 0 {
				inCallOrder(out, fold)
				fold = -1
			}
			out = append(out, e.Message)
		}
	}
	if fold >= 0 {
		inCallOrder(out, fold)
	}
	return out
}

// inCallOrder sorts the results of the tool message out[i] (recorded as
// their calls ended) in the order of the calls of the assistant message
// before it; results of no call there keep their place after them.
func inCallOrder(out []llm.Message, i int) {
	if i == 0 || out[i-1].Role != llm.RoleAssistant || len(out[i].Content) < 2 {
		return
	}
	order := map[string]int{}
	for _, b := range out[i-1].Content {
		if b.Type == llm.BlockToolUse {
			order[b.ToolCallID] = len(order)
		}
	}
	rank := func(b llm.Block) int {
		if r, ok := order[b.ToolCallID]; ok {
			return r
		}
		return len(order)
	}
	slices.SortStableFunc(out[i].Content, func(a, b llm.Block) int { return rank(a) - rank(b) })
}

// Step is where a turn recorded in the history stands (durable turns, see
// TurnKeeper): what a holder resuming it does next.
type Step struct {
	// Call is the last assistant message of the turn with tool calls whose
	// results are not all recorded; nil when the next step is a model call
	// (Ask) or the turn is over (Done).
	Call *llm.Message
	// Results are the calls of Call whose results are recorded; Started
	// those started without a result (cut: never run again); the other
	// calls of Call never started.
	Results map[string]bool
	Started map[string]bool
	// Ask: the model is asked next (the prompt, or every result recorded,
	// or the model's reply was cut before it was recorded).
	Ask bool
	// Done: the turn's last message is the model's answer without tool
	// calls: only its end is left to record.
	Done bool
}

// NextStep reads the turn whose first entry has Seq first from entries.
func NextStep(entries []Entry, first int64) Step {
	results, started := map[string]bool{}, map[string]bool{}
	var last *llm.Message
	for i := range entries {
		e := &entries[i]
		if e.Seq < first {
			continue
		}
		switch {
		case e.Kind == KindToolStart:
			started[e.CallID] = true
		case e.Kind == KindToolResult || isMessage(e) && e.Message.Role == llm.RoleTool:
			for _, b := range e.Message.Content {
				if b.Type == llm.BlockToolResult {
					results[b.ToolCallID] = true
				}
			}
		case isMessage(e) && e.Message.Role == llm.RoleAssistant:
			last = &entries[i].Message
		}
	}
	if last == nil {
		return Step{Ask: true}
	}
	calls, open := 0, false
	for _, b := range last.Content {
		if b.Type == llm.BlockToolUse {
			calls++
			open = open || !results[b.ToolCallID]
		}
	}
	switch {
	case calls == 0:
		return Step{Done: true}
	case !open:
		return Step{Ask: true}
	}
	for id := range started {
		if results[id] {
			delete(started, id)
		}
	}
	return Step{Call: last, Results: results, Started: started}
}
