// Package llmtest is a scripted fake model server for tests, speaking both
// the OpenAI Chat Completions and the Anthropic Messages streaming formats.
// It is a real HTTP server on 127.0.0.1 that streams the same bytes those
// APIs do (data: {chunk}\n\n ... data: [DONE]\n\n for POST …/chat/completions;
// event: message_start … event: message_stop for POST …/messages), so
// providers are tested over their real wire protocol. One queue of replies
// serves both: each model request consumes one Reply, in the format the
// request came in.
//
//	srv := llmtest.Start(t)                      // or NewServer() + Close()
//	srv.Script(llmtest.Reply{Text: "hello"})     // one reply per POST
//	cfg.BaseURL = srv.URL()                      // ends in /v1 (the Anthropic
//	                                             // provider accepts it too)
//	... srv.Requests()[0].Chat.Messages ...      // or .Anthropic.Messages
//
// Other processes script it over HTTP: POST /_script with a JSON array of
// replies (or one reply) appends to the queue, GET /_requests returns the
// recorded requests, POST /_reset clears both.
package llmtest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Server is the fake. It is safe for concurrent use.
type Server struct {
	hs        *httptest.Server
	done      chan struct{}
	closeOnce sync.Once
	seq       atomic.Int64
	// inFlight counts the model requests being answered; peak is its
	// highest value (MaxConcurrent).
	inFlight, peak atomic.Int64

	mu       sync.Mutex
	queue    []Reply
	def      Reply
	requests []RecordedRequest
	// respond, when set, answers each model request from the request
	// itself (SetResponder); keyed counts the requests of each of its keys
	// in flight and their peak.
	respond Responder
	keyed   map[string]*[2]int64
}

// Request formats.
const (
	FormatOpenAI    = "openai"
	FormatAnthropic = "anthropic"
)

// NewServer starts a fake on 127.0.0.1. Call Close when done.
func NewServer() *Server {
	s := &Server{done: make(chan struct{}), def: Reply{Text: "ok"}}
	s.hs = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	return s
}

// Start is NewServer closed by tb.Cleanup.
func Start(tb testing.TB) *Server {
	s := NewServer()
	tb.Cleanup(s.Close)
	return s
}

// URL is the API base URL, ending in /v1 (POST {URL}/chat/completions,
// POST {URL}/messages).
func (s *Server) URL() string { return s.hs.URL + "/v1" }

// Root is the server URL without /v1, where the /_script, /_requests and
// /_reset control endpoints live.
func (s *Server) Root() string { return s.hs.URL }

// Close unblocks hanging replies and stops the server.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.hs.CloseClientConnections()
		s.hs.Close()
	})
}

// Script appends replies to the queue; each model request consumes one.
func (s *Server) Script(replies ...Reply) {
	s.mu.Lock()
	s.queue = append(s.queue, replies...)
	s.mu.Unlock()
}

// SetDefault sets the reply used when the queue is empty (initially "ok").
func (s *Server) SetDefault(r Reply) {
	s.mu.Lock()
	s.def = r
	s.mu.Unlock()
}

// Pending is the number of scripted replies not consumed yet.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Requests returns a copy of the model requests received so far.
func (s *Server) Requests() []RecordedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.requests {
		s.requests[i].decode()
	}
	return append([]RecordedRequest(nil), s.requests...)
}

// MaxConcurrent is the highest number of model requests the server was
// answering at once.
func (s *Server) MaxConcurrent() int64 { return s.peak.Load() }

// enter counts a model request in flight until the returned func runs.
func (s *Server) enter() func() {
	n := s.inFlight.Add(1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	return func() { s.inFlight.Add(-1) }
}

// Responder picks the reply to one model request from the request itself
// (decoded), so concurrent conversations each get their own script and a
// request asked again (a reply cut midway) gets the same answer. key names
// the conversation (MaxConcurrentFor, RecordedRequest.Key); ok false leaves
// the request to the queue.
type Responder func(req RecordedRequest) (key string, reply Reply, ok bool)

// SetResponder sets the responder (nil: the queue alone).
func (s *Server) SetResponder(f Responder) {
	s.mu.Lock()
	s.respond = f
	s.mu.Unlock()
}

// MaxConcurrentFor is the highest number of model requests of key (named
// by the responder) the server was answering at once: above 1, two
// requests of one conversation overlapped.
func (s *Server) MaxConcurrentFor(key string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.keyed[key]; c != nil {
		return c[1]
	}
	return 0
}

// enterKey counts a request of key in flight until the returned func runs.
func (s *Server) enterKey(key string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keyed == nil {
		s.keyed = map[string]*[2]int64{}
	}
	c := s.keyed[key]
	if c == nil {
		c = new([2]int64)
		s.keyed[key] = c
	}
	c[0]++
	c[1] = max(c[1], c[0])
	return func() {
		s.mu.Lock()
		c[0]--
		s.mu.Unlock()
	}
}

// Reset clears the queue and the recorded requests (not the default reply).
func (s *Server) Reset() {
	s.mu.Lock()
	s.queue = nil
	s.requests = nil
	s.mu.Unlock()
}

func (s *Server) next() Reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return s.def
	}
	r := s.queue[0]
	s.queue[0] = Reply{}
	s.queue = s.queue[1:]
	return r
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/_script" && r.Method == http.MethodPost:
		s.handleScript(w, r)
	case r.URL.Path == "/_requests" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Requests())
	case r.URL.Path == "/_reset" && r.Method == http.MethodPost:
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	case strings.HasSuffix(r.URL.Path, "/chat/completions") && r.Method == http.MethodPost:
		defer s.enter()()
		s.handleChat(w, r)
	case strings.HasSuffix(r.URL.Path, "/messages") && r.Method == http.MethodPost:
		defer s.enter()()
		s.handleMessages(w, r)
	default:
		writeError(w, &Reply{Status: http.StatusNotFound, ErrorMessage: "llmtest: unknown route " + r.Method + " " + r.URL.Path})
	}
}

func (s *Server) handleScript(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var replies []Reply
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '{' {
		replies = make([]Reply, 1)
		err = json.Unmarshal(t, &replies[0])
	} else {
		err = json.Unmarshal(body, &replies)
	}
	if err != nil {
		http.Error(w, "llmtest: bad script: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.Script(replies...)
	w.WriteHeader(http.StatusNoContent)
}
