package llmtest_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/iac-code/iac-code/llm/llmtest"
)

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

const chatBody = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`

func TestDefaultReplyWireFormat(t *testing.T) {
	srv := llmtest.Start(t)
	res, body := post(t, srv.URL()+"/chat/completions", chatBody)
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("content-type %q", ct)
	}
	events := strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
	if events[len(events)-1] != "data: [DONE]" {
		t.Fatalf("last event %q", events[len(events)-1])
	}
	var content, finish string
	var usage map[string]any
	for _, e := range events[:len(events)-1] {
		var c struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage map[string]any `json:"usage"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(e, "data: ")), &c); err != nil {
			t.Fatalf("%q: %v", e, err)
		}
		if c.Object != "chat.completion.chunk" {
			t.Errorf("object %q", c.Object)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				content += *ch.Delta.Content
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	if content != "ok" || finish != "stop" || usage["total_tokens"] != 15.0 {
		t.Errorf("content %q finish %q usage %v", content, finish, usage)
	}
}

func TestControlEndpoints(t *testing.T) {
	srv := llmtest.Start(t)
	res, _ := post(t, srv.Root()+"/_script", `[{"text":"from json","delayMs":1},{"status":429,"retryAfter":"3"}]`)
	if res.StatusCode != http.StatusNoContent || srv.Pending() != 2 {
		t.Fatalf("script: %d, pending %d", res.StatusCode, srv.Pending())
	}
	if _, body := post(t, srv.URL()+"/chat/completions", chatBody); !strings.Contains(body, `"content":"json"`) {
		t.Errorf("scripted reply not streamed: %s", body)
	}
	res, body := post(t, srv.URL()+"/chat/completions", chatBody)
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "3" || !strings.Contains(body, `"code":"rate_limit_exceeded"`) {
		t.Errorf("error reply: %d %v %s", res.StatusCode, res.Header, body)
	}

	got, err := http.Get(srv.Root() + "/_requests")
	if err != nil {
		t.Fatal(err)
	}
	var reqs []llmtest.RecordedRequest
	_ = json.NewDecoder(got.Body).Decode(&reqs)
	got.Body.Close()
	if len(reqs) != 2 || reqs[0].Path != "/v1/chat/completions" || !bytes.Contains(reqs[0].Body, []byte(`"stream":true`)) {
		t.Errorf("requests = %+v", reqs)
	}
	if m := srv.Requests()[0].Chat.Messages; len(m) != 1 || m[0].Text() != "hi" {
		t.Errorf("decoded messages = %+v", m)
	}

	post(t, srv.Root()+"/_reset", "")
	if len(srv.Requests()) != 0 || srv.Pending() != 0 {
		t.Error("reset did not clear")
	}
}

func TestReplyJSONDelay(t *testing.T) {
	b, err := json.Marshal(llmtest.Reply{Text: "x", Delay: 1500 * time.Microsecond})
	if err != nil || !strings.Contains(string(b), `"delayMs":1.5`) {
		t.Fatalf("%s %v", b, err)
	}
	var r llmtest.Reply
	if err := json.Unmarshal(b, &r); err != nil || r.Delay != 1500*time.Microsecond || r.Text != "x" {
		t.Errorf("%+v %v", r, err)
	}
}

func TestDisconnectAndHang(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "a b c", Disconnect: true, AfterChunks: 2})
	res, err := http.Post(srv.URL()+"/chat/completions", "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err == nil || strings.Count(string(body), "data: ") != 2 {
		t.Errorf("want 2 chunks then a broken body, got err %v body %q", err, body)
	}

	// Close must not wait for a hanging reply.
	srv.Script(llmtest.Reply{Hang: true})
	go func() {
		if res, err := http.Post(srv.URL()+"/chat/completions", "application/json", strings.NewReader(chatBody)); err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}()
	for len(srv.Requests()) < 2 {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() {
		srv.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Fatal("Close blocked on a hanging reply")
	}
}

// A buffered answer is written in batches, and a scripted cut still comes
// after exactly the chunks it names, every one of them delivered.
func TestBufferedChunksAreWholeBeforeACut(t *testing.T) {
	srv := llmtest.Start(t)
	mark := func(i int) string { return "m" + strings.Repeat("x", i%7) }
	for _, c := range []struct {
		reply  llmtest.Reply
		chunks int
		broken bool
	}{
		{llmtest.Reply{Chunks: 5000, ChunkFunc: mark, Buffered: true}, 5000, false},
		{llmtest.Reply{Chunks: 5000, ChunkFunc: mark, Buffered: true, Disconnect: true, AfterChunks: 3000}, 3000, true},
	} {
		srv.Script(c.reply)
		res, err := http.Post(srv.URL()+"/chat/completions", "application/json", strings.NewReader(chatBody))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if (err != nil) != c.broken {
			t.Errorf("chunks %d: body error %v, want broken %v", c.chunks, err, c.broken)
		}
		// AfterChunks counts the role chunk that opens the stream too.
		got := strings.Count(string(body), `"delta":{"content":"m`)
		if c.broken {
			got = strings.Count(string(body), "data: ")
		}
		if got != c.chunks {
			t.Errorf("got %d chunks, want %d", got, c.chunks)
		}
		if done := strings.HasSuffix(string(body), "data: [DONE]\n\n"); done == c.broken {
			t.Errorf("chunks %d: [DONE] at the end %v", c.chunks, done)
		}
	}
}

// A responder answers each request from its content and counts the
// requests of each conversation in flight: two requests of one key at once
// are seen (MaxConcurrentFor 2), of two keys they are not.
func TestResponderPerConversation(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "from the queue"})
	srv.SetResponder(func(req llmtest.RecordedRequest) (string, llmtest.Reply, bool) {
		text := req.Chat.Messages[0].Text()
		if !strings.HasPrefix(text, "conv-") {
			return "", llmtest.Reply{}, false
		}
		return text, llmtest.Reply{Text: "reply to " + text, Split: 3, Delay: 50 * time.Millisecond}, true
	})
	body := func(text string) string {
		return `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + text + `"}]}`
	}
	done := make(chan string, 3)
	for _, text := range []string{"conv-a", "conv-a", "conv-b"} {
		go func() {
			_, b := post(t, srv.URL()+"/chat/completions", body(text))
			done <- b
		}()
	}
	for range 3 {
		if b := <-done; !strings.Contains(b, `"content":"reply`) {
			t.Errorf("a responder's reply: %q", b)
		}
	}
	if _, b := post(t, srv.URL()+"/chat/completions", body("other")); !strings.Contains(b, "queue") {
		t.Errorf("a request the responder leaves takes the queue: %q", b)
	}
	if a, b := srv.MaxConcurrentFor("conv-a"), srv.MaxConcurrentFor("conv-b"); a != 2 || b != 1 {
		t.Errorf("MaxConcurrentFor conv-a %d (want 2), conv-b %d (want 1)", a, b)
	}
	keys := map[string]int{}
	for _, r := range srv.Requests() {
		keys[r.Key]++
	}
	if keys["conv-a"] != 2 || keys["conv-b"] != 1 || keys[""] != 1 {
		t.Errorf("recorded keys %v", keys)
	}
}
