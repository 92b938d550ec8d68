package llmtest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/iac-code/iac-code/llm/llmtest"
)

const messagesBody = `{"model":"claude-x","max_tokens":100,"stream":true,"system":"be brief",` +
	`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"text","text":"yo"}]},` +
	`{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":[{"type":"text","text":"out"}],"is_error":true}]}],` +
	`"thinking":{"type":"enabled","budget_tokens":1024}}`

type sseEvent struct {
	name string
	data map[string]any
}

func parseSSE(t *testing.T, body string) []sseEvent {
	t.Helper()
	var out []sseEvent
	for _, raw := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(raw, "\n")
		if !ok || !strings.HasPrefix(name, "event: ") || !strings.HasPrefix(data, "data: ") {
			t.Fatalf("malformed event %q", raw)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &m); err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		name = strings.TrimPrefix(name, "event: ")
		if m["type"] != name {
			t.Errorf("event %q carries type %v", name, m["type"])
		}
		out = append(out, sseEvent{name, m})
	}
	return out
}

func TestAnthropicWireFormat(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{
		Thinking: "hm ok", Signature: "sig", RedactedThinking: []string{"R"}, Text: "a b",
		ToolCalls: []llmtest.ToolCall{{ID: "toolu_1", Name: "ls", Arguments: `{"d":"."}`}},
		Usage:     &llmtest.Usage{PromptTokens: 100, CompletionTokens: 20, CachedTokens: 60, CacheCreationTokens: 10, ReasoningTokens: 5},
	})
	res, body := post(t, srv.URL()+"/messages", messagesBody)
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") || res.Header.Get("request-id") == "" {
		t.Errorf("headers %v", res.Header)
	}
	evs := parseSSE(t, body)
	var names []string
	for _, e := range evs {
		names = append(names, e.name)
	}
	want := "message_start ping " +
		"content_block_start content_block_delta content_block_delta content_block_delta content_block_stop " + // thinking: 2 pieces + signature
		"content_block_start content_block_stop " + // redacted
		"content_block_start content_block_delta content_block_delta content_block_stop " + // text
		"content_block_start content_block_delta content_block_delta content_block_delta content_block_stop " + // tool_use
		"message_delta message_stop"
	if strings.Join(names, " ") != want {
		t.Fatalf("events:\n%s\nwant\n%s", strings.Join(names, " "), want)
	}
	start := evs[0].data["message"].(map[string]any)
	u := start["usage"].(map[string]any)
	if start["model"] != "claude-x" || u["input_tokens"] != 30.0 || u["cache_read_input_tokens"] != 60.0 || u["cache_creation_input_tokens"] != 10.0 {
		t.Errorf("message_start %v", start)
	}
	if d := evs[5].data["delta"].(map[string]any); d["type"] != "signature_delta" || d["signature"] != "sig" {
		t.Errorf("signature delta %v", d)
	}
	if cb := evs[7].data["content_block"].(map[string]any); cb["type"] != "redacted_thinking" || cb["data"] != "R" || evs[7].data["index"] != 1.0 {
		t.Errorf("redacted %v", evs[7].data)
	}
	if cb := evs[13].data["content_block"].(map[string]any); cb["type"] != "tool_use" || cb["id"] != "toolu_1" || cb["name"] != "ls" || evs[13].data["index"] != 3.0 {
		t.Errorf("tool_use %v", evs[13].data)
	}
	var args string
	for _, e := range evs[14:17] {
		args += e.data["delta"].(map[string]any)["partial_json"].(string)
	}
	if args != `{"d":"."}` {
		t.Errorf("args %q", args)
	}
	md := evs[18].data
	if md["delta"].(map[string]any)["stop_reason"] != "tool_use" || md["usage"].(map[string]any)["output_tokens"] != 20.0 {
		t.Errorf("message_delta %v", md)
	}

	r := srv.Requests()[0]
	a := r.Anthropic
	if r.Format != llmtest.FormatAnthropic || a.Model != "claude-x" || a.MaxTokens != 100 || !a.Stream || a.SystemText() != "be brief" ||
		a.Thinking == nil || a.Thinking.BudgetTokens != 1024 || len(a.Messages) != 3 {
		t.Errorf("recorded %+v", a)
	}
	if b := a.Messages[0].Blocks(); len(b) != 1 || b[0].Text != "hi" {
		t.Errorf("string content %+v", b)
	}
	if b := a.Messages[1].Blocks(); b[0].Signature != "s" || b[1].Text != "yo" {
		t.Errorf("assistant %+v", b)
	}
	if b := a.Messages[2].Blocks(); b[0].ContentText() != "out" || !b[0].IsError {
		t.Errorf("tool result %+v", b)
	}
}

func TestAnthropicErrorsAndStreamError(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(
		llmtest.Reply{Status: 529, RetryAfter: "2"},
		llmtest.Reply{Status: 401},
		llmtest.Reply{Text: "a b c", StreamError: "overloaded_error", AfterChunks: 2},
		llmtest.Reply{Text: "ok", FinishReason: "length"},
	)
	res, body := post(t, srv.URL()+"/messages", messagesBody)
	var e struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if json.Unmarshal([]byte(body), &e) != nil || res.StatusCode != 529 || res.Header.Get("Retry-After") != "2" ||
		e.Type != "error" || e.Error.Type != "overloaded_error" || e.Error.Message != "Overloaded" {
		t.Errorf("529: %d %s", res.StatusCode, body)
	}
	res, body = post(t, srv.URL()+"/messages", messagesBody)
	if res.StatusCode != 401 || !strings.Contains(body, `"authentication_error"`) {
		t.Errorf("401: %d %s", res.StatusCode, body)
	}
	_, body = post(t, srv.URL()+"/messages", messagesBody)
	evs := parseSSE(t, body)
	last := evs[len(evs)-1]
	if last.name != "error" || last.data["error"].(map[string]any)["type"] != "overloaded_error" {
		t.Errorf("stream error: %s", body)
	}
	if strings.Count(body, "text_delta") != 1 {
		t.Errorf("AfterChunks 2 = message_start + one delta: %s", body)
	}
	_, body = post(t, srv.URL()+"/messages", messagesBody)
	if !strings.Contains(body, `"stop_reason":"max_tokens"`) {
		t.Errorf("stop reason: %s", body)
	}
	// Non-streaming requests are refused in the Anthropic shape.
	res, body = post(t, srv.URL()+"/messages", `{"model":"m","max_tokens":1,"messages":[]}`)
	if res.StatusCode != 400 || !strings.Contains(body, "invalid_request_error") {
		t.Errorf("non-stream: %d %s", res.StatusCode, body)
	}
}

func TestAnthropicDisconnect(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "a b c", Disconnect: true, AfterChunks: 2})
	res, err := http.Post(srv.URL()+"/messages", "application/json", strings.NewReader(messagesBody))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err == nil || strings.Count(string(body), "text_delta") != 1 || strings.Contains(string(body), "message_stop") {
		t.Errorf("want one delta then a broken body, got err %v body %q", err, body)
	}
}

func TestOpenAIUsageVariantsAndStreamError(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(
		llmtest.Reply{Text: "x", UsageInChoices: true},
		llmtest.Reply{Text: "x", NoUsage: true},
		llmtest.Reply{Text: "x y", StreamError: "rate_limit_error", AfterChunks: 2, Header: map[string]string{"X-Extra": "1"}},
	)
	_, body := post(t, srv.URL()+"/chat/completions", chatBody)
	if !strings.Contains(body, `"finish_reason":"stop"}],"usage":{"prompt_tokens":10`) {
		t.Errorf("usage in choices: %s", body)
	}
	_, body = post(t, srv.URL()+"/chat/completions", chatBody)
	if strings.Contains(body, `"prompt_tokens"`) {
		t.Errorf("no usage: %s", body)
	}
	res, body := post(t, srv.URL()+"/chat/completions", chatBody)
	if res.Header.Get("X-Extra") != "1" || !strings.Contains(body, `data: {"error":{"message":`) || !strings.Contains(body, `"code":429`) ||
		strings.Contains(body, "[DONE]") {
		t.Errorf("stream error: %v %s", res.Header, body)
	}
}

func TestFormatNeutralViews(t *testing.T) {
	srv := llmtest.Start(t)
	post(t, srv.URL()+"/messages", messagesBody)
	post(t, srv.URL()+"/chat/completions", `{"model":"gpt","stream":true,"messages":[{"role":"system","content":"sys"},`+
		`{"role":"assistant","content":"","reasoning_content":"r","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},`+
		`{"role":"tool","tool_call_id":"c1","content":"res"}]}`)
	a, o := srv.Requests()[0], srv.Requests()[1]
	if a.Model() != "claude-x" || !a.Streaming() || a.SystemPrompt() != "be brief" ||
		fmt.Sprint(a.ToolResults()) != "[{x out true}]" || fmt.Sprint(a.Thoughts()) != "[{t s }]" {
		t.Errorf("anthropic views: %v %v %q %v %v", a.Model(), a.Streaming(), a.SystemPrompt(), a.ToolResults(), a.Thoughts())
	}
	if o.Model() != "gpt" || !o.Streaming() || o.SystemPrompt() != "sys" ||
		fmt.Sprint(o.ToolResults()) != "[{c1 res false}]" || fmt.Sprint(o.Thoughts()) != "[{r  }]" {
		t.Errorf("openai views: %v %v %q %v %v", o.Model(), o.Streaming(), o.SystemPrompt(), o.ToolResults(), o.Thoughts())
	}
}
