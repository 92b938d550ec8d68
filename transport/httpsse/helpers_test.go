package httpsse_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/transport/httpsse"
)

// touchTool is a writing tool: every call asks the client for permission.
type touchTool struct{}

func (touchTool) Name() string            { return "touch" }
func (touchTool) Description() string     { return "touch a file" }
func (touchTool) Schema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (touchTool) Kind() tools.Kind        { return tools.KindEdit }
func (touchTool) ReadOnly() bool          { return false }
func (touchTool) Prepare(_ *tools.Env, input json.RawMessage) (tools.Call, error) {
	return &tools.FuncCall{TitleText: "Touch " + string(input), RunFunc: func(context.Context, func(string)) tools.Result {
		return tools.Result{Output: "touched"}
	}}, nil
}

// syncBuffer collects log output for assertions.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is one edge on 127.0.0.1:<free port> over a real actor tree whose
// model is the fake OpenAI-compatible server.
type env struct {
	fake   *llmtest.Server
	srv    *actors.Server
	edge   *httpsse.Edge
	base   string
	addr   string
	cwd    string
	logs   *syncBuffer
	client *http.Client
	served chan error
}

func startEnv(cfg httpsse.Config, tweak ...func(*httpsse.Edge)) *env {
	e := &env{fake: llmtest.NewServer(), cwd: GinkgoT().TempDir(), logs: &syncBuffer{}, served: make(chan error, 1)}
	DeferCleanup(e.fake.Close)
	provider, err := llm.New(llm.Config{Provider: "openai_compatible", BaseURL: e.fake.URL(), APIKey: "k", Model: "m"})
	Expect(err).NotTo(HaveOccurred())
	log := zerolog.New(io.MultiWriter(GinkgoWriter, e.logs)).Level(zerolog.InfoLevel)
	home := GinkgoT().TempDir()
	st, err := store.New(home)
	Expect(err).NotTo(HaveOccurred())
	e.srv = actors.NewServer(actors.Deps{
		Config:   actors.Config{Home: home, LLM: llm.Config{APIKey: "k", Model: "m"}},
		Provider: provider,
		Tools:    tools.NewRegistry(touchTool{}),
		Store:    st,
		Log:      log,
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	e.addr = ln.Addr().String()
	e.base = "http://" + e.addr
	e.edge = httpsse.New(e.srv, cfg, log)
	for _, t := range tweak {
		t(e.edge)
	}
	go func() { e.served <- e.edge.Serve(ln) }()
	e.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	DeferCleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.edge.Shutdown(ctx)
		Eventually(e.served, 10*time.Second).Should(Receive())
		e.srv.Shutdown()
		e.client.CloseIdleConnections()
	})
	return e
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json() map[string]any {
	var m map[string]any
	ExpectWithOffset(1, json.Unmarshal(r.body, &m)).To(Succeed(), string(r.body))
	return m
}

// do sends one request; hdr alternates names and values.
func (e *env) do(method, path string, body io.Reader, hdr ...string) reply {
	req, err := http.NewRequest(method, e.base+path, body)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return e.roundTrip(req)
}

// roundTrip sends req and reads the whole reply.
func (e *env) roundTrip(req *http.Request) reply {
	resp, err := e.client.Do(req)
	ExpectWithOffset(2, err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	ExpectWithOffset(2, err).NotTo(HaveOccurred())
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// post sends a JSON body (string, []byte or any value to encode) with
// Content-Type: application/json plus hdr.
func (e *env) post(body any, hdr ...string) reply {
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		var err error
		b, err = json.Marshal(v)
		ExpectWithOffset(1, err).NotTo(HaveOccurred())
	}
	return e.do(http.MethodPost, "/acp", bytes.NewReader(b), append([]string{"Content-Type", "application/json"}, hdr...)...)
}

func rpc(id any, method string, params any) map[string]any {
	m := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
	if id != nil {
		m["id"] = id
	}
	return m
}

func (e *env) initialize(hdr ...string) string {
	r := e.post(rpc(1, "initialize", map[string]any{"protocolVersion": 1, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "test", "version": "1.0"}}), hdr...)
	ExpectWithOffset(1, r.status).To(Equal(http.StatusOK), string(r.body))
	id := r.header.Get("Acp-Connection-Id")
	ExpectWithOffset(1, id).NotTo(BeEmpty())
	return id
}

// send POSTs a message on a connection and expects 202.
func (e *env) send(conn string, msg map[string]any, hdr ...string) {
	r := e.post(msg, append([]string{"Acp-Connection-Id", conn}, hdr...)...)
	ExpectWithOffset(1, r.status).To(Equal(http.StatusAccepted), string(r.body))
	ExpectWithOffset(1, r.body).To(BeEmpty())
}

func (e *env) prompt(conn string, id any, sid, text string, hdr ...string) {
	e.send(conn, rpc(id, "session/prompt", map[string]any{"sessionId": sid,
		"prompt": []any{map[string]any{"type": "text", "text": text}}}), hdr...)
}

// sseEvent is one parsed event with its raw lines (comments excluded).
type sseEvent struct {
	lines []string
	event string
	data  string
	id    string
	msg   map[string]any
}

// sse reads one event stream in the background.
type sse struct {
	resp   *http.Response
	cancel context.CancelFunc
	events chan sseEvent
	pings  atomic.Int32
	eof    chan struct{}
	err    error
}

func (e *env) getStream(conn string, hdr ...string) (*http.Response, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/acp", nil)
	ExpectWithOffset(2, err).NotTo(HaveOccurred())
	if conn != "" {
		req.Header.Set("Acp-Connection-Id", conn)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	// A transport per stream: streams never share or pool connections.
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	ExpectWithOffset(2, err).NotTo(HaveOccurred())
	return resp, cancel
}

// stream opens GET /acp and expects a 200 event stream.
func (e *env) stream(conn string, hdr ...string) *sse {
	resp, cancel := e.getStream(conn, hdr...)
	ExpectWithOffset(1, resp.StatusCode).To(Equal(http.StatusOK))
	ExpectWithOffset(1, resp.Header.Get("Content-Type")).To(Equal("text/event-stream"))
	ExpectWithOffset(1, resp.Header.Get("Cache-Control")).To(Equal("no-cache"))
	s := &sse{resp: resp, cancel: cancel, events: make(chan sseEvent, 100_000), eof: make(chan struct{})}
	go s.read()
	DeferCleanup(s.close)
	return s
}

func (s *sse) read() {
	defer close(s.eof)
	defer close(s.events)
	br := bufio.NewReader(s.resp.Body)
	var ev sseEvent
	comment := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if !errors.Is(err, io.EOF) {
				s.err = err
			}
			return
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if len(ev.lines) > 0 {
				if ev.data != "" {
					_ = json.Unmarshal([]byte(ev.data), &ev.msg)
				}
				s.events <- ev
			} else if comment {
				s.pings.Add(1)
			}
			ev, comment = sseEvent{}, false
		case strings.HasPrefix(line, ":"):
			comment = true
		default:
			ev.lines = append(ev.lines, line)
			k, v, _ := strings.Cut(line, ": ")
			switch k {
			case "event":
				ev.event = v
			case "data":
				ev.data = v
			case "id":
				ev.id = v
			}
		}
	}
}

func (s *sse) close() {
	s.cancel()
	_ = s.resp.Body.Close()
}

// next returns the next event, failing after timeout.
func (s *sse) next() sseEvent {
	select {
	case ev, ok := <-s.events:
		ExpectWithOffset(1, ok).To(BeTrue(), "stream ended")
		return ev
	case <-time.After(10 * time.Second):
		Fail("no event within 10 s")
	}
	return sseEvent{}
}

// until collects events up to and including the first one whose message
// matches.
func (s *sse) until(match func(m map[string]any) bool) []sseEvent {
	var out []sseEvent
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				Fail("stream ended before the expected event")
			}
			out = append(out, ev)
			if match(ev.msg) {
				return out
			}
		case <-deadline:
			Fail("expected event not seen within 20 s")
		}
	}
}

// quiet asserts that no event arrives for d.
func (s *sse) quiet(d time.Duration) {
	select {
	case ev, ok := <-s.events:
		if ok {
			Fail("unexpected event: " + ev.data)
		}
	case <-time.After(d):
	}
}

// drain collects the events arriving within d.
func (s *sse) drain(d time.Duration) []sseEvent {
	var out []sseEvent
	deadline := time.After(d)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-deadline:
			return out
		}
	}
}

func (s *sse) waitEOF() {
	select {
	case <-s.eof:
	case <-time.After(10 * time.Second):
		Fail("stream did not end")
	}
}

func isResponse(id float64) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["method"] == nil && m["id"] == id }
}

func isMethod(method string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["method"] == method }
}

// newSession creates a session and reads its response from s.
func (e *env) newSession(conn string, s *sse, id float64, hdr ...string) string {
	e.send(conn, rpc(id, "session/new", map[string]any{"cwd": e.cwd}), hdr...)
	evs := s.until(isResponse(id))
	res := evs[len(evs)-1].msg["result"].(map[string]any)
	return res["sessionId"].(string)
}

// text concatenates the agent_message_chunk texts of events.
func text(evs []sseEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.msg["method"] != "session/update" {
			continue
		}
		u := ev.msg["params"].(map[string]any)["update"].(map[string]any)
		if u["sessionUpdate"] == "agent_message_chunk" {
			b.WriteString(u["content"].(map[string]any)["text"].(string))
		}
	}
	return b.String()
}

// rawRequest writes req on a fresh TCP connection and returns the parsed
// response (body read fully).
func (e *env) rawRequest(req string) (*http.Response, []byte) {
	c, err := net.Dial("tcp", e.addr)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	defer c.Close()
	// The server may answer (413) and close before the whole request is
	// written; the write then fails with a reset, and the answer is read.
	go func() { _, _ = c.Write([]byte(req)) }()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func (e *env) metrics() string {
	r := e.do(http.MethodGet, "/metrics", nil)
	ExpectWithOffset(1, r.status).To(Equal(http.StatusOK))
	return string(r.body)
}

// sessionWithoutStream creates a connection and a session, read through a
// stream that is then closed: the connection has no stream.
func (e *env) sessionWithoutStream() (conn, sid string) {
	conn = e.initialize()
	cs := e.stream(conn)
	sid = e.newSession(conn, cs, 2)
	cs.close()
	cs.waitEOF()
	Eventually(func() string { return e.metrics() }).Should(ContainSubstring("iaccode_http_streams 0"))
	return conn, sid
}

// rawStream opens conn's stream on a raw TCP connection that reads nothing
// (readBuffer > 0: with that receive buffer).
func (e *env) rawStream(conn string, readBuffer int) net.Conn {
	tcp, err := net.Dial("tcp", e.addr)
	Expect(err).NotTo(HaveOccurred())
	if readBuffer > 0 {
		Expect(tcp.(*net.TCPConn).SetReadBuffer(readBuffer)).To(Succeed())
	}
	_, err = tcp.Write([]byte("GET /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nAcp-Connection-Id: " + conn + "\r\n\r\n"))
	Expect(err).NotTo(HaveOccurred())
	Eventually(func() string { return e.metrics() }).Should(ContainSubstring("iaccode_http_streams 1"))
	return tcp
}
