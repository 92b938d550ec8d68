package llm_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
)

// The system prompt's stable start must be the same request bytes
// whatever the per-turn part says, so the provider's prompt cache hits.

func TestOpenAISystemTurnAfterStablePrefix(t *testing.T) {
	srv := llmtest.Start(t)
	p := newProvider(t, srv.URL())
	for _, turn := range []string{"env one", "env two, longer"} {
		req := &llm.Request{System: "Stable rules.", SystemTurn: turn,
			Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "hi"}}}}}
		if _, err := stream(t, p, req); err != nil {
			t.Fatal(err)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	prefix := []byte(`{"messages":[{"content":"Stable rules.\n\n`)
	for i, want := range []string{"Stable rules.\n\nenv one", "Stable rules.\n\nenv two, longer"} {
		r := reqs[i]
		if !bytes.HasPrefix(r.Body, prefix) {
			t.Errorf("body %d does not start with the stable prefix: %s", i, r.Body)
		}
		if n := len(r.Chat.Messages); n != 2 || r.Chat.Messages[0].Role != "system" || r.Chat.Messages[0].Text() != want {
			t.Errorf("messages %d = %+v", i, r.Chat.Messages)
		}
	}
}

func TestAnthropicSystemTurnIsASecondBlockAfterTheBreakpoint(t *testing.T) {
	srv := llmtest.Start(t)
	p := newAnthropic(t, srv.URL())
	var first json.RawMessage
	for _, turn := range []string{"env one", "env two"} {
		req := &llm.Request{System: "Stable rules.", SystemTurn: turn,
			Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "hi"}}}}}
		if _, err := stream(t, p, req); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range srv.Requests() {
		var sys []json.RawMessage
		if err := json.Unmarshal(r.Anthropic.System, &sys); err != nil || len(sys) != 2 {
			t.Fatalf("system %d = %s", i, r.Anthropic.System)
		}
		var blocks [2]llmtest.AnthropicBlock
		_ = json.Unmarshal(sys[0], &blocks[0])
		_ = json.Unmarshal(sys[1], &blocks[1])
		if blocks[0].Text != "Stable rules." || blocks[0].CacheControl == nil || blocks[1].CacheControl != nil {
			t.Errorf("system %d = %s", i, r.Anthropic.System)
		}
		if first == nil {
			first = sys[0]
		} else if !bytes.Equal(first, sys[0]) {
			t.Errorf("stable block differs: %s vs %s", first, sys[0])
		}
	}
}
