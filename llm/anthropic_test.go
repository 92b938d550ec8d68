package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
)

func anthropicConfig(baseURL string) llm.Config {
	return llm.Config{Provider: "anthropic_compatible", BaseURL: baseURL, APIKey: testKey, Model: "claude-test", Retry: noRetry}
}

func newAnthropic(t *testing.T, baseURL string) llm.Provider {
	t.Helper()
	p, err := llm.New(anthropicConfig(baseURL))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAnthropicText(t *testing.T) {
	srv := llmtest.Start(t)
	text := "Hello \"brave\" new\nworld — ünïcödé \\ \t done"
	srv.Script(llmtest.Reply{Text: text, Usage: &llmtest.Usage{PromptTokens: 12, CompletionTokens: 7}})
	evs, err := stream(t, newAnthropic(t, srv.URL()), userRequest("hi"))
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(t, evs)
	if s.text != text {
		t.Errorf("text = %q, want %q", s.text, text)
	}
	if n := strings.Count(text, " ") + 1; len(evs) != n+2 {
		t.Errorf("got %d events, want %d text deltas + usage + stop", len(evs), n)
	}
	want := []llm.EventType{llm.EventTextDelta, llm.EventUsage, llm.EventStop}
	if !kindsEqual(s.kinds, want) {
		t.Errorf("event kinds = %v, want %v", s.kinds, want)
	}
	if s.stop != llm.StopEndTurn {
		t.Errorf("stop = %q", s.stop)
	}
	if s.usage == nil || *s.usage != (llm.Usage{InputTokens: 12, OutputTokens: 7}) {
		t.Errorf("usage = %+v", s.usage)
	}
	r := srv.Requests()[0]
	// The /v1 of srv.URL() is dropped: the client appends /v1/messages.
	if r.Path != "/v1/messages" || r.Format != llmtest.FormatAnthropic {
		t.Errorf("path %q format %q", r.Path, r.Format)
	}
	// anthropic_compatible: the 2023-06-01 API with the key in both headers.
	if r.Header.Get("X-Api-Key") != testKey || r.Header.Get("Authorization") != "Bearer "+testKey ||
		r.Header.Get("Anthropic-Version") != "2023-06-01" {
		t.Errorf("headers %v", r.Header)
	}
}

func TestAnthropicPresetUsesSDKDefaults(t *testing.T) {
	srv := llmtest.Start(t)
	cfg := anthropicConfig(srv.Root())
	cfg.Provider = "anthropic"
	p, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream(t, p, userRequest("hi")); err != nil {
		t.Fatal(err)
	}
	h := srv.Requests()[0].Header
	if h.Get("Authorization") != "Bearer "+testKey || h.Get("Anthropic-Version") == "2023-06-01" || h.Get("Anthropic-Version") == "" {
		t.Errorf("headers %v", h)
	}
}

func TestAnthropicThinkingSignatureRoundTrip(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{
		Thinking: "Let me think about it carefully.", Signature: "EqQBCkYIARgCKkD-signature==",
		RedactedThinking: []string{"opaque-redacted-payload"},
		Text:             "42",
		Usage:            &llmtest.Usage{PromptTokens: 50, CompletionTokens: 40, ReasoningTokens: 30},
	})
	p := newAnthropic(t, srv.URL())
	req := userRequest("q")
	req.ThinkingBudget = 2048
	evs, err := stream(t, p, req)
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(t, evs)
	if s.thinking != "Let me think about it carefully." || s.text != "42" {
		t.Errorf("thinking %q text %q", s.thinking, s.text)
	}
	want := []llm.EventType{llm.EventThinkingDelta, llm.EventThinkingSignature, llm.EventRedactedThinking,
		llm.EventTextDelta, llm.EventUsage, llm.EventStop}
	if !kindsEqual(s.kinds, want) {
		t.Errorf("event kinds = %v, want %v", s.kinds, want)
	}
	if s.usage.ThoughtTokens != 30 {
		t.Errorf("usage %+v", s.usage)
	}
	first := srv.Requests()[0].Anthropic
	if first.Thinking == nil || first.Thinking.Type != "enabled" || first.Thinking.BudgetTokens != 2048 || first.MaxTokens <= 2048 {
		t.Errorf("thinking config %+v max_tokens %d", first.Thinking, first.MaxTokens)
	}

	// The next call sends the blocks back, in order, signature and data intact.
	var asm llm.Assembler
	for _, e := range evs {
		asm.Add(e)
	}
	req.Messages = append(req.Messages, asm.Message(), llm.Message{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "and?"}}})
	if _, err := stream(t, p, req); err != nil {
		t.Fatal(err)
	}
	msgs := srv.Requests()[1].Anthropic.Messages
	if len(msgs) != 3 || msgs[1].Role != "assistant" {
		t.Fatalf("messages = %s", srv.Requests()[1].Body)
	}
	b := msgs[1].Blocks()
	if len(b) != 3 ||
		b[0].Type != "thinking" || b[0].Thinking != "Let me think about it carefully." || b[0].Signature != "EqQBCkYIARgCKkD-signature==" ||
		b[1].Type != "redacted_thinking" || b[1].Data != "opaque-redacted-payload" ||
		b[2].Type != "text" || b[2].Text != "42" {
		t.Errorf("assistant blocks = %+v", b)
	}
}

func TestAnthropicDefaultSignature(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Thinking: "hmm", Text: "ok"})
	evs, err := stream(t, newAnthropic(t, srv.URL()), userRequest("q"))
	if err != nil {
		t.Fatal(err)
	}
	var sig string
	for _, e := range evs {
		if e.Type == llm.EventThinkingSignature {
			sig = e.Text
		}
	}
	if sig != llmtest.DefaultSignature("hmm") {
		t.Errorf("signature %q", sig)
	}
}

func TestAnthropicToolUseManyDeltas(t *testing.T) {
	srv := llmtest.Start(t)
	args0 := `{"path":"src/main.go","content":"package main\n\nfunc main() {\n\tprintln(\"hi \\\"there\\\"\")\n}\n","limit":200}`
	args1 := `{"command":"ls -la"}`
	var chunks []string
	for i := 0; i < len(args0); i += 3 {
		chunks = append(chunks, args0[i:min(i+3, len(args0))])
	}
	srv.Script(llmtest.Reply{
		Text: "Looking.",
		ToolCalls: []llmtest.ToolCall{
			{ID: "toolu_a", Name: "write_file", Arguments: args0, ArgChunks: chunks},
			{ID: "toolu_b", Name: "shell", Arguments: args1},
		},
	})
	evs, err := stream(t, newAnthropic(t, srv.URL()), userRequest("do it"))
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(t, evs)
	if len(s.calls) != 2 ||
		s.calls[0].Index != 0 || s.calls[0].ID != "toolu_a" || s.calls[0].Name != "write_file" ||
		s.calls[1].Index != 1 || s.calls[1].ID != "toolu_b" || s.calls[1].Name != "shell" {
		t.Fatalf("tool call starts = %+v", s.calls)
	}
	if s.args[0] != args0 || s.args[1] != args1 {
		t.Errorf("args = %v", s.args)
	}
	nArgs := 0
	var ends []int
	for _, e := range evs {
		switch e.Type {
		case llm.EventToolCallArgs:
			nArgs++
		case llm.EventToolCallEnd:
			ends = append(ends, e.Index)
		}
	}
	if nArgs < len(chunks) || fmt.Sprint(ends) != "[0 1]" {
		t.Errorf("%d arg deltas (want >= %d), ends %v", nArgs, len(chunks), ends)
	}
	if s.stop != llm.StopToolUse {
		t.Errorf("stop = %q", s.stop)
	}

	// Results go back as one user message of tool_result blocks.
	var asm llm.Assembler
	for _, e := range evs {
		asm.Add(e)
	}
	req := userRequest("do it")
	req.Messages = append(req.Messages, asm.Message(), llm.Message{Role: llm.RoleTool, Content: []llm.Block{
		{Type: llm.BlockToolResult, ToolCallID: "toolu_a", Text: "written"},
		{Type: llm.BlockToolResult, ToolCallID: "toolu_b", Text: "denied", IsError: true},
	}})
	if _, err := stream(t, newAnthropic(t, srv.URL()), req); err != nil {
		t.Fatal(err)
	}
	msgs := srv.Requests()[1].Anthropic.Messages
	if len(msgs) != 3 {
		t.Fatalf("messages = %s", srv.Requests()[1].Body)
	}
	a := msgs[1].Blocks()
	if len(a) != 3 || a[0].Type != "text" || a[1].Type != "tool_use" || a[1].ID != "toolu_a" || a[1].Name != "write_file" ||
		!jsonEqual(a[1].Input, args0) || a[2].ID != "toolu_b" || !jsonEqual(a[2].Input, args1) {
		t.Errorf("assistant blocks = %+v", a)
	}
	u := msgs[2].Blocks()
	if msgs[2].Role != "user" || len(u) != 2 ||
		u[0].Type != "tool_result" || u[0].ToolUseID != "toolu_a" || u[0].ContentText() != "written" || u[0].IsError ||
		u[1].ToolUseID != "toolu_b" || u[1].ContentText() != "denied" || !u[1].IsError {
		t.Errorf("tool results = %+v", u)
	}
	if u[1].CacheControl == nil || u[1].CacheControl.Type != "ephemeral" {
		t.Errorf("no cache breakpoint on the last block: %+v", u[1])
	}
}

func jsonEqual(raw json.RawMessage, want string) bool {
	var a, b any
	return json.Unmarshal(raw, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && fmt.Sprint(a) == fmt.Sprint(b)
}

func TestAnthropicStopReasons(t *testing.T) {
	cases := []struct {
		reply llmtest.Reply
		want  llm.StopReason
	}{
		{llmtest.Reply{Text: "a"}, llm.StopEndTurn},
		{llmtest.Reply{Text: "a", FinishReason: "length"}, llm.StopMaxTokens},
		{llmtest.Reply{Text: "a", StopReason: "max_tokens"}, llm.StopMaxTokens},
		{llmtest.Reply{Text: "a", StopReason: "refusal"}, llm.StopRefusal},
		{llmtest.Reply{Text: "a", StopReason: "stop_sequence"}, llm.StopEndTurn},
		{llmtest.Reply{Text: "a", StopReason: "model_context_window_exceeded"}, llm.StopMaxTokens},
		{llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "t", Arguments: "{}"}}}, llm.StopToolUse},
	}
	srv := llmtest.Start(t)
	p := newAnthropic(t, srv.URL())
	for _, c := range cases {
		srv.Script(c.reply)
		evs, err := stream(t, p, userRequest("x"))
		if err != nil {
			t.Fatal(err)
		}
		if got := summarize(t, evs).stop; got != c.want {
			t.Errorf("%+v: stop = %q, want %q", c.reply, got, c.want)
		}
	}
}

func TestAnthropicUsageWithCache(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "a", Usage: &llmtest.Usage{PromptTokens: 1000, CompletionTokens: 300,
		ReasoningTokens: 120, CachedTokens: 600, CacheCreationTokens: 200}})
	evs, err := stream(t, newAnthropic(t, srv.URL()), userRequest("x"))
	if err != nil {
		t.Fatal(err)
	}
	want := llm.Usage{InputTokens: 1000, OutputTokens: 300, ThoughtTokens: 120, CachedReadTokens: 600, CachedWriteTokens: 200}
	if u := summarize(t, evs).usage; u == nil || *u != want {
		t.Errorf("usage = %+v, want %+v", u, want)
	}
}

func TestAnthropicHTTPErrors(t *testing.T) {
	srv := llmtest.Start(t)
	p := newAnthropic(t, srv.URL())

	srv.Script(llmtest.Reply{Status: 401})
	_, err := stream(t, p, userRequest("x"))
	var apiErr *llm.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 401 || !llm.IsAuthError(err) || !strings.Contains(apiErr.Message, "authentication_error") {
		t.Fatalf("401: err = %v", err)
	}
	srv.Script(llmtest.Reply{Status: 429, RetryAfter: "7"})
	_, err = stream(t, p, userRequest("x"))
	if !errors.As(err, &apiErr) || apiErr.Status != 429 || apiErr.RetryAfter != 7*time.Second || !llm.IsRetryable(err) {
		t.Fatalf("429: err = %v", err)
	}
	srv.Script(llmtest.Reply{Status: 529})
	_, err = stream(t, p, userRequest("x"))
	if !errors.As(err, &apiErr) || apiErr.Status != 529 || !strings.Contains(apiErr.Message, "Overloaded") || !llm.IsRetryable(err) {
		t.Fatalf("529: err = %v", err)
	}
	srv.Script(llmtest.Reply{Status: 400, ErrorMessage: "messages: text content blocks must be non-empty"})
	_, err = stream(t, p, userRequest("x"))
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || llm.IsRetryable(err) ||
		apiErr.Message != "invalid_request_error: messages: text content blocks must be non-empty" {
		t.Fatalf("400: err = %v", err)
	}
	if n := len(srv.Requests()); n != 4 {
		t.Errorf("requests = %d, want 4 (no SDK retries)", n)
	}
}

func TestAnthropicMidStreamDisconnect(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "one two three four", Disconnect: true, AfterChunks: 3})
	evs, err := stream(t, newAnthropic(t, srv.URL()), userRequest("x"))
	if err == nil || !errors.Is(err, llm.ErrStreamInterrupted) || !llm.IsRetryable(err) {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Errorf("error leaks the key: %v", err)
	}
	if s := summarize(t, evs); s.text != "one two " || s.stop != "" {
		t.Errorf("text %q stop %q", s.text, s.stop)
	}
}

func TestAnthropicStreamErrorEvent(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "one two", StreamError: "overloaded_error", AfterChunks: 2})
	evs, err := stream(t, newAnthropic(t, srv.URL()), userRequest("x"))
	var apiErr *llm.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 529 || apiErr.Message != "overloaded_error: Overloaded" || !llm.IsRetryable(err) {
		t.Fatalf("err = %v", err)
	}
	if s := summarize(t, evs); s.text != "one " {
		t.Errorf("text %q", s.text)
	}
}

func TestAnthropicCancelMidStream(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "first second third", Hang: true, AfterChunks: 2})
	p := newAnthropic(t, srv.URL())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- p.Stream(ctx, userRequest("x"), func(e llm.Event) {
			if e.Type == llm.EventTextDelta {
				select {
				case got <- struct{}{}:
				default:
				}
			}
		})
	}()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no text before the hang")
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Stream returned %v after cancel", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stream did not return after cancel")
	}
}

func TestAnthropicNoCredentials(t *testing.T) {
	srv := llmtest.Start(t)
	cfg := anthropicConfig(srv.URL())
	cfg.APIKey = ""
	p, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = p.Stream(context.Background(), userRequest("x"), func(llm.Event) { t.Error("event without credentials") })
	if !errors.Is(err, llm.ErrNoCredentials) || !llm.IsAuthError(err) {
		t.Errorf("err = %v", err)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests sent without credentials", n)
	}
}

func TestAnthropicRequestBody(t *testing.T) {
	srv := llmtest.Start(t)
	schema := `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`
	req := &llm.Request{
		System: "You are terse.",
		Tools: []llm.ToolSpec{
			{Name: "read_file", Description: "Read a file", InputSchema: json.RawMessage(schema)},
			{Name: "noop"},
		},
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockSummary, Text: "Earlier: we fixed the build."}}},
			{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "Read a.txt"}}},
			// A cancelled answer: partial thinking without a signature is dropped.
			{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockThinking, Text: "half a tho"}, {Type: llm.BlockText, Text: "Rea"}}},
			{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "go on"}}},
			{Role: llm.RoleAssistant, Content: []llm.Block{
				{Type: llm.BlockText, Text: "Reading."},
				{Type: llm.BlockToolUse, ToolCallID: "toolu_1", Name: "read_file", Input: json.RawMessage(`{"path":"a.txt"}`)},
				{Type: llm.BlockToolUse, ToolCallID: "toolu_2", Name: "noop"},
			}},
			{Role: llm.RoleTool, Content: []llm.Block{
				{Type: llm.BlockToolResult, ToolCallID: "toolu_1", Text: "hello"},
				{Type: llm.BlockToolResult, ToolCallID: "toolu_2", Text: ""},
			}},
			{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "thanks"}}},
		},
	}
	if _, err := stream(t, newAnthropic(t, srv.URL()), req); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	a := r.Anthropic
	if a.Model != "claude-test" || !a.Stream || a.MaxTokens != 8192 || a.SystemText() != "You are terse." || a.Thinking != nil {
		t.Errorf("request = %s", r.Body)
	}
	var sys []llmtest.AnthropicBlock
	if json.Unmarshal(a.System, &sys) != nil || len(sys) != 1 || sys[0].CacheControl == nil {
		t.Errorf("system = %s", a.System)
	}
	if len(a.Tools) != 2 || a.Tools[0].Name != "read_file" || a.Tools[0].Description != "Read a file" ||
		string(a.Tools[0].InputSchema) != schema || a.Tools[1].Name != "noop" || !strings.Contains(string(a.Tools[1].InputSchema), `"type":"object"`) {
		t.Errorf("tools = %+v", a.Tools)
	}
	m := a.Messages
	roles := make([]string, len(m))
	for i := range m {
		roles[i] = m[i].Role
	}
	// Consecutive user messages merge; tool results join the user's "thanks".
	if fmt.Sprint(roles) != "[user assistant user assistant user]" {
		t.Fatalf("roles = %v: %s", roles, r.Body)
	}
	if b := m[0].Blocks(); len(b) != 2 || b[0].Text != "Earlier: we fixed the build." || b[1].Text != "Read a.txt" {
		t.Errorf("first user = %+v", b)
	}
	if b := m[1].Blocks(); len(b) != 1 || b[0].Type != "text" || b[0].Text != "Rea" {
		t.Errorf("cancelled assistant = %+v", b)
	}
	if b := m[3].Blocks(); len(b) != 3 || b[1].Type != "tool_use" || string(b[2].Input) != "{}" {
		t.Errorf("assistant = %+v", b)
	}
	last := m[4].Blocks()
	if len(last) != 3 || last[0].Type != "tool_result" || last[1].Type != "tool_result" || last[1].ContentText() != "(no output)" ||
		last[2].Type != "text" || last[2].Text != "thanks" || last[2].CacheControl == nil {
		t.Errorf("last user = %+v", last)
	}
}

// A server in the 2023-06-01 style: usage output only in message_delta, a
// tool's input whole in content_block_start, CRLF lines, unknown events.
func TestAnthropicLenientStream(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\r\n\r\n" +
			": comment\n\n" +
			"event: something_new\ndata: {\"type\":\"something_new\"}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"ls\",\"input\":{\"dir\":\".\"}}}\n\n" +
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":9}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
	}))
	defer hs.Close()
	evs, err := stream(t, newAnthropic(t, hs.URL), userRequest("x"))
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(t, evs)
	if len(s.calls) != 1 || s.calls[0].ID != "t1" || s.args[0] != `{"dir":"."}` || s.stop != llm.StopToolUse ||
		s.usage == nil || *s.usage != (llm.Usage{InputTokens: 20, OutputTokens: 9}) {
		t.Errorf("summary = %+v usage %+v", s, s.usage)
	}
}

func TestAnthropicStreamEndsWithoutMessageStop(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n"))
	}))
	defer hs.Close()
	_, err := stream(t, newAnthropic(t, hs.URL), userRequest("x"))
	if !errors.Is(err, llm.ErrStreamInterrupted) || !strings.Contains(err.Error(), "message_stop") {
		t.Fatalf("err = %v", err)
	}
}

func TestAnthropicKeyNotInErrors(t *testing.T) {
	cfg := anthropicConfig("http://127.0.0.1:1/" + testKey)
	p, _ := llm.New(cfg)
	err := p.Stream(context.Background(), userRequest("x"), func(llm.Event) {})
	if err == nil || strings.Contains(err.Error(), testKey) || !llm.IsRetryable(err) {
		t.Errorf("err = %v", err)
	}
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Status: 401, ErrorMessage: "invalid x-api-key " + testKey})
	_, err = stream(t, newAnthropic(t, srv.URL()), userRequest("x"))
	if err == nil || strings.Contains(err.Error(), testKey) {
		t.Errorf("err = %v", err)
	}
}

func TestAnthropicIdleTimeout(t *testing.T) {
	srv := llmtest.Start(t)
	cfg := anthropicConfig(srv.URL())
	cfg.Retry.IdleTimeout = 200 * time.Millisecond
	p, _ := llm.New(cfg)
	for name, reply := range map[string]llmtest.Reply{
		"mid-stream":     {Text: "a b c", Hang: true, AfterChunks: 2},
		"before headers": {Text: "a", Delay: time.Minute},
	} {
		srv.Script(reply)
		start := time.Now()
		_, err := stream(t, p, userRequest("x"))
		if !errors.Is(err, llm.ErrIdleTimeout) || !errors.Is(err, llm.ErrStreamInterrupted) || !llm.IsRetryable(err) {
			t.Errorf("%s: err = %v", name, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s: took %v", name, d)
		}
	}
}

func TestAnthropicModelRequired(t *testing.T) {
	cfg := anthropicConfig("http://127.0.0.1:1")
	cfg.Model = ""
	p, _ := llm.New(cfg)
	err := p.Stream(context.Background(), userRequest("x"), func(llm.Event) {})
	if err == nil || !strings.Contains(err.Error(), "IAC_CODE_MODEL") {
		t.Errorf("err = %v", err)
	}
}
