package llm_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iac-code/iac-code/llm"
)

// sseServer answers every chat completion with a two-chunk stream and
// [DONE]; hold keeps the response open that long after [DONE]; gate, when
// set, is called before answering. It counts the TCP connections it
// accepted.
func sseServer(t *testing.T, hold time.Duration, gate *func()) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gate != nil && *gate != nil {
			(*gate)()
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, delta := range []string{`{"content":"hi"},"finish_reason":null`, `{},"finish_reason":"stop"`} {
			fmt.Fprintf(w, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":%s}]}`+"\n\n", delta)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
		w.(http.Flusher).Flush()
		if hold > 0 {
			select {
			case <-time.After(hold):
			case <-r.Context().Done():
			}
		}
	}))
	hs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	hs.Start()
	t.Cleanup(hs.Close)
	t.Cleanup(hs.CloseClientConnections) // runs first: a held response ends at once
	return hs, &conns
}

func TestModelConnectionsAreReused(t *testing.T) {
	var gate func()
	hs, conns := sseServer(t, 0, &gate)
	p := newProvider(t, hs.URL)
	for range 5 {
		if evs, err := stream(t, p, userRequest("x")); err != nil || len(evs) == 0 {
			t.Fatalf("%v %v", evs, err)
		}
	}
	// (The transport takes a connection back in its own goroutine: a call
	// right after another may, rarely, dial before it has.)
	if n := conns.Load(); n > 2 {
		t.Fatalf("5 calls one after the other took %d connections, want 1", n)
	}
	// Concurrent calls keep a connection each for the next round (the
	// transport's default would keep 2). The server answers once all 8
	// are in, so each round holds 8 connections at once.
	round := func() {
		var arrived sync.WaitGroup
		arrived.Add(8)
		release := make(chan struct{})
		gate = func() { arrived.Done(); <-release }
		go func() { arrived.Wait(); close(release) }()
		streamAtOnce(t, p, 8)
	}
	round()
	if n := conns.Load(); n < 8 {
		t.Fatalf("8 concurrent calls on %d connections", n)
	}
	time.Sleep(20 * time.Millisecond) // the transport takes connections back in its goroutines
	before := conns.Load()
	round()
	if n := conns.Load() - before; n > 2 {
		t.Fatalf("a second round of 8 concurrent calls dialled %d new connections", n)
	}
}

// streamAtOnce makes n calls of p at once and waits for them.
func streamAtOnce(t *testing.T, p llm.Provider, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := stream(t, p, userRequest("x")); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// A server that keeps the response open after [DONE] costs the call at
// most a few milliseconds (and its connection).
func TestStreamEndDoesNotWaitForTheResponseEnd(t *testing.T) {
	hs, _ := sseServer(t, 3*time.Second, nil)
	p := newProvider(t, hs.URL)
	start := time.Now()
	if _, err := stream(t, p, userRequest("x")); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Fatalf("the call returned %v after [DONE]", took)
	}
}
