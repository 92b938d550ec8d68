package llm_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
)

// A 429 with Retry-After, through New with a limit, pauses the key for
// every caller: another caller's request waits for the pause (and is told
// so) instead of hitting the provider meanwhile.
func TestLimit429PausesTheKeyForEveryone(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			srv := llmtest.Start(t)
			srv.Script(llmtest.Reply{Status: 429, RetryAfter: "1"}, llmtest.Reply{Text: "a"}, llmtest.Reply{Text: "b"})
			gate := llm.NewLocalGate(2)
			var paused []time.Duration
			cfg := f.cfg(srv.URL())
			cfg.Limit = &llm.Limit{Gate: gate, Paused: func(d time.Duration) { paused = append(paused, d) }}
			cfg.Retry = llm.RetryPolicy{BaseDelay: 10 * time.Millisecond}
			p, err := llm.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // alice meets the 429, retries after it
				defer wg.Done()
				if _, err := stream(t, p, userRequest("alice")); err != nil {
					t.Error(err)
				}
			}()
			for len(srv.Requests()) == 0 {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond) // the pause is recorded
			var notice llm.Wait
			ctx := llm.WithCaller(context.Background(), &llm.Caller{Person: "bob", Waiting: func(w llm.Wait) { notice = w }})
			var evs []llm.Event
			if err := p.Stream(ctx, userRequest("bob"), func(e llm.Event) { evs = append(evs, e) }); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if d := time.Since(start); d < 900*time.Millisecond {
				t.Errorf("bob's request went after %v, inside the 1 s pause", d)
			}
			if notice.PausedUntil.IsZero() {
				t.Errorf("bob was not told of the pause: %+v", notice)
			}
			if len(paused) != 1 || paused[0] != time.Second {
				t.Errorf("pauses = %v", paused)
			}
			if n := len(srv.Requests()); n != 3 {
				t.Errorf("requests = %d, want 3 (the 429, then one each)", n)
			}
		})
	}
}

// Without a caller in the context a limited provider still works (one
// anonymous person), and a cancelled wait returns at once.
func TestLimitCancelWhileWaiting(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "slow", Delay: 300 * time.Millisecond}, llmtest.Reply{Text: "x"})
	cfg := formats[0].cfg(srv.URL())
	cfg.Limit = &llm.Limit{Gate: llm.NewLocalGate(1)}
	p, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := stream(t, p, userRequest("first")); done <- err }()
	for len(srv.Requests()) == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	waiting := make(chan struct{})
	ctx = llm.WithCaller(ctx, &llm.Caller{Person: "bob", Waiting: func(llm.Wait) { close(waiting) }})
	errc := make(chan error, 1)
	go func() { errc <- p.Stream(ctx, userRequest("second"), func(llm.Event) {}) }()
	<-waiting
	cancel()
	select {
	case err := <-errc:
		if err != context.Canceled {
			t.Errorf("err = %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("a cancelled wait did not return")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("requests = %d: the cancelled one reached the model", n)
	}
}

// twoNoticeGate makes its caller wait in two steps (two requests ahead,
// then one), telling it each time, as a queue that moves does.
type twoNoticeGate struct{ step time.Duration }

func (g twoNoticeGate) Enter(_ context.Context, _, _ string, waiting func(llm.Wait)) (func(), error) {
	waiting(llm.Wait{Ahead: 2})
	time.Sleep(g.step)
	waiting(llm.Wait{Ahead: 1})
	time.Sleep(g.step)
	return func() {}, nil
}

func (twoNoticeGate) Pause(context.Context, string, time.Time) error { return nil }

// The time waited is counted from the first notice, not from the last.
func TestLimitWaitCountsFromTheFirstNotice(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "a"})
	const step = 100 * time.Millisecond
	var waited time.Duration
	cfg := formats[0].cfg(srv.URL())
	cfg.Limit = &llm.Limit{Gate: twoNoticeGate{step: step}, Waited: func(d time.Duration, _ bool) { waited = d }}
	p, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream(t, p, userRequest("alice")); err != nil {
		t.Fatal(err)
	}
	if waited < 2*step {
		t.Fatalf("waited %v, want at least %v (both steps of the wait)", waited, 2*step)
	}
}
