package llm_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
)

func presetProvider(t *testing.T, preset, baseURL string, edit func(*llm.Config)) llm.Provider {
	t.Helper()
	cfg := llm.Config{Provider: preset, BaseURL: baseURL, APIKey: testKey, Retry: noRetry}
	if edit != nil {
		edit(&cfg)
	}
	p, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDashScopeThinking(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Thinking: "considering", Text: "done"})
	p := presetProvider(t, "dashscope", srv.URL(), nil)
	req := userRequest("x")
	req.ThinkingBudget = 2048
	req.MaxTokens = 4096
	evs, err := stream(t, p, req)
	if err != nil {
		t.Fatal(err)
	}
	if s := summarize(t, evs); s.thinking != "considering" || s.text != "done" {
		t.Errorf("summary %+v", s)
	}
	body := srv.Requests()[0].JSON()
	if body["enable_thinking"] != true || body["thinking_budget"] != 2048.0 || body["max_tokens"] != 4096.0 ||
		body["max_completion_tokens"] != nil || body["model"] != "qwen3-coder-plus" {
		t.Errorf("body = %s", srv.Requests()[0].Body)
	}
	// No budget: nothing is sent, the model's default applies.
	if _, err := stream(t, p, userRequest("x")); err != nil {
		t.Fatal(err)
	}
	if body := srv.Requests()[1].JSON(); body["enable_thinking"] != nil || body["thinking_budget"] != nil {
		t.Errorf("body = %s", srv.Requests()[1].Body)
	}
	// The configured budget applies when the request has none.
	p = presetProvider(t, "dashscope", srv.URL(), func(c *llm.Config) { c.ThinkingBudget = 512 })
	if _, err := stream(t, p, userRequest("x")); err != nil {
		t.Fatal(err)
	}
	if body := srv.Requests()[2].JSON(); body["thinking_budget"] != 512.0 {
		t.Errorf("body = %s", srv.Requests()[2].Body)
	}
}

func TestMaxTokensFieldPerPreset(t *testing.T) {
	srv := llmtest.Start(t)
	cases := []struct {
		preset, field string
	}{
		{"openai", "max_completion_tokens"},
		{"deepseek", "max_tokens"},
		{"openai_compatible", "max_tokens"},
		{"ollama", "max_tokens"},
		{"gemini", "max_tokens"},
	}
	for i, c := range cases {
		p := presetProvider(t, c.preset, srv.URL(), func(cfg *llm.Config) { cfg.MaxTokens, cfg.Model = 777, "m" })
		if _, err := stream(t, p, userRequest("x")); err != nil {
			t.Fatal(err)
		}
		body := srv.Requests()[i].JSON()
		other := "max_tokens"
		if c.field == "max_tokens" {
			other = "max_completion_tokens"
		}
		if body[c.field] != 777.0 || body[other] != nil {
			t.Errorf("%s: body = %s", c.preset, srv.Requests()[i].Body)
		}
	}
}

func TestReasoningEffortAndOtherThinkingStyles(t *testing.T) {
	srv := llmtest.Start(t)
	cases := []struct {
		preset, model string
		budget        int
		check         func(map[string]any) bool
	}{
		{"openai", "gpt-5", 20000, func(b map[string]any) bool { return b["reasoning_effort"] == "high" }},
		{"openai", "o4-mini", 1000, func(b map[string]any) bool { return b["reasoning_effort"] == "low" }},
		{"openai", "gpt-4.1", 20000, func(b map[string]any) bool { return b["reasoning_effort"] == nil }},
		{"gemini", "gemini-2.5-flash", 8000, func(b map[string]any) bool { return b["reasoning_effort"] == "medium" }},
		{"openrouter", "", 3000, func(b map[string]any) bool {
			r, _ := b["reasoning"].(map[string]any)
			return r["max_tokens"] == 3000.0
		}},
		{"zhipu", "", 3000, func(b map[string]any) bool {
			r, _ := b["thinking"].(map[string]any)
			return r["type"] == "enabled"
		}},
		{"deepseek", "deepseek-reasoner", 3000, func(b map[string]any) bool {
			return b["thinking"] == nil && b["reasoning_effort"] == nil && b["enable_thinking"] == nil
		}},
	}
	for i, c := range cases {
		p := presetProvider(t, c.preset, srv.URL(), func(cfg *llm.Config) { cfg.Model = c.model })
		req := userRequest("x")
		req.ThinkingBudget = c.budget
		if _, err := stream(t, p, req); err != nil {
			t.Fatal(err)
		}
		if !c.check(srv.Requests()[i].JSON()) {
			t.Errorf("%s %s: body = %s", c.preset, c.model, srv.Requests()[i].Body)
		}
	}
}

// reasoning_content goes back on the current turn's assistant messages only.
func TestReasoningContentRoundTrip(t *testing.T) {
	srv := llmtest.Start(t)
	p := presetProvider(t, "deepseek", srv.URL(), nil)
	user := func(s string) llm.Message {
		return llm.Message{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: s}}}
	}
	req := &llm.Request{Messages: []llm.Message{
		user("first question"),
		{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockThinking, Text: "old reasoning"}, {Type: llm.BlockText, Text: "old answer"}}},
		user("second question"),
		{Role: llm.RoleAssistant, Content: []llm.Block{
			{Type: llm.BlockThinking, Text: "need a file"},
			{Type: llm.BlockToolUse, ToolCallID: "c1", Name: "read_file", Input: json.RawMessage(`{"path":"a"}`)},
		}},
		{Role: llm.RoleTool, Content: []llm.Block{{Type: llm.BlockToolResult, ToolCallID: "c1", Text: "contents"}}},
	}}
	if _, err := stream(t, p, req); err != nil {
		t.Fatal(err)
	}
	m := srv.Requests()[0].Chat.Messages
	if len(m) != 5 || m[1].ReasoningContent != "" || m[1].Text() != "old answer" ||
		m[3].ReasoningContent != "need a file" || len(m[3].ToolCalls) != 1 || m[4].Role != "tool" {
		t.Errorf("messages = %s", srv.Requests()[0].Body)
	}
}

// Servers without stream_options.include_usage support.
func TestOpenAIUsageWithoutIncludeUsage(t *testing.T) {
	srv := llmtest.Start(t)
	p := newProvider(t, srv.URL())

	srv.Script(llmtest.Reply{Text: "a b", UsageInChoices: true, Usage: &llmtest.Usage{PromptTokens: 9, CompletionTokens: 2}})
	evs, err := stream(t, p, userRequest("x"))
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(t, evs)
	if s.text != "a b" || s.stop != llm.StopEndTurn || s.usage == nil || *s.usage != (llm.Usage{InputTokens: 9, OutputTokens: 2}) {
		t.Errorf("usage on the finish chunk: %+v %+v", s, s.usage)
	}

	srv.Script(llmtest.Reply{Text: "a b", NoUsage: true})
	evs, err = stream(t, p, userRequest("x"))
	if err != nil {
		t.Fatal(err)
	}
	s = summarize(t, evs)
	if s.text != "a b" || s.stop != llm.StopEndTurn || s.usage != nil {
		t.Errorf("no usage: %+v %+v", s, s.usage)
	}
}

func TestOpenAIIdleTimeout(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "a b c", Hang: true, AfterChunks: 2})
	p := presetProvider(t, "openai_compatible", srv.URL(), func(c *llm.Config) {
		c.Model = "m"
		c.Retry.IdleTimeout = 150 * time.Millisecond
	})
	evs, err := stream(t, p, userRequest("x"))
	if !errors.Is(err, llm.ErrIdleTimeout) || !llm.IsRetryable(err) {
		t.Fatalf("err = %v", err)
	}
	if s := summarize(t, evs); s.text != "a " {
		t.Errorf("text %q", s.text)
	}
}

func TestOpenAIInStreamErrorIsRetryable(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "a b", StreamError: "overloaded_error", AfterChunks: 2})
	_, err := stream(t, newProvider(t, srv.URL()), userRequest("x"))
	var apiErr *llm.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 529 || !llm.IsRetryable(err) {
		t.Fatalf("err = %v", err)
	}
}
