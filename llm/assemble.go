package llm

import (
	"encoding/json"
	"strings"
)

// Assembler builds the assistant message of one model call from its events,
// keeping the blocks in stream order: several thinking blocks each keep
// their own signature, redacted thinking stays where it came, text after a
// tool call starts a new block. The Anthropic API needs exactly that order
// back on the next call. The zero Assembler is ready; it is not safe for
// concurrent use.
type Assembler struct {
	blocks []Block
	text   []textBuf   // text / thinking / tool arguments, per block
	calls  map[int]int // tool call index -> block position
	usage  Usage
	gotUse bool
	stop   StopReason
}

// Add records one event.
func (a *Assembler) Add(ev Event) {
	switch ev.Type {
	case EventTextDelta:
		if ev.Text != "" {
			a.last(BlockText).WriteString(ev.Text)
		}
	case EventThinkingDelta:
		if ev.Text != "" {
			a.last(BlockThinking).WriteString(ev.Text)
		}
	case EventThinkingSignature:
		a.last(BlockThinking)
		a.blocks[len(a.blocks)-1].Signature = ev.Text
	case EventRedactedThinking:
		a.add(Block{Type: BlockRedactedThinking, Data: ev.Text})
	case EventToolCallStart:
		if a.calls == nil {
			a.calls = map[int]int{}
		}
		a.add(Block{Type: BlockToolUse, ToolCallID: ev.ID, Name: ev.Name})
		a.calls[ev.Index] = len(a.blocks) - 1
	case EventToolCallArgs:
		if i, ok := a.calls[ev.Index]; ok {
			a.text[i].WriteString(ev.ArgsDelta)
		}
	case EventUsage:
		a.usage, a.gotUse = ev.Usage, true
	case EventStop:
		a.stop = ev.StopReason
	}
}

// last returns the builder of the last block if it has type t (and, for
// thinking, no signature yet), else of a new block of type t.
func (a *Assembler) last(t BlockType) *textBuf {
	if n := len(a.blocks); n > 0 {
		b := &a.blocks[n-1]
		if b.Type == t && (t != BlockThinking || b.Signature == "") {
			return &a.text[n-1]
		}
	}
	a.add(Block{Type: t})
	return &a.text[len(a.text)-1]
}

func (a *Assembler) add(b Block) {
	a.blocks = append(a.blocks, b)
	a.text = append(a.text, textBuf{})
}

// Message returns the assistant message so far (also after a failed or
// cancelled stream: what the user saw). Tool inputs that are not valid JSON
// are kept as a JSON string so the history stays encodable.
func (a *Assembler) Message() Message {
	msg := Message{Role: RoleAssistant, Content: make([]Block, 0, len(a.blocks))}
	for i, b := range a.blocks {
		switch b.Type {
		case BlockText, BlockThinking:
			b.Text = a.text[i].String()
			if b.Text == "" && b.Signature == "" {
				continue
			}
		case BlockToolUse:
			b.Input = ToolInput(a.text[i].String())
		}
		msg.Content = append(msg.Content, b)
	}
	return msg
}

// EachText calls fn with each text and thinking block so far, in stream
// order (the text a client was shown of the call, see Message).
func (a *Assembler) EachText(fn func(t BlockType, text string)) {
	for i, b := range a.blocks {
		if b.Type == BlockText || b.Type == BlockThinking {
			fn(b.Type, a.text[i].String())
		}
	}
}

// Usage returns the call's usage, if the provider reported one.
func (a *Assembler) Usage() (Usage, bool) { return a.usage, a.gotUse }

// StopReason returns the stop reason ("" before EventStop).
func (a *Assembler) StopReason() StopReason { return a.stop }

// HasToolCalls reports whether the answer asked for tools.
func (a *Assembler) HasToolCalls() bool { return len(a.calls) > 0 }

// ToolInput turns streamed tool arguments into a tool_use input: "" is {},
// invalid JSON becomes a JSON string (the tool then reports the error).
func ToolInput(args string) json.RawMessage {
	if strings.TrimSpace(args) == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(args)) {
		return json.RawMessage(args)
	}
	b, _ := json.Marshal(args)
	return b
}
