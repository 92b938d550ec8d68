package llm_test

import (
	"testing"

	"github.com/iac-code/iac-code/llm"
)

func TestAssemblerKeepsBlockOrder(t *testing.T) {
	var a llm.Assembler
	for _, e := range []llm.Event{
		{Type: llm.EventThinkingDelta, Text: "first "},
		{Type: llm.EventThinkingDelta, Text: "thought"},
		{Type: llm.EventThinkingSignature, Text: "sig1"},
		{Type: llm.EventRedactedThinking, Text: "opaque"},
		{Type: llm.EventThinkingDelta, Text: "second"},
		{Type: llm.EventThinkingSignature, Text: "sig2"},
		{Type: llm.EventTextDelta, Text: "Hello "},
		{Type: llm.EventTextDelta, Text: "there"},
		{Type: llm.EventToolCallStart, Index: 0, ID: "t0", Name: "read"},
		{Type: llm.EventToolCallArgs, Index: 0, ArgsDelta: `{"pa`},
		{Type: llm.EventToolCallStart, Index: 1, ID: "t1", Name: "ls"},
		{Type: llm.EventToolCallArgs, Index: 0, ArgsDelta: `th":"a"}`},
		{Type: llm.EventToolCallArgs, Index: 1, ArgsDelta: `not json`},
		{Type: llm.EventToolCallEnd, Index: 0},
		{Type: llm.EventUsage, Usage: llm.Usage{InputTokens: 3}},
		{Type: llm.EventStop, StopReason: llm.StopToolUse},
	} {
		a.Add(e)
	}
	m := a.Message()
	want := []llm.Block{
		{Type: llm.BlockThinking, Text: "first thought", Signature: "sig1"},
		{Type: llm.BlockRedactedThinking, Data: "opaque"},
		{Type: llm.BlockThinking, Text: "second", Signature: "sig2"},
		{Type: llm.BlockText, Text: "Hello there"},
		{Type: llm.BlockToolUse, ToolCallID: "t0", Name: "read", Input: []byte(`{"path":"a"}`)},
		{Type: llm.BlockToolUse, ToolCallID: "t1", Name: "ls", Input: []byte(`"not json"`)},
	}
	if m.Role != llm.RoleAssistant || len(m.Content) != len(want) {
		t.Fatalf("message = %+v", m)
	}
	for i := range want {
		g, w := m.Content[i], want[i]
		if g.Type != w.Type || g.Text != w.Text || g.Signature != w.Signature || g.Data != w.Data ||
			g.ToolCallID != w.ToolCallID || g.Name != w.Name || string(g.Input) != string(w.Input) {
			t.Errorf("block %d = %+v, want %+v", i, g, w)
		}
	}
	if u, ok := a.Usage(); !ok || u.InputTokens != 3 || a.StopReason() != llm.StopToolUse || !a.HasToolCalls() {
		t.Errorf("usage %+v stop %q", u, a.StopReason())
	}
}

func TestAssemblerSignatureOnly(t *testing.T) {
	// Thinking shown as "omitted": a signature without text still round-trips.
	var a llm.Assembler
	a.Add(llm.Event{Type: llm.EventThinkingSignature, Text: "sig"})
	a.Add(llm.Event{Type: llm.EventTextDelta, Text: "hi"})
	m := a.Message()
	if len(m.Content) != 2 || m.Content[0].Type != llm.BlockThinking || m.Content[0].Signature != "sig" || m.Content[1].Text != "hi" {
		t.Errorf("message = %+v", m)
	}
	var empty llm.Assembler
	if m := empty.Message(); len(m.Content) != 0 || empty.HasToolCalls() {
		t.Errorf("empty = %+v", m)
	}
	if string(llm.ToolInput("  ")) != "{}" {
		t.Error("ToolInput")
	}
}
