package actors

import (
	"strconv"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
)

// Replay: a session's history sent to a client as the updates it saw live.

// replay sends the whole history to conn as session/update notifications
// through the same mapping as live updates, before the load/fork response.
func (s *session) replay(ctx actor.Context, conn *actor.PID) {
	for i := range s.entries {
		e := &s.entries[i]
		if e.Kind == store.KindCompaction {
			s.emitTo(ctx, conn, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateAgentMessageChunk, Content: protocol.Text("[Context compacted]")})
			continue
		}
		if e.Kind == store.KindInterrupted {
			s.emitTo(ctx, conn, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateAgentMessageChunk,
				Content: protocol.Text(interruptedReplayText), MessageID: replayMessageID(s.id, e)})
			continue
		}
		for _, u := range replayUpdates(&e.Message, replayMessageID(s.id, e)) {
			s.emitTo(ctx, conn, u)
		}
	}
}

// interruptedReplayText is what a load shows for an interrupted record.
const interruptedReplayText = "[Turn interrupted: the agent process stopped before it ended]"

// replayMessageID is the messageId of a stored message's chunks: the one
// the client saw live, or for a message kept before ids were (or one
// without), an id made of the session and the entry's place, the same at
// every replay.
func replayMessageID(sessionID string, e *store.Entry) string {
	if e.Message.ID != "" {
		return e.Message.ID
	}
	return sessionID + "-" + strconv.FormatInt(e.Seq, 10)
}

// replayUpdates maps one stored message to the updates a client saw live;
// its chunks carry messageID.
func replayUpdates(m *llm.Message, messageID string) []any {
	var out []any
	for i := range m.Content {
		b := &m.Content[i]
		switch {
		case len(b.Display) > 0 && b.Display[0] == '[':
			// an agent tool call: its sub-agent's updates, then its own
			var all []protocol.RawMessage
			if protocol.Unmarshal(b.Display, &all) == nil {
				for _, u := range all {
					out = append(out, u)
				}
			}
		case b.Display != nil:
			out = append(out, b.Display)
		case b.Type == llm.BlockImage:
			out = append(out, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateUserMessageChunk,
				Content: protocol.ImageContent{Type: "image", Data: b.Data, MimeType: b.MediaType}, MessageID: messageID})
		case b.Type == llm.BlockText && b.Text != "":
			kind := protocol.UpdateAgentMessageChunk
			if m.Role == llm.RoleUser {
				kind = protocol.UpdateUserMessageChunk
			}
			out = append(out, protocol.ChunkUpdate{SessionUpdate: kind, Content: protocol.Text(b.Text), MessageID: messageID})
		case b.Type == llm.BlockThinking && b.Text != "":
			out = append(out, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateAgentThoughtChunk, Content: protocol.Text(b.Text),
				MessageID: messageID})
		case b.Type == llm.BlockToolUse:
			out = append(out, protocol.ToolCallUpdate{SessionUpdate: protocol.UpdateToolCall, ToolCallID: b.ToolCallID,
				Title: b.Name, Name: b.Name, Kind: string(tools.KindOther), Status: protocol.ToolPending, RawInput: b.Input})
		case b.Type == llm.BlockToolResult:
			status := protocol.ToolCompleted
			if b.IsError {
				status = protocol.ToolFailed
			}
			text := protocol.Text(b.Text)
			out = append(out, protocol.ToolCallUpdate{SessionUpdate: protocol.UpdateToolCallUpdate, ToolCallID: b.ToolCallID,
				Status: status, Content: []protocol.ToolCallContent{{Type: "content", Content: &text}}})
		}
	}
	return out
}
