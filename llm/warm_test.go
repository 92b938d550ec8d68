package llm_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iac-code/iac-code/llm"
)

// connLog is what a model server saw of its connections: the client ends
// accepted, in order, and the client end of each request.
type connLog struct {
	mu       sync.Mutex
	accepted []string
	closed   int
	requests []string
}

func (l *connLog) snapshot() (accepted []string, closed int, requests []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.accepted...), l.closed, append([]string(nil), l.requests...)
}

// loggingServer is sseServer's model that also logs connections and
// requests; closeFirst closes the first connection as soon as it is
// accepted (a provider that drops idle connections).
func loggingServer(t *testing.T, closeFirst bool) (*httptest.Server, *connLog) {
	t.Helper()
	hs, _ := sseServer(t, 0, nil)
	log := &connLog{}
	inner := hs.Config.Handler
	hs.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.mu.Lock()
		log.requests = append(log.requests, r.RemoteAddr)
		log.mu.Unlock()
		inner.ServeHTTP(w, r)
	})
	counted := hs.Config.ConnState
	hs.Config.ConnState = func(c net.Conn, s http.ConnState) {
		counted(c, s)
		log.mu.Lock()
		defer log.mu.Unlock()
		switch s {
		case http.StateNew:
			log.accepted = append(log.accepted, c.RemoteAddr().String())
			if closeFirst && len(log.accepted) == 1 {
				c.Close()
			}
		case http.StateClosed:
			log.closed++
		}
	}
	return hs, log
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
	}
}

func warm(t *testing.T, p llm.Provider) {
	t.Helper()
	w, ok := p.(llm.Warmer)
	if !ok {
		t.Fatalf("%T does not warm", p)
	}
	w.Warm()
}

// A session's first call goes out on the connection dialled when the
// session opened: the model host sees no new connection at the prompt.
func TestWarmConnectionCarriesTheFirstCall(t *testing.T) {
	for _, name := range []string{"openai_compatible", "anthropic"} {
		t.Run(name, func(t *testing.T) {
			hs, log := loggingServer(t, false)
			p := newProviderOf(t, name, hs.URL)
			warm(t, p)
			eventually(t, "the connection dialled ahead", func() bool { a, _, _ := log.snapshot(); return len(a) == 1 })
			_, _ = stream(t, p, userRequest("x")) // the answer is OpenAI's: only the connection matters here
			accepted, _, requests := log.snapshot()
			if len(accepted) != 1 || len(requests) != 1 || requests[0] != accepted[0] {
				t.Fatalf("accepted %v, requests from %v: want the one request on the connection dialled ahead", accepted, requests)
			}
		})
	}
}

// One connection per session opened and not yet calling; none while the
// transport already has idle connections for them.
func TestWarmDialsOnlyWhatSessionsWillUse(t *testing.T) {
	hs, log := loggingServer(t, false)
	p := newProvider(t, hs.URL)
	for range 3 {
		warm(t, p)
	}
	eventually(t, "three connections dialled ahead", func() bool { a, _, _ := log.snapshot(); return len(a) == 3 })
	streamAtOnce(t, p, 3)
	if a, _, r := log.snapshot(); len(a) != 3 || len(r) != 3 {
		t.Fatalf("3 sessions' calls: %d connections, %d requests; want 3 and 3", len(a), len(r))
	}
	// The transport keeps the three for the next calls: a session opened
	// now finds one idle and dials nothing.
	time.Sleep(50 * time.Millisecond)
	warm(t, p)
	time.Sleep(100 * time.Millisecond)
	if a, _, _ := log.snapshot(); len(a) != 3 {
		t.Fatalf("a session opened beside 3 idle connections dialled: %d connections", len(a))
	}
	if _, err := stream(t, p, userRequest("x")); err != nil {
		t.Fatal(err)
	}
	if a, _, _ := log.snapshot(); len(a) != 3 {
		t.Fatalf("%d connections after the fourth call, want 3", len(a))
	}
}

// A connection the provider closed while it waited is not used: the call
// dials a new one and succeeds (the transport would not retry a request
// that failed on a connection it had just been given).
func TestWarmConnectionClosedByTheProviderIsNotUsed(t *testing.T) {
	hs, log := loggingServer(t, true)
	p := newProvider(t, hs.URL)
	warm(t, p)
	eventually(t, "the provider closed the connection dialled ahead", func() bool { _, c, _ := log.snapshot(); return c == 1 })
	time.Sleep(20 * time.Millisecond) // its FIN crosses the loopback
	if _, err := stream(t, p, userRequest("x")); err != nil {
		t.Fatalf("call after the provider closed the warm connection: %v", err)
	}
	accepted, _, requests := log.snapshot()
	if len(accepted) != 2 || len(requests) != 1 || requests[0] != accepted[1] {
		t.Fatalf("accepted %v, requests from %v: want the request on a second connection", accepted, requests)
	}
}

// Without credentials the call fails before any request: nothing is
// dialled for it.
func TestWarmWithoutCredentialsDialsNothing(t *testing.T) {
	var conns atomic.Int32
	hs := httptest.NewUnstartedServer(http.NotFoundHandler())
	hs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	hs.Start()
	t.Cleanup(hs.Close)
	p, err := llm.New(llm.Config{Provider: "openai_compatible", BaseURL: hs.URL, Model: "m", Retry: noRetry})
	if err != nil {
		t.Fatal(err)
	}
	warm(t, p)
	time.Sleep(100 * time.Millisecond)
	if n := conns.Load(); n != 0 {
		t.Fatalf("%d connections dialled for a provider without credentials", n)
	}
}

func newProviderOf(t *testing.T, name, baseURL string) llm.Provider {
	t.Helper()
	if name == "anthropic" {
		return newAnthropic(t, baseURL)
	}
	return newProvider(t, baseURL)
}
