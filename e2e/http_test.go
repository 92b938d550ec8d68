package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// httpAgent is the built binary serving `acp --transport http` on a free
// loopback port, driven with a raw HTTP client.
type httpAgent struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	base   string
	token  string
	check  *wireChecker
	client *http.Client
	exited chan error
}

func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func startHTTPAgent(env []string, token string) *httpAgent {
	return startHTTPAgentLimited(env, token, 0)
}

// startHTTPAgentLimited starts the HTTP server with its descriptor limit
// lowered to nofile (0: unchanged), on a port the server picks itself: a
// port found free beforehand may be taken by any outgoing connection before
// the server binds it.
func startHTTPAgentLimited(env []string, token string, nofile int) *httpAgent {
	return startHTTPAgentCmd(serverCmd(nofile, "acp", "--transport", "http", "--port", "0"), env, token, "0")
}

// startHTTPAgentCmd starts cmd, an HTTP server listening on 127.0.0.1:port
// (port "0": the one its "listening" log line names), and waits for its
// /health (in a temp dir unless cmd.Dir is set). A server that exits while
// starting fails the spec at once, with its stderr.
func startHTTPAgentCmd(cmd *exec.Cmd, env []string, token, port string) *httpAgent {
	if token != "" {
		env = append(env, "IACCODE_ACP_HTTP_TOKEN="+token)
	}
	cmd.Env = env
	if cmd.Dir == "" {
		cmd.Dir = GinkgoT().TempDir()
	}
	a := &httpAgent{cmd: cmd, stderr: &syncBuffer{}, base: "http://127.0.0.1:" + port, token: token,
		check: newWireChecker(schemaV1), exited: make(chan error, 1),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: true}}}
	cmd.Stdout = GinkgoWriter
	cmd.Stderr = a.stderr
	Expect(cmd.Start()).To(Succeed())
	go func() { a.exited <- cmd.Wait() }()
	DeferCleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-a.exited
		}
		a.client.CloseIdleConnections()
	})
	if port == "0" {
		var addr string
		Eventually(func() bool {
			a.expectRunning()
			addr = listenAddr(a.stderr.String())
			return addr != ""
		}, 20*time.Second, 20*time.Millisecond).Should(BeTrue(), "no listening line; stderr:\n%s", a.stderr)
		a.base = "http://" + addr
	}
	Eventually(func() int {
		a.expectRunning()
		req, _ := http.NewRequest(http.MethodGet, a.base+"/health", nil)
		a.auth(req)
		resp, err := a.client.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}, 20*time.Second, 50*time.Millisecond).Should(Equal(http.StatusOK), "server did not come up; stderr:\n%s", a.stderr)
	return a
}

// expectRunning fails the spec, with the server's stderr, if it has exited.
func (a *httpAgent) expectRunning() {
	select {
	case err := <-a.exited:
		a.exited <- err // for whoever waits on it next
		StopTrying(fmt.Sprintf("the server exited while starting (%v); stderr:\n%s", err, a.stderr)).Now()
	default:
	}
}

// listenAddr is the address of the server's "listening" log line in stderr.
func listenAddr(stderr string) string {
	for _, line := range strings.Split(stderr, "\n") {
		var rec struct{ Message, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "listening" && rec.Addr != "" {
			return rec.Addr
		}
	}
	return ""
}

func (a *httpAgent) auth(req *http.Request) {
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
}

type httpReply struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request; hdr alternates names and values.
func (a *httpAgent) do(method string, body []byte, hdr ...string) httpReply {
	req, err := http.NewRequest(method, a.base+"/acp", bytes.NewReader(body))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	a.auth(req)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		a.check.ClientSent(body)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := a.client.Do(req)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return httpReply{status: resp.StatusCode, header: resp.Header, body: b}
}

func (a *httpAgent) post(conn string, msg any) httpReply {
	b, err := json.Marshal(msg)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	if conn == "" {
		return a.do(http.MethodPost, b)
	}
	return a.do(http.MethodPost, b, "Acp-Connection-Id", conn)
}

// accepted POSTs a message and expects 202 with an empty body.
func (a *httpAgent) accepted(conn string, msg any) {
	r := a.post(conn, msg)
	ExpectWithOffset(1, r.status).To(Equal(http.StatusAccepted), string(r.body))
	ExpectWithOffset(1, r.body).To(BeEmpty())
}

func jrpc(id any, method string, params any) map[string]any {
	m := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
	if id != nil {
		m["id"] = id
	}
	return m
}

// sseEvent is one event of a stream: its raw lines and the decoded message.
type sseEvent struct {
	lines []string
	id    string
	msg   map[string]any
}

// sseStream reads GET /acp in the background; every data payload is
// schema-checked.
type sseStream struct {
	resp   *http.Response
	cancel context.CancelFunc
	events chan sseEvent
	eof    chan struct{}
}

// stream opens GET /acp for conn; hdr alternates names and values of more
// headers (Last-Event-ID, Acp-Session-Id).
func (a *httpAgent) stream(conn string, hdr ...string) *sseStream {
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/acp", nil)
	Expect(err).NotTo(HaveOccurred())
	a.auth(req)
	req.Header.Set("Acp-Connection-Id", conn)
	req.Header.Set("Accept", "*/*") // as curl sends it
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	Expect(err).NotTo(HaveOccurred())
	Expect(resp.StatusCode).To(Equal(http.StatusOK))
	Expect(resp.Header.Get("Content-Type")).To(Equal("text/event-stream"))
	s := &sseStream{resp: resp, cancel: cancel, events: make(chan sseEvent, 10_000), eof: make(chan struct{})}
	go func() {
		defer close(s.eof)
		defer close(s.events)
		br := bufio.NewReader(resp.Body)
		var ev sseEvent
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				if len(ev.lines) > 0 {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
			default:
				ev.lines = append(ev.lines, line)
				if v, ok := strings.CutPrefix(line, "data: "); ok {
					a.check.ServerSent([]byte(v))
					_ = json.Unmarshal([]byte(v), &ev.msg)
				}
				if v, ok := strings.CutPrefix(line, "id: "); ok {
					ev.id = v
				}
			}
		}
	}()
	DeferCleanup(func() {
		cancel()
		resp.Body.Close()
	})
	return s
}

// until collects events up to and including the first matching one.
func (s *sseStream) until(what string, match func(map[string]any) bool) []sseEvent {
	var out []sseEvent
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				Fail("stream ended while waiting for " + what)
			}
			out = append(out, ev)
			if match(ev.msg) {
				return out
			}
		case <-deadline:
			Fail("timed out waiting for " + what)
		}
	}
}

// rest collects the events up to the end of the stream.
func (s *sseStream) rest() []sseEvent {
	var out []sseEvent
	deadline := time.After(15 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-deadline:
			Fail("stream did not end")
		}
	}
}

func (s *sseStream) waitEOF() {
	select {
	case <-s.eof:
	case <-time.After(15 * time.Second):
		Fail("stream did not end")
	}
}

func respTo(id float64) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["method"] == nil && m["id"] == id }
}

func methodIs(method string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["method"] == method }
}

// sigterm stops the server and expects a clean exit within limit.
func (a *httpAgent) sigterm(limit time.Duration) time.Duration {
	start := time.Now()
	Expect(a.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	select {
	case err := <-a.exited:
		Expect(err).NotTo(HaveOccurred(), "exit status; stderr:\n%s", a.stderr)
	case <-time.After(limit):
		_ = a.cmd.Process.Signal(syscall.SIGQUIT)
		Fail("server did not exit within " + limit.String())
	}
	Expect(a.stderr.String()).NotTo(ContainSubstring(testAPIKey))
	return time.Since(start)
}

var _ = Describe("HTTP+SSE transport with a raw HTTP client", Label("e2e", "http"), func() {
	var (
		fake *llmtest.Server
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
	})

	It("runs the spec's curl workflow step by step", func() {
		fake.Script(
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_w", Name: "write_file",
				Arguments: `{"path":"hello.txt","content":"hi there"}`}}},
			llmtest.Reply{Text: "I wrote hello.txt for you."},
		)
		a := startHTTPAgent(agentEnv(fake), "")

		By("Step 1: POST initialize → 200, body and Acp-Connection-Id")
		r := a.do(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"capabilities":{},"clientInfo":{"name":"curl","version":"1.0"}}}`))
		Expect(r.status).To(Equal(http.StatusOK))
		conn := r.header.Get("Acp-Connection-Id")
		Expect(conn).To(MatchRegexp(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`))
		a.check.ServerSent(r.body)
		var init map[string]any
		Expect(json.Unmarshal(r.body, &init)).To(Succeed())
		Expect(init["result"]).To(HaveKeyWithValue("protocolVersion", 1.0))

		By("Step 2: GET the event stream with only Acp-Connection-Id")
		s := a.stream(conn)

		By("Step 3: POST session/new (no mcpServers) → 202; the response arrives on the stream")
		a.accepted(conn, jrpc(2, "session/new", map[string]any{"cwd": cwd}))
		evs := s.until("session/new response", respTo(2))
		sid := evs[len(evs)-1].msg["result"].(map[string]any)["sessionId"].(string)

		By("Step 4: POST session/prompt → 202; the permission request arrives on the stream")
		a.accepted(conn, jrpc(3, "session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": "Write hello.txt"}}}))
		perm := s.until("permission request", methodIs("session/request_permission"))
		req := perm[len(perm)-1].msg
		Expect(req["params"]).To(HaveKeyWithValue("sessionId", sid))

		By("the permission is answered by POSTing the JSON-RPC response → 202")
		a.accepted(conn, map[string]any{"jsonrpc": "2.0", "id": req["id"],
			"result": map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}}})
		rest := s.until("prompt response", respTo(3))
		Expect(rest[len(rest)-1].msg["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		content, err := os.ReadFile(filepath.Join(cwd, "hello.txt"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(content)).To(Equal("hi there"))

		By("every event: event/data/id/retry, ids 1, 2, 3… on the only stream")
		all := append(append(evs, perm...), rest...)
		for i, ev := range all {
			Expect(ev.lines).To(Equal([]string{"event: message", ev.lines[1], "id: " + strconv.Itoa(i+1), "retry: 5000"}))
			Expect(ev.lines[1]).To(HavePrefix("data: {\"jsonrpc\":\"2.0\""))
		}
		var text strings.Builder
		for _, ev := range rest {
			if ev.msg["method"] == "session/update" {
				u := ev.msg["params"].(map[string]any)["update"].(map[string]any)
				if u["sessionUpdate"] == "agent_message_chunk" {
					text.WriteString(u["content"].(map[string]any)["text"].(string))
				}
			}
		}
		Expect(text.String()).To(Equal("I wrote hello.txt for you."))

		By("Step 5: DELETE → 200; the stream ends; the connection id is unknown afterwards")
		Expect(a.do(http.MethodDelete, nil, "Acp-Connection-Id", conn).status).To(Equal(http.StatusOK))
		s.waitEOF()
		r = a.post(conn, jrpc(4, "session/new", map[string]any{"cwd": cwd}))
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(string(r.body)).To(ContainSubstring("Connection not found"))
		Expect(a.check.Violations()).To(BeEmpty(), "schema violations")

		a.sigterm(10 * time.Second)
	})

	It("answers every error status", func() {
		a := startHTTPAgent(agentEnv(fake), "")
		conn := a.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1})).header.Get("Acp-Connection-Id")
		Expect(conn).NotTo(BeEmpty())
		Expect(a.do(http.MethodPost, []byte(`{nope`), "Acp-Connection-Id", conn).status).To(Equal(http.StatusBadRequest))
		Expect(a.do(http.MethodPost, []byte(`[]`), "Acp-Connection-Id", conn).status).To(Equal(http.StatusNotImplemented))
		Expect(a.post("", jrpc(2, "session/new", map[string]any{"cwd": cwd})).status).To(Equal(http.StatusBadRequest))
		Expect(a.post("bogus", jrpc(2, "session/new", map[string]any{"cwd": cwd})).status).To(Equal(http.StatusBadRequest))
		big := append([]byte(`{"jsonrpc":"2.0","method":"x","params":"`), bytes.Repeat([]byte("a"), 4<<20)...)
		big = append(big, `"}`...)
		if r, err := a.client.Post(a.base+"/acp", "application/json", bytes.NewReader(big)); err == nil {
			Expect(r.StatusCode).To(Equal(http.StatusRequestEntityTooLarge))
			r.Body.Close()
		} else {
			// the server answers 413 before the body is sent and closes; the
			// client may see the reset first
			Expect(errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "reset") ||
				strings.Contains(err.Error(), "broken pipe")).To(BeTrue(), err.Error())
		}
		req, _ := http.NewRequest(http.MethodPost, a.base+"/acp", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "text/plain")
		r, err := a.client.Do(req)
		Expect(err).NotTo(HaveOccurred())
		r.Body.Close()
		Expect(r.StatusCode).To(Equal(http.StatusUnsupportedMediaType))
		Expect(a.do(http.MethodDelete, nil).status).To(Equal(http.StatusBadRequest))
		Expect(a.do(http.MethodDelete, nil, "Acp-Connection-Id", "bogus").status).To(Equal(http.StatusOK))
		a.sigterm(10 * time.Second)
	})

	It("answers a string id with a lone surrogate escape with the id exactly as sent", func() {
		a := startHTTPAgent(agentEnv(fake), "")
		r := a.do(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":"\ud800","method":"initialize","params":{"protocolVersion":1}}`))
		Expect(r.status).To(Equal(http.StatusOK))
		Expect(string(r.body)).To(HavePrefix(`{"jsonrpc":"2.0","id":"\ud800","result":{"protocolVersion":1`))
		conn := r.header.Get("Acp-Connection-Id")
		s := a.stream(conn)
		Expect(a.do(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":"s\udfff","method":"session/list","params":{}}`),
			"Acp-Connection-Id", conn).status).To(Equal(http.StatusAccepted))
		evs := s.until("the session/list answer", func(m map[string]any) bool { return m["result"] != nil })
		Expect(evs[len(evs)-1].lines[1]).To(HavePrefix(`data: {"jsonrpc":"2.0","id":"s\udfff","result":{"sessions":`))
		Expect(a.check.Violations()).To(BeEmpty(), "schema violations")
		a.sigterm(10 * time.Second)
	})

	It("requires the bearer token when IACCODE_ACP_HTTP_TOKEN is set, but not for /health (probes)", func() {
		a := startHTTPAgent(agentEnv(fake), "tok-e2e-123")
		for _, path := range []string{"/acp", "/metrics"} {
			resp, err := http.Get(a.base + path)
			Expect(err).NotTo(HaveOccurred())
			resp.Body.Close()
			Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized), path)
		}
		resp, err := http.Get(a.base + "/health")
		Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		r := a.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1}))
		Expect(r.status).To(Equal(http.StatusOK))
		Expect(a.stderr.String()).NotTo(ContainSubstring("tok-e2e-123"))
		a.sigterm(10 * time.Second)
	})

	It("exits cleanly within 10 s on SIGTERM with open streams and a running prompt", func() {
		fake.Script(llmtest.Reply{Text: "a b c d e f", Hang: true, AfterChunks: 3})
		a := startHTTPAgent(agentEnv(fake), "")
		r := a.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1}))
		conn := r.header.Get("Acp-Connection-Id")
		s := a.stream(conn)
		idle := a.stream(a.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1})).header.Get("Acp-Connection-Id"))
		a.accepted(conn, jrpc(2, "session/new", map[string]any{"cwd": cwd}))
		sid := s.until("session", respTo(2))
		a.accepted(conn, jrpc(3, "session/prompt", map[string]any{"sessionId": sid[len(sid)-1].msg["result"].(map[string]any)["sessionId"],
			"prompt": []any{map[string]any{"type": "text", "text": "go"}}}))
		s.until("first chunk", methodIs("session/update"))

		took := a.sigterm(10 * time.Second)
		GinkgoWriter.Printf("SIGTERM to exit: %v\n", took)
		evs := s.until("cancelled prompt response", respTo(3))
		Expect(evs[len(evs)-1].msg["result"]).To(HaveKeyWithValue("stopReason", "cancelled"))
		s.waitEOF()
		idle.waitEOF()
		Expect(a.check.Violations()).To(BeEmpty())
	})
})

var _ = Describe("HTTP+SSE transport with the TypeScript SDK http-client", Label("e2e", "http", "node"), func() {
	var (
		fake *llmtest.Server
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
	})

	httpArgs := func(a *httpAgent, scenario string, extra ...string) []string {
		return append([]string{"--transport", "http", "--http-url", a.base + "/acp", "--scenario", scenario, "--cwd", cwd}, extra...)
	}

	It("drives initialize → session/new → prompt with a permission → end_turn", func() {
		fake.Script(
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_w", Name: "write_file",
				Arguments: `{"path":"ts.txt","content":"from ts"}`}}},
			llmtest.Reply{Text: "Done writing."},
		)
		a := startHTTPAgent(agentEnv(fake), "")
		run := runTSClient(agentEnv(fake), httpArgs(a, "permission")...)
		prompts := run.Result["prompts"].([]any)
		Expect(prompts).To(HaveLen(1))
		Expect(prompts[0]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(run.PermissionRequests).To(HaveLen(1))
		Expect(chunkText(run.Updates, "agent_message_chunk")).To(Equal("Done writing."))
		content, err := os.ReadFile(filepath.Join(cwd, "ts.txt"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(content)).To(Equal("from ts"))
		a.sigterm(10 * time.Second)
	})

	It("cancels mid-stream and serves the next prompt, with a bearer token", func() {
		fake.Script(llmtest.Reply{Text: "one two three four", Hang: true, AfterChunks: 3}, llmtest.Reply{Text: "fresh"})
		a := startHTTPAgent(agentEnv(fake), "tok-ts")
		run := runTSClient(agentEnv(fake, "IACCODE_ACP_HTTP_TOKEN=tok-ts"), httpArgs(a, "cancel")...)
		Expect(run.Result["first"]).To(HaveKeyWithValue("stopReason", "cancelled"))
		Expect(run.Result["second"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		a.sigterm(10 * time.Second)
	})
})
