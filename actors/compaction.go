package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

// Context compaction: when the context nears the model's window, the turn
// asks the model to summarise the oldest turns (keeping the last whole turns,
// so a tool call never loses its result) and continues on the summary. The
// session stores the summary as a compaction entry; the full history stays on
// disk for replay.

const summaryPrompt = "Summarize the conversation above for your own later use: the user's goals, " +
	"decisions made, files read or changed (with paths), commands run and their outcomes, and open " +
	"questions or next steps. Be concise but keep every detail needed to continue the work."

const defaultContextWindow = 128000

func (d *Deps) contextWindow(model string) int {
	if d.LLM != nil {
		return d.LLM.ContextWindowFor(model)
	}
	if w := d.Config.LLM.ContextWindow; w > 0 {
		return w
	}
	return defaultContextWindow
}

// estimateTokens is a cheap size estimate (about four bytes per token).
// imageTokens is what an image is counted as in the estimate.
const imageTokens = 1600

func estimateTokens(msgs []llm.Message) int {
	n := 0
	for i := range msgs {
		for _, b := range msgs[i].Content {
			if b.Type == llm.BlockImage {
				// Priced by pixels, not bytes: ~1,600 tokens for a large one.
				n += imageTokens * 4
				continue
			}
			n += len(b.Text) + len(b.Input) + len(b.Data) + 16
		}
	}
	return n / 4
}

func (t *turn) needsCompaction() bool {
	if t.compactedOnce || t.noAutoCompact {
		return false
	}
	threshold := t.deps.Config.CompactThreshold
	if threshold <= 0 {
		threshold = 0.93
	}
	used := max(estimateTokens(t.messages), int(t.lastContext))
	return float64(used) > threshold*float64(t.deps.contextWindow(t.model))
}

// startCompaction summarises everything before the last keepTurns user
// turns. It returns false when there is nothing older to summarise.
func (t *turn) startCompaction(ctx actor.Context, keepTurns int) bool {
	t.compactedOnce = true
	var starts []int
	for i := range t.messages {
		m := &t.messages[i]
		if m.Role == llm.RoleUser && len(m.Content) > 0 && m.Content[0].Type == llm.BlockText {
			starts = append(starts, i)
		}
	}
	if len(starts) <= keepTurns {
		return false
	}
	cut := starts[len(starts)-keepTurns]
	if cut == 0 {
		return false
	}
	t.compacting = true
	if t.compactionUpdates {
		t.compactionID = uuid.NewString()
		t.emit(ctx, protocol.CompactionUpdate{SessionUpdate: protocol.UpdateCompaction, CompactionID: t.compactionID,
			Status: protocol.CompactionInProgress})
	}
	t.compactKeep = len(t.messages) - cut
	t.compactFrom = estimateTokens(t.messages)
	toSummarise := append(t.messages[:cut:cut], llm.Message{Role: llm.RoleUser,
		Content: []llm.Block{{Type: llm.BlockText, Text: summaryPrompt}}})
	t.stream(ctx, &llm.Request{
		Model:     t.model,
		System:    "You write precise summaries of coding sessions.",
		Messages:  t.forModel(toSummarise),
		MaxTokens: t.deps.llmConfig().MaxTokens,
	})
	return true
}

func (t *turn) endCompaction(ctx actor.Context, err error, summary string) {
	t.compacting = false
	if err != nil || summary == "" {
		t.log.Warn().AnErr("error", err).Msg("compaction failed; continuing with the full context")
		reason := "the model gave no summary"
		if err != nil {
			reason = err.Error()
		}
		t.compactionEnded(ctx, protocol.CompactionFailed, reason)
		if t.compactOnly {
			t.failModel(ctx, fmt.Errorf("compaction failed: %v", err))
			return
		}
		t.callModel(ctx)
		return
	}
	kept := t.messages[len(t.messages)-t.compactKeep:]
	t.messages = append([]llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockSummary, Text: summary}}}}, kept...)
	t.lastContext = 0
	ctx.Send(ctx.Parent(), &compacted{summary: summary, keep: t.compactKeep})
	if t.compactionID != "" {
		t.emit(ctx, protocol.CompactionSummaryChunk{SessionUpdate: protocol.UpdateCompactionSummary, CompactionID: t.compactionID,
			Content: protocol.Text(summary)})
		t.compactionEnded(ctx, protocol.CompactionCompleted, "")
	} else {
		t.emit(ctx, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateAgentMessageChunk,
			Content: protocol.Text(fmt.Sprintf("Context compacted: %d → %d tokens", t.compactFrom, estimateTokens(t.messages)))})
	}
	if t.compactOnly {
		t.finish(ctx, protocol.StopEndTurn, nil)
		return
	}
	t.callModel(ctx)
}

// compactionEnded tells a client that shows compaction updates how the
// running compaction ended (once).
func (t *turn) compactionEnded(ctx actor.Context, status, reason string) {
	if t.compactionID == "" {
		return
	}
	t.emit(ctx, protocol.CompactionUpdate{SessionUpdate: protocol.UpdateCompaction, CompactionID: t.compactionID,
		Status: status, Error: reason})
	t.compactionID = ""
}
