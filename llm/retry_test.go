package llm_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
)

// sleeps records the retry waits instead of waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// format runs a test against both wire formats.
type format struct {
	name string
	cfg  func(url string) llm.Config
}

var formats = []format{
	{"openai", func(url string) llm.Config {
		return llm.Config{Provider: "openai_compatible", BaseURL: url, APIKey: testKey, Model: "m"}
	}},
	{"anthropic", func(url string) llm.Config {
		return llm.Config{Provider: "anthropic_compatible", BaseURL: url, APIKey: testKey, Model: "m"}
	}},
}

// retrying builds a provider through New (so with the default wrapper) whose
// waits are recorded; jitter 0 makes each wait half the backoff step.
func retrying(t *testing.T, f format, url string, jitter float64) (llm.Provider, *sleeps) {
	t.Helper()
	s := &sleeps{}
	cfg := f.cfg(url)
	cfg.Retry = llm.RetryPolicy{Sleep: s.sleep, Jitter: func() float64 { return jitter }}
	p, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, s
}

func TestRetry429ThenSuccess(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			srv := llmtest.Start(t)
			srv.Script(llmtest.Reply{Status: 429, RetryAfter: "3"}, llmtest.Reply{Text: "fine now"})
			p, s := retrying(t, f, srv.URL(), 0)
			evs, err := stream(t, p, userRequest("x"))
			if err != nil {
				t.Fatal(err)
			}
			if sum := summarize(t, evs); sum.text != "fine now" || sum.stop != llm.StopEndTurn {
				t.Errorf("summary %+v", sum)
			}
			// One retry, after the server's Retry-After (longer than the 0.5 s backoff).
			if got := s.all(); fmt.Sprint(got) != "[3s]" {
				t.Errorf("waits = %v, want [3s]", got)
			}
			if n := len(srv.Requests()); n != 2 {
				t.Errorf("requests = %d", n)
			}
		})
	}
}

func TestRetryAfterForms(t *testing.T) {
	date := time.Now().Add(10 * time.Second).UTC().Format(http.TimeFormat)
	cases := []struct {
		reply    llmtest.Reply
		min, max time.Duration
	}{
		{llmtest.Reply{Status: 429, Header: map[string]string{"retry-after-ms": "1500"}}, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{llmtest.Reply{Status: 503, RetryAfter: date}, 8 * time.Second, 10 * time.Second},
		// Shorter than the backoff: the backoff wins.
		{llmtest.Reply{Status: 503, RetryAfter: "0.1"}, 500 * time.Millisecond, 500 * time.Millisecond},
	}
	for _, c := range cases {
		srv := llmtest.Start(t)
		srv.Script(c.reply, llmtest.Reply{Text: "ok"})
		p, s := retrying(t, formats[0], srv.URL(), 0)
		if _, err := stream(t, p, userRequest("x")); err != nil {
			t.Fatal(err)
		}
		if got := s.all(); len(got) != 1 || got[0] < c.min || got[0] > c.max {
			t.Errorf("%+v: waits = %v, want one in [%v, %v]", c.reply, got, c.min, c.max)
		}
	}
}

func TestRetryAfterTooLongFailsAtOnce(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Status: 429, RetryAfter: "3600", ErrorMessage: "daily quota exhausted"})
	p, s := retrying(t, formats[1], srv.URL(), 0)
	_, err := stream(t, p, userRequest("x"))
	var apiErr *llm.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 429 || !strings.Contains(err.Error(), "daily quota exhausted") {
		t.Fatalf("err = %v", err)
	}
	if len(s.all()) != 0 || len(srv.Requests()) != 1 {
		t.Errorf("waits %v, %d requests", s.all(), len(srv.Requests()))
	}
}

func TestRetry500FiveTimesThenError(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			srv := llmtest.Start(t)
			srv.SetDefault(llmtest.Reply{Status: 500, ErrorMessage: "boom"})
			p, s := retrying(t, f, srv.URL(), 0)
			var n int
			_, err := stream(t, p, userRequest("x"))
			var apiErr *llm.APIError
			var retryErr *llm.RetryError
			if !errors.As(err, &apiErr) || apiErr.Status != 500 || !errors.As(err, &retryErr) || retryErr.Attempts != 5 {
				t.Fatalf("err = %v", err)
			}
			if !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "5 attempts") {
				t.Errorf("message %q", err.Error())
			}
			n = len(srv.Requests())
			if n != 5 {
				t.Errorf("requests = %d, want 5", n)
			}
			// Exponential: 1 s, 2 s, 4 s, 8 s, each jittered down to half.
			if got := s.all(); fmt.Sprint(got) != "[500ms 1s 2s 4s]" {
				t.Errorf("waits = %v", got)
			}
		})
	}
}

func TestRetryBackoffCapAndJitter(t *testing.T) {
	srv := llmtest.Start(t)
	srv.SetDefault(llmtest.Reply{Status: 503})
	s := &sleeps{}
	cfg := formats[0].cfg(srv.URL())
	cfg.Retry = llm.RetryPolicy{Attempts: 9, Sleep: s.sleep, Jitter: func() float64 { return 0.999999 }}
	p, _ := llm.New(cfg)
	if _, err := stream(t, p, userRequest("x")); err == nil {
		t.Fatal("want an error")
	}
	got := s.all()
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 32 * time.Second, 32 * time.Second}
	if len(got) != len(want) {
		t.Fatalf("waits = %v", got)
	}
	for i := range want {
		if got[i] > want[i] || got[i] < want[i]-time.Millisecond {
			t.Errorf("wait %d = %v, want ~%v", i, got[i], want[i])
		}
	}
}

func TestRetryNotForAuthOrBadRequest(t *testing.T) {
	for _, status := range []int{400, 401, 403, 404} {
		srv := llmtest.Start(t)
		srv.SetDefault(llmtest.Reply{Status: status})
		p, s := retrying(t, formats[1], srv.URL(), 0)
		_, err := stream(t, p, userRequest("x"))
		if err == nil || len(srv.Requests()) != 1 || len(s.all()) != 0 {
			t.Errorf("%d: err %v, %d requests", status, err, len(srv.Requests()))
		}
		if (status == 401 || status == 403) != llm.IsAuthError(err) {
			t.Errorf("%d: IsAuthError = %v", status, llm.IsAuthError(err))
		}
	}
}

func TestRetryAfterDisconnectBeforeOutput(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			srv := llmtest.Start(t)
			// The first attempt dies after its opening chunk, before any text.
			srv.Script(llmtest.Reply{Text: "lost", Disconnect: true, AfterChunks: 1}, llmtest.Reply{Text: "whole answer"})
			p, s := retrying(t, f, srv.URL(), 0)
			evs, err := stream(t, p, userRequest("x"))
			if err != nil {
				t.Fatal(err)
			}
			if sum := summarize(t, evs); sum.text != "whole answer" {
				t.Errorf("text %q", sum.text)
			}
			if len(s.all()) != 1 {
				t.Errorf("waits %v", s.all())
			}
		})
	}
}

func TestNoRetryAfterVisibleOutput(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			srv := llmtest.Start(t)
			srv.Script(llmtest.Reply{Text: "one two three", Disconnect: true, AfterChunks: 2}, llmtest.Reply{Text: "never"})
			p, s := retrying(t, f, srv.URL(), 0)
			evs, err := stream(t, p, userRequest("x"))
			if !errors.Is(err, llm.ErrStreamInterrupted) {
				t.Fatalf("err = %v", err)
			}
			var retryErr *llm.RetryError
			if errors.As(err, &retryErr) {
				t.Errorf("a first-attempt failure is not a RetryError: %v", err)
			}
			if sum := summarize(t, evs); sum.text != "one " {
				t.Errorf("text %q: streamed output must not repeat", sum.text)
			}
			if len(s.all()) != 0 || len(srv.Requests()) != 1 {
				t.Errorf("waits %v, %d requests", s.all(), len(srv.Requests()))
			}
		})
	}
}

func TestRetryMidStreamErrorEventBeforeOutput(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "x", StreamError: "overloaded_error", AfterChunks: 1}, llmtest.Reply{Text: "ok"})
	p, s := retrying(t, formats[1], srv.URL(), 0)
	evs, err := stream(t, p, userRequest("x"))
	if err != nil || summarize(t, evs).text != "ok" || len(s.all()) != 1 {
		t.Errorf("err %v, waits %v", err, s.all())
	}
}

// Events the client does not see (here a redacted thinking block) are held
// back, so a failed attempt leaves nothing behind.
func TestRetryDropsHeldEventsOfFailedAttempt(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(
		llmtest.Reply{RedactedThinking: []string{"stale"}, Text: "x", Disconnect: true, AfterChunks: 1},
		llmtest.Reply{RedactedThinking: []string{"fresh"}, Text: "ok"},
	)
	p, _ := retrying(t, formats[1], srv.URL(), 0)
	evs, err := stream(t, p, userRequest("x"))
	if err != nil {
		t.Fatal(err)
	}
	var redacted []string
	for _, e := range evs {
		if e.Type == llm.EventRedactedThinking {
			redacted = append(redacted, e.Text)
		}
	}
	if fmt.Sprint(redacted) != "[fresh]" {
		t.Errorf("redacted = %v", redacted)
	}
}

func TestRetryIdleStream(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "a", Hang: true, AfterChunks: 1}, llmtest.Reply{Text: "ok"})
	s := &sleeps{}
	cfg := formats[0].cfg(srv.URL())
	cfg.Retry = llm.RetryPolicy{IdleTimeout: 150 * time.Millisecond, Sleep: s.sleep}
	p, _ := llm.New(cfg)
	evs, err := stream(t, p, userRequest("x"))
	if err != nil || summarize(t, evs).text != "ok" || len(s.all()) != 1 {
		t.Errorf("err %v, waits %v", err, s.all())
	}
}

// A stream slower in total than the idle timeout, but never silent that
// long, is not cut.
func TestIdleTimeoutCountsSilenceNotDuration(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Chunks: 8, ChunkText: "x", Delay: 40 * time.Millisecond})
	s := &sleeps{}
	cfg := formats[0].cfg(srv.URL())
	cfg.Retry = llm.RetryPolicy{IdleTimeout: 120 * time.Millisecond, Sleep: s.sleep}
	p, _ := llm.New(cfg)
	evs, err := stream(t, p, userRequest("x"))
	if err != nil || summarize(t, evs).text != "xxxxxxxx" || len(s.all()) != 0 {
		t.Errorf("err %v, text %q, waits %v", err, summarize(t, evs).text, s.all())
	}
}

func TestRetryCancelDuringBackoff(t *testing.T) {
	srv := llmtest.Start(t)
	srv.SetDefault(llmtest.Reply{Status: 503})
	cfg := formats[1].cfg(srv.URL())
	cfg.Retry = llm.RetryPolicy{BaseDelay: time.Hour, MaxDelay: time.Hour}
	p, _ := llm.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Stream(ctx, userRequest("x"), func(llm.Event) {}) }()
	for len(srv.Requests()) == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stream did not return after cancel")
	}
}

func TestRetryConnectionRefused(t *testing.T) {
	s := &sleeps{}
	cfg := formats[0].cfg("http://127.0.0.1:1/v1")
	cfg.Retry = llm.RetryPolicy{Attempts: 3, Sleep: s.sleep}
	p, _ := llm.New(cfg)
	err := p.Stream(context.Background(), userRequest("x"), func(llm.Event) {})
	var retryErr *llm.RetryError
	if !errors.As(err, &retryErr) || retryErr.Attempts != 3 || len(s.all()) != 2 {
		t.Errorf("err = %v, waits %v", err, s.all())
	}
}

func TestRetryOnRetryHook(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Status: 502}, llmtest.Reply{Status: 429}, llmtest.Reply{Text: "ok"})
	var infos []llm.RetryInfo
	cfg := formats[0].cfg(srv.URL())
	cfg.Retry = llm.RetryPolicy{
		Sleep:   func(context.Context, time.Duration) error { return nil },
		OnRetry: func(i llm.RetryInfo) { infos = append(infos, i) },
	}
	p, _ := llm.New(cfg)
	if _, err := stream(t, p, userRequest("x")); err != nil {
		t.Fatal(err)
	}
	var apiErr *llm.APIError
	if len(infos) != 2 || infos[0].Attempt != 1 || infos[1].Attempt != 2 ||
		!errors.As(infos[1].Err, &apiErr) || apiErr.Status != 429 {
		t.Errorf("infos = %+v", infos)
	}
}

func TestIsRetryable(t *testing.T) {
	yes := []error{
		&llm.APIError{Status: 408}, &llm.APIError{Status: 409}, &llm.APIError{Status: 429},
		&llm.APIError{Status: 500}, &llm.APIError{Status: 529},
		fmt.Errorf("x: %w", llm.ErrStreamInterrupted),
	}
	no := []error{
		nil, context.Canceled, context.DeadlineExceeded, llm.ErrNoCredentials,
		&llm.APIError{Status: 400}, &llm.APIError{Status: 401}, &llm.APIError{Status: 404},
		errors.New("no model configured"),
	}
	for _, e := range yes {
		if !llm.IsRetryable(e) {
			t.Errorf("IsRetryable(%v) = false", e)
		}
	}
	for _, e := range no {
		if llm.IsRetryable(e) {
			t.Errorf("IsRetryable(%v) = true", e)
		}
	}
}

// A provider registered under its own key is wrapped once, even when its
// factory calls New (as the e2e chaos provider does).
func TestNewWrapsRegisteredProviderOnce(t *testing.T) {
	llm.Register("test_wrapping", func(cfg llm.Config) (llm.Provider, error) {
		cfg.Provider = "openai_compatible"
		return llm.New(cfg)
	})
	srv := llmtest.Start(t)
	srv.SetDefault(llmtest.Reply{Status: 500})
	s := &sleeps{}
	p, err := llm.New(llm.Config{Provider: "test_wrapping", BaseURL: srv.URL(), APIKey: "k", Model: "m",
		Retry: llm.RetryPolicy{Attempts: 3, Sleep: s.sleep}})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = stream(t, p, userRequest("x"))
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("requests = %d, want 3", n)
	}
}
