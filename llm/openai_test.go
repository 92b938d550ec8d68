package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
)

const testKey = "sk-test-SECRET-0123456789"

// noRetry turns off New's retry wrapper: these tests look at one attempt.
var noRetry = llm.RetryPolicy{Attempts: 1}

func newProvider(t *testing.T, baseURL string) llm.Provider {
	t.Helper()
	p, err := llm.New(llm.Config{Provider: "openai_compatible", BaseURL: baseURL, APIKey: testKey, Model: "test-model", Retry: noRetry})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func userRequest(text string) *llm.Request {
	return &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: text}}}}}
}

func stream(t *testing.T, p llm.Provider, req *llm.Request) ([]llm.Event, error) {
	t.Helper()
	var evs []llm.Event
	err := p.Stream(context.Background(), req, func(e llm.Event) { evs = append(evs, e) })
	return evs, err
}

// summary concatenates the deltas and names the other events in order.
type summary struct {
	text, thinking string
	args           map[int]string
	calls          []llm.Event // EventToolCallStart
	kinds          []llm.EventType
	usage          *llm.Usage
	stop           llm.StopReason
}

func summarize(t *testing.T, evs []llm.Event) summary {
	t.Helper()
	s := summary{args: map[int]string{}}
	for _, e := range evs {
		switch e.Type {
		case llm.EventTextDelta:
			if e.Text == "" {
				t.Errorf("empty text delta")
			}
			s.text += e.Text
		case llm.EventThinkingDelta:
			if e.Text == "" {
				t.Errorf("empty thinking delta")
			}
			s.thinking += e.Text
		case llm.EventToolCallStart:
			s.calls = append(s.calls, e)
		case llm.EventToolCallArgs:
			s.args[e.Index] += e.ArgsDelta
		case llm.EventUsage:
			u := e.Usage
			s.usage = &u
		case llm.EventStop:
			s.stop = e.StopReason
		}
		if n := len(s.kinds); n == 0 || s.kinds[n-1] != e.Type {
			s.kinds = append(s.kinds, e.Type)
		}
	}
	return s
}

func kindsEqual(a, b []llm.EventType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestOpenAIText(t *testing.T) {
	srv := llmtest.Start(t)
	text := "Hello \"brave\" new\nworld — ünïcödé \\ \t done"
	srv.Script(llmtest.Reply{Text: text, Usage: &llmtest.Usage{PromptTokens: 12, CompletionTokens: 7}})
	evs, err := stream(t, newProvider(t, srv.URL()), userRequest("hi"))
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(t, evs)
	if s.text != text {
		t.Errorf("text = %q, want %q", s.text, text)
	}
	// Deltas that came in one read may be joined into one event.
	if n := strings.Count(text, " ") + 1; len(evs) < 3 || len(evs) > n+2 {
		t.Errorf("got %d events, want 1 to %d text deltas + usage + stop", len(evs), n)
	}
	want := []llm.EventType{llm.EventTextDelta, llm.EventUsage, llm.EventStop}
	if !kindsEqual(s.kinds, want) {
		t.Errorf("event kinds = %v, want %v", s.kinds, want)
	}
	if s.stop != llm.StopEndTurn {
		t.Errorf("stop = %q", s.stop)
	}
	if s.usage == nil || s.usage.InputTokens != 12 || s.usage.OutputTokens != 7 {
		t.Errorf("usage = %+v", s.usage)
	}
}

func TestOpenAIThinking(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Thinking: "Let me think about it.", Text: "42"})
	evs, err := stream(t, newProvider(t, srv.URL()), userRequest("q"))
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(t, evs)
	if s.thinking != "Let me think about it." || s.text != "42" {
		t.Errorf("thinking %q text %q", s.thinking, s.text)
	}
	want := []llm.EventType{llm.EventThinkingDelta, llm.EventTextDelta, llm.EventUsage, llm.EventStop}
	if !kindsEqual(s.kinds, want) {
		t.Errorf("event kinds = %v, want %v", s.kinds, want)
	}
}

func TestOpenAIParallelToolCallsInterleaved(t *testing.T) {
	srv := llmtest.Start(t)
	args0 := `{"path":"src/main.go","limit":200}`
	args1 := `{"command":"ls -la \"dir\""}`
	srv.Script(llmtest.Reply{
		Text: "Looking.",
		ToolCalls: []llmtest.ToolCall{
			{ID: "call_a", Name: "read_file", Arguments: args0},
			{ID: "call_b", Name: "shell", Arguments: args1},
		},
		Interleave: true,
		Split:      5,
	})
	evs, err := stream(t, newProvider(t, srv.URL()), userRequest("do it"))
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(t, evs)
	if len(s.calls) != 2 ||
		s.calls[0].Index != 0 || s.calls[0].ID != "call_a" || s.calls[0].Name != "read_file" ||
		s.calls[1].Index != 1 || s.calls[1].ID != "call_b" || s.calls[1].Name != "shell" {
		t.Fatalf("tool call starts = %+v", s.calls)
	}
	if s.args[0] != args0 || s.args[1] != args1 {
		t.Errorf("args = %v", s.args)
	}
	if s.stop != llm.StopToolUse {
		t.Errorf("stop = %q", s.stop)
	}
	// Fragments really were interleaved, and every call ends once, in order,
	// after all arguments and before usage.
	var argIdx, ends []int
	for _, e := range evs {
		switch e.Type {
		case llm.EventToolCallArgs:
			argIdx = append(argIdx, e.Index)
		case llm.EventToolCallEnd:
			ends = append(ends, e.Index)
		}
	}
	if len(argIdx) < 4 || argIdx[0] != 0 || argIdx[1] != 1 {
		t.Errorf("arg fragment order = %v, want interleaved", argIdx)
	}
	if fmt.Sprint(ends) != "[0 1]" {
		t.Errorf("ends = %v", ends)
	}
	want := []llm.EventType{llm.EventTextDelta, llm.EventToolCallStart, llm.EventToolCallArgs, llm.EventToolCallEnd, llm.EventUsage, llm.EventStop}
	if !kindsEqual(s.kinds, want) {
		t.Errorf("event kinds = %v, want %v", s.kinds, want)
	}
}

func TestOpenAIFinishReasons(t *testing.T) {
	cases := []struct {
		reply llmtest.Reply
		want  llm.StopReason
	}{
		{llmtest.Reply{Text: "a", FinishReason: "stop"}, llm.StopEndTurn},
		{llmtest.Reply{Text: "a", FinishReason: "length"}, llm.StopMaxTokens},
		{llmtest.Reply{Text: "a", FinishReason: "content_filter"}, llm.StopRefusal},
		{llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "c", Name: "t", Arguments: "{}"}}}, llm.StopToolUse},
		// Some servers say "stop" after tool calls.
		{llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "c", Name: "t", Arguments: "{}"}}, FinishReason: "stop"}, llm.StopToolUse},
	}
	srv := llmtest.Start(t)
	p := newProvider(t, srv.URL())
	for _, c := range cases {
		srv.Script(c.reply)
		evs, err := stream(t, p, userRequest("x"))
		if err != nil {
			t.Fatal(err)
		}
		if got := summarize(t, evs).stop; got != c.want {
			t.Errorf("finish %q: stop = %q, want %q", c.reply.FinishReason, got, c.want)
		}
	}
}

func TestOpenAIUsage(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "a", Usage: &llmtest.Usage{PromptTokens: 1000, CompletionTokens: 300, ReasoningTokens: 120, CachedTokens: 800}})
	evs, err := stream(t, newProvider(t, srv.URL()), userRequest("x"))
	if err != nil {
		t.Fatal(err)
	}
	want := llm.Usage{InputTokens: 1000, OutputTokens: 300, ThoughtTokens: 120, CachedReadTokens: 800}
	if u := summarize(t, evs).usage; u == nil || *u != want {
		t.Errorf("usage = %+v, want %+v", u, want)
	}
}

func TestOpenAIHTTPErrors(t *testing.T) {
	srv := llmtest.Start(t)
	p := newProvider(t, srv.URL())

	srv.Script(llmtest.Reply{Status: 401})
	_, err := stream(t, p, userRequest("x"))
	var apiErr *llm.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 401 || !apiErr.IsAuth() || !llm.IsAuthError(err) {
		t.Fatalf("401: err = %v", err)
	}
	if !strings.Contains(apiErr.Message, "Incorrect API key") {
		t.Errorf("401 message = %q", apiErr.Message)
	}

	srv.Script(llmtest.Reply{Status: 429, RetryAfter: "7"})
	_, err = stream(t, p, userRequest("x"))
	if !errors.As(err, &apiErr) || apiErr.Status != 429 || apiErr.RetryAfter != 7*time.Second || apiErr.IsAuth() {
		t.Fatalf("429: err = %v (%+v)", err, apiErr)
	}

	srv.Script(llmtest.Reply{Status: 500, ErrorMessage: "boom"})
	_, err = stream(t, p, userRequest("x"))
	if !errors.As(err, &apiErr) || apiErr.Status != 500 || apiErr.Message != "boom" || apiErr.RetryAfter != 0 {
		t.Fatalf("500: err = %v", err)
	}
	// No SDK retries: exactly one request per call.
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("requests = %d, want 3", n)
	}
}

func TestOpenAIErrorBodyNotOpenAIShaped(t *testing.T) {
	cases := map[string]string{
		"<html>502 Bad Gateway</html>":           "<html>502 Bad Gateway</html>",
		`{"error":"upstream overloaded"}`:        "upstream overloaded",
		`{"message":"quota exceeded","code":42}`: "quota exceeded",
		"":                                       "Bad Gateway",
	}
	for body, want := range cases {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(body))
		}))
		_, err := stream(t, newProvider(t, hs.URL), userRequest("x"))
		hs.Close()
		var apiErr *llm.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != 502 || apiErr.Message != want || apiErr.RetryAfter != 2*time.Second {
			t.Errorf("body %q: err = %v, want APIError 502 %q", body, err, want)
		}
	}
}

func TestOpenAIMidStreamDisconnect(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "one two three four", Disconnect: true, AfterChunks: 3})
	evs, err := stream(t, newProvider(t, srv.URL()), userRequest("x"))
	if err == nil {
		t.Fatal("want an error for a cut stream")
	}
	if strings.Contains(err.Error(), testKey) {
		t.Errorf("error leaks the key: %v", err)
	}
	s := summarize(t, evs)
	if s.text != "one two " || s.stop != "" {
		t.Errorf("text %q stop %q", s.text, s.stop)
	}
}

func TestOpenAIStreamEndsWithoutFinishReason(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(`data: {"choices":[{"index":0,"delta":{"content":"partial"},"finish_reason":null}]}` + "\n\n"))
	}))
	defer hs.Close()
	_, err := stream(t, newProvider(t, hs.URL), userRequest("x"))
	if err == nil || !strings.Contains(err.Error(), "finish_reason") {
		t.Fatalf("err = %v", err)
	}
}

func TestOpenAILenientStream(t *testing.T) {
	// CRLF lines, comments, event: fields, no [DONE], usage in the finish chunk.
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(": keep-alive\r\n\r\n" +
			"event: message\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"hm\"}}]}\r\n\r\n" +
			"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"prompt_cache_hit_tokens\":2}}"))
	}))
	defer hs.Close()
	evs, err := stream(t, newProvider(t, hs.URL), userRequest("x"))
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(t, evs)
	if s.thinking != "hm" || s.text != "hi" || s.stop != llm.StopEndTurn ||
		s.usage == nil || *s.usage != (llm.Usage{InputTokens: 3, OutputTokens: 1, CachedReadTokens: 2}) {
		t.Errorf("summary = %+v usage %+v", s, s.usage)
	}
}

func TestOpenAIInStreamError(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n" +
			`data: {"error":{"message":"provider overloaded","code":503}}` + "\n\n"))
	}))
	defer hs.Close()
	_, err := stream(t, newProvider(t, hs.URL), userRequest("x"))
	var apiErr *llm.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 503 || apiErr.Message != "provider overloaded" {
		t.Fatalf("err = %v", err)
	}
}

func TestOpenAILongLine(t *testing.T) {
	srv := llmtest.Start(t)
	big := strings.Repeat("0123456789", 20000) // 200 KB in one chunk
	srv.Script(llmtest.Reply{TextChunks: []string{"a", big, "b"}})
	evs, err := stream(t, newProvider(t, srv.URL()), userRequest("x"))
	if err != nil {
		t.Fatal(err)
	}
	if s := summarize(t, evs); s.text != "a"+big+"b" {
		t.Errorf("text length %d", len(s.text))
	}
}

func TestOpenAICancelMidStream(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "first second third", Hang: true, AfterChunks: 2})
	p := newProvider(t, srv.URL())
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

func TestOpenAIDeadlineBeforeHeaders(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "slow", Delay: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := newProvider(t, srv.URL()).Stream(ctx, userRequest("x"), func(llm.Event) {})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want DeadlineExceeded", err)
	}
}

func TestOpenAINoCredentials(t *testing.T) {
	srv := llmtest.Start(t)
	p, err := llm.New(llm.Config{Provider: "openai_compatible", BaseURL: srv.URL(), Model: "m", Retry: noRetry})
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

func TestOpenAIKeyNotInErrors(t *testing.T) {
	// A connection error names the URL; make the URL carry the key.
	p, _ := llm.New(llm.Config{Provider: "openai_compatible", BaseURL: "http://127.0.0.1:1/" + testKey, APIKey: testKey, Model: "m", Retry: noRetry})
	err := p.Stream(context.Background(), userRequest("x"), func(llm.Event) {})
	if err == nil || strings.Contains(err.Error(), testKey) {
		t.Errorf("err = %v", err)
	}
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Status: 401, ErrorMessage: "Incorrect API key provided: " + testKey})
	_, err = stream(t, newProvider(t, srv.URL()), userRequest("x"))
	if err == nil || strings.Contains(err.Error(), testKey) {
		t.Errorf("err = %v", err)
	}
}

func TestOpenAIRequestBody(t *testing.T) {
	srv := llmtest.Start(t)
	p := newProvider(t, srv.URL())
	schema := `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`
	req := &llm.Request{
		Model:     "deepseek-reasoner",
		System:    "You are terse.",
		MaxTokens: 1024,
		Tools: []llm.ToolSpec{
			{Name: "read_file", Description: "Read a file", InputSchema: json.RawMessage(schema)},
			{Name: "noop"},
		},
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockSummary, Text: "Earlier: we fixed the build."}}},
			{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "Read a.txt"}}},
			{Role: llm.RoleAssistant, Content: []llm.Block{
				{Type: llm.BlockThinking, Text: "I should read it."},
				{Type: llm.BlockText, Text: "Reading."},
				{Type: llm.BlockToolUse, ToolCallID: "call_1", Name: "read_file", Input: json.RawMessage(`{"path":"a.txt"}`)},
				{Type: llm.BlockToolUse, ToolCallID: "call_2", Name: "noop"},
			}},
			{Role: llm.RoleTool, Content: []llm.Block{
				{Type: llm.BlockToolResult, ToolCallID: "call_1", Text: "hello"},
				{Type: llm.BlockToolResult, ToolCallID: "call_2", Text: "no such tool", IsError: true},
			}},
		},
	}
	if _, err := stream(t, p, req); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer "+testKey {
		t.Errorf("path %q auth %q", r.Path, r.Header.Get("Authorization"))
	}
	c := r.Chat
	if c.Model != "deepseek-reasoner" || !c.Stream || c.StreamOptions == nil || !c.StreamOptions.IncludeUsage || c.MaxTokens != 1024 {
		t.Errorf("request = %s", r.Body)
	}
	if len(c.Tools) != 2 || c.Tools[0].Type != "function" || c.Tools[0].Function.Name != "read_file" ||
		c.Tools[0].Function.Description != "Read a file" || string(c.Tools[0].Function.Parameters) != schema ||
		c.Tools[1].Function.Name != "noop" || !strings.Contains(string(c.Tools[1].Function.Parameters), `"type":"object"`) {
		t.Errorf("tools = %+v", c.Tools)
	}
	// A tool whose schema changed goes out changed (definitions are cached).
	changed := `{"type":"object","properties":{"file":{"type":"string"}}}`
	req.Tools[0].InputSchema = json.RawMessage(changed)
	if _, err := stream(t, p, req); err != nil {
		t.Fatal(err)
	}
	if got := srv.Requests()[1].Chat.Tools[0].Function.Parameters; string(got) != changed {
		t.Errorf("changed schema sent as %s", got)
	}
	m := c.Messages
	if len(m) != 6 {
		t.Fatalf("messages = %s", r.Body)
	}
	if m[0].Role != "system" || m[0].Text() != "You are terse." {
		t.Errorf("system = %+v", m[0])
	}
	if m[1].Role != "user" || m[1].Text() != "Earlier: we fixed the build." || m[2].Role != "user" || m[2].Text() != "Read a.txt" {
		t.Errorf("user messages = %+v %+v", m[1], m[2])
	}
	a := m[3]
	if a.Role != "assistant" || a.Text() != "Reading." || a.ReasoningContent != "I should read it." || len(a.ToolCalls) != 2 ||
		a.ToolCalls[0].ID != "call_1" || a.ToolCalls[0].Type != "function" || a.ToolCalls[0].Function.Name != "read_file" ||
		a.ToolCalls[0].Function.Arguments != `{"path":"a.txt"}` || a.ToolCalls[1].Function.Arguments != "{}" {
		t.Errorf("assistant = %+v", a)
	}
	if m[4].Role != "tool" || m[4].ToolCallID != "call_1" || m[4].Text() != "hello" ||
		m[5].Role != "tool" || m[5].ToolCallID != "call_2" || m[5].Text() != "no such tool" {
		t.Errorf("tool messages = %+v %+v", m[4], m[5])
	}
}

func TestOpenAIModelFallbackAndRequired(t *testing.T) {
	srv := llmtest.Start(t)
	if _, err := stream(t, newProvider(t, srv.URL()), userRequest("x")); err != nil {
		t.Fatal(err)
	}
	if got := srv.Requests()[0].Chat.Model; got != "test-model" {
		t.Errorf("model = %q", got)
	}
	p, _ := llm.New(llm.Config{Provider: "openai_compatible", BaseURL: srv.URL(), APIKey: "k", Retry: noRetry})
	if err := p.Stream(context.Background(), userRequest("x"), func(llm.Event) {}); err == nil {
		t.Error("want an error without a model")
	}
}

func TestOpenAIConcurrentStreams(t *testing.T) {
	srv := llmtest.Start(t)
	srv.SetDefault(llmtest.Reply{Text: "a b c d e f", ToolCalls: []llmtest.ToolCall{{ID: "x", Name: "t", Arguments: `{"k":1}`}}})
	p := newProvider(t, srv.URL())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			var text, args string
			err := p.Stream(context.Background(), userRequest("x"), func(e llm.Event) {
				text += e.Text
				args += e.ArgsDelta
			})
			if err != nil || text != "a b c d e f" || args != `{"k":1}` {
				t.Errorf("err %v text %q args %q", err, text, args)
			}
		})
	}
	wg.Wait()
}
