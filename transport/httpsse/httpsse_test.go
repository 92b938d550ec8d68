package httpsse_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/transport/httpsse"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

const connNotFound = `{"error":"Connection not found. Send 'initialize' first or provide a valid Acp-Connection-Id header."}`

var _ = Describe("the spec's curl workflow", func() {
	It("initializes, streams a session's prompt with a permission, and closes", func() {
		e := startEnv(httpsse.Config{})
		e.fake.Script(
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "touch", Arguments: `{"path":"a.txt"}`}}},
			llmtest.Reply{Text: "All done, the file is touched."},
		)

		By("1: POST initialize → 200 with the JSON-RPC response and Acp-Connection-Id")
		r := e.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"capabilities":{},"clientInfo":{"name":"curl","version":"1.0"}}}`)
		Expect(r.status).To(Equal(http.StatusOK))
		Expect(r.header.Get("Content-Type")).To(Equal("application/json"))
		conn := r.header.Get("Acp-Connection-Id")
		Expect(conn).To(MatchRegexp(uuidV4.String()))
		init := r.json()
		Expect(init["jsonrpc"]).To(Equal("2.0"))
		Expect(init["id"]).To(Equal(1.0))
		Expect(init["result"]).To(HaveKeyWithValue("protocolVersion", 1.0))

		By("3 before 2: session/new while no stream is attached is queued, not lost")
		e.send(conn, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": map[string]any{"cwd": e.cwd}})

		By("2: GET with only Acp-Connection-Id (curl's Accept: */*) → event stream")
		s := e.stream(conn, "Accept", "*/*")
		evs := s.until(isResponse(2))
		sid := evs[len(evs)-1].msg["result"].(map[string]any)["sessionId"].(string)
		Expect(sid).NotTo(BeEmpty())

		By("4: POST session/prompt → 202; updates and the permission request arrive on the stream")
		e.prompt(conn, 3, sid, "Touch a.txt")
		before := s.until(isMethod("session/request_permission"))
		perm := before[len(before)-1].msg
		Expect(perm["params"]).To(HaveKeyWithValue("sessionId", sid))

		By("the permission is answered by POSTing the JSON-RPC response → 202")
		e.send(conn, map[string]any{"jsonrpc": "2.0", "id": perm["id"],
			"result": map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}}})
		after := s.until(isResponse(3))
		Expect(after[len(after)-1].msg["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(text(after)).To(Equal("All done, the file is touched."))

		By("every event is framed event/data/id/retry with increasing ids")
		all := append(append(evs, before...), after...)
		last := uint64(0)
		for _, ev := range all {
			Expect(ev.lines).To(HaveLen(4))
			Expect(ev.lines[0]).To(Equal("event: message"))
			Expect(ev.lines[1]).To(HavePrefix("data: {"))
			Expect(ev.lines[2]).To(MatchRegexp(`^id: [1-9][0-9]*$`))
			Expect(ev.lines[3]).To(Equal("retry: 5000"))
			Expect(ev.msg).To(HaveKeyWithValue("jsonrpc", "2.0"))
			id, err := strconv.ParseUint(ev.id, 10, 64)
			Expect(err).NotTo(HaveOccurred())
			Expect(id).To(Equal(last+1), "ids are consecutive on the only stream")
			last = id
		}
		Expect(all).To(ContainElement(WithTransform(func(ev sseEvent) any {
			if ev.msg["method"] != "session/update" {
				return nil
			}
			return ev.msg["params"].(map[string]any)["update"].(map[string]any)["sessionUpdate"]
		}, Equal("tool_call_update"))))

		By("5: DELETE → 200; the stream ends; the id is unknown afterwards")
		d := e.do(http.MethodDelete, "/acp", nil, "Acp-Connection-Id", conn)
		Expect(d.status).To(Equal(http.StatusOK))
		s.waitEOF()
		r = e.post(rpc(4, "session/new", map[string]any{"cwd": e.cwd}), "Acp-Connection-Id", conn)
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(string(r.body)).To(Equal(connNotFound))
		g := e.do(http.MethodGet, "/acp", nil, "Acp-Connection-Id", conn)
		Expect(g.status).To(Equal(http.StatusBadRequest))
	})

	It("accepts the legacy permission answer and an answer carrying Acp-Session-Id", func() {
		e := startEnv(httpsse.Config{})
		e.fake.Script(
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "touch", Arguments: `{}`}}},
			llmtest.Reply{Text: "one"},
		)
		conn := e.initialize()
		s := e.stream(conn)
		sid := e.newSession(conn, s, 2)
		e.prompt(conn, 3, sid, "go")
		perm := s.until(isMethod("session/request_permission"))
		e.send(conn, map[string]any{"jsonrpc": "2.0", "id": perm[len(perm)-1].msg["id"],
			"result": map[string]any{"outcome": "allowed", "option_id": "allow_once"}})
		res := s.until(isResponse(3))
		Expect(res[len(res)-1].msg["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(res).To(ContainElement(WithTransform(func(ev sseEvent) string { return ev.data }, ContainSubstring(`"status":"completed"`))))
	})
})

var _ = Describe("status codes", func() {
	var e *env
	BeforeEach(func() { e = startEnv(httpsse.Config{}) })

	It("400 for invalid JSON, 501 for a batch, 400 for a non-object", func() {
		conn := e.initialize()
		r := e.post(`{"jsonrpc":`, "Acp-Connection-Id", conn)
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(string(r.body)).To(Equal(`{"error":"Invalid JSON"}`))

		r = e.post(`[{"jsonrpc":"2.0","id":1,"method":"initialize"}]`, "Acp-Connection-Id", conn)
		Expect(r.status).To(Equal(http.StatusNotImplemented))
		Expect(r.json()).To(Equal(map[string]any{"jsonrpc": "2.0", "id": nil,
			"error": map[string]any{"code": -32600.0, "message": "JSON-RPC batches are not supported"}}))

		r = e.post(`"hello"`, "Acp-Connection-Id", conn)
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(r.json()["error"]).To(HavePrefix("Invalid JSON-RPC message"))

		r = e.post(`{"id":1,"method":"session/new"}`, "Acp-Connection-Id", conn)
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(r.json()["error"]).To(ContainSubstring(`"jsonrpc" must be "2.0"`))
	})

	It("400 for a missing or unknown Acp-Connection-Id on POST and GET", func() {
		msg := rpc(2, "session/new", map[string]any{"cwd": e.cwd})
		r := e.post(msg)
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(string(r.body)).To(Equal(connNotFound))
		r = e.post(msg, "Acp-Connection-Id", "6f1c1c36-1111-4111-8111-111111111111")
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(string(r.body)).To(Equal(connNotFound))
		for _, h := range [][]string{nil, {"Acp-Connection-Id", "nope"}} {
			g := e.do(http.MethodGet, "/acp", nil, h...)
			Expect(g.status).To(Equal(http.StatusBadRequest))
			Expect(string(g.body)).To(Equal(`{"error":"Connection not found. Provide a valid Acp-Connection-Id header."}`))
		}
	})

	It("413 for a body over 4 MiB, by Content-Length and chunked", func() {
		conn := e.initialize()
		head := "POST /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAcp-Connection-Id: " + conn + "\r\n"
		resp, body := e.rawRequest(head + fmt.Sprintf("Content-Length: %d\r\n\r\n", 4<<20+1))
		Expect(resp.StatusCode).To(Equal(http.StatusRequestEntityTooLarge))
		Expect(string(body)).To(Equal(`{"error":"Request body too large"}`))

		By("a chunked body is counted as it arrives")
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		var req bytes.Buffer
		req.WriteString(head + "Transfer-Encoding: chunked\r\n\r\n")
		for range 5 {
			fmt.Fprintf(&req, "%x\r\n%s\r\n", len(chunk), chunk)
		}
		req.WriteString("0\r\n\r\n")
		resp, body = e.rawRequest(req.String())
		Expect(resp.StatusCode).To(Equal(http.StatusRequestEntityTooLarge))
		Expect(string(body)).To(Equal(`{"error":"Request body too large"}`))

		By("a body just under the limit is fine")
		ok := append([]byte(`{"jsonrpc":"2.0","method":"x","params":"`), bytes.Repeat([]byte("a"), 4<<20-100)...)
		ok = append(ok, `"}`...)
		r := e.post(ok, "Acp-Connection-Id", conn)
		Expect(r.status).To(Equal(http.StatusAccepted))
	})

	It("415 for a Content-Type that is not JSON; parameters are allowed", func() {
		conn := e.initialize()
		body := `{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"x"}}`
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", ""} {
			r := e.do(http.MethodPost, "/acp", strings.NewReader(body), "Content-Type", ct, "Acp-Connection-Id", conn)
			Expect(r.status).To(Equal(http.StatusUnsupportedMediaType), ct)
			Expect(string(r.body)).To(Equal(`{"error":"Content-Type must be application/json"}`))
		}
		r := e.do(http.MethodPost, "/acp", strings.NewReader(body), "Content-Type", "Application/JSON; charset=utf-8", "Acp-Connection-Id", conn)
		Expect(r.status).To(Equal(http.StatusAccepted))
	})

	It("406 only when Accept excludes event streams", func() {
		conn := e.initialize()
		for _, acc := range []string{"text/event-stream", "*/*", "text/*", "application/json, text/event-stream;q=0.5"} {
			resp, cancel := e.getStream(conn, "Accept", acc)
			Expect(resp.StatusCode).To(Equal(http.StatusOK), acc)
			cancel()
			_ = resp.Body.Close()
		}
		for _, acc := range []string{"application/json", "text/event-stream;q=0"} {
			r := e.do(http.MethodGet, "/acp", nil, "Acp-Connection-Id", conn, "Accept", acc)
			Expect(r.status).To(Equal(http.StatusNotAcceptable), acc)
			Expect(r.json()).To(HaveKey("error"))
		}
	})

	It("DELETE: 200 for known and unknown ids, 400 without the header", func() {
		Expect(e.do(http.MethodDelete, "/acp", nil, "Acp-Connection-Id", "unknown").status).To(Equal(http.StatusOK))
		r := e.do(http.MethodDelete, "/acp", nil)
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(r.json()).To(HaveKey("error"))
		conn := e.initialize()
		Expect(e.do(http.MethodDelete, "/acp", nil, "Acp-Connection-Id", conn).status).To(Equal(http.StatusOK))
		Expect(e.do(http.MethodDelete, "/acp", nil, "Acp-Connection-Id", conn).status).To(Equal(http.StatusOK))
	})

	It("404 for other paths, 405 for other methods, /health", func() {
		r := e.do(http.MethodGet, "/nope", nil)
		Expect(r.status).To(Equal(http.StatusNotFound))
		Expect(string(r.body)).To(Equal(`{"error":"Not found"}`))
		r = e.do(http.MethodPut, "/acp", nil)
		Expect(r.status).To(Equal(http.StatusMethodNotAllowed))
		Expect(r.header.Get("Allow")).To(Equal("GET, POST, DELETE"))
		r = e.do(http.MethodOptions, "/acp", nil)
		Expect(r.status).To(Equal(http.StatusMethodNotAllowed))
		r = e.do(http.MethodGet, "/health", nil)
		Expect(r.status).To(Equal(http.StatusOK))
		Expect(string(r.body)).To(Equal(`{"status":"healthy"}`))
		Expect(r.header.Get("Content-Type")).To(Equal("application/json"))
	})

	It("initialize ignores an Acp-Connection-Id header and always creates a connection", func() {
		a := e.initialize()
		b := e.initialize("Acp-Connection-Id", a)
		Expect(b).NotTo(Equal(a))
		Expect(b).To(MatchRegexp(uuidV4.String()))
	})

	It("an initialize notification is a 400", func() {
		r := e.post(`{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":1}}`)
		Expect(r.status).To(Equal(http.StatusBadRequest))
	})
})

var _ = Describe("initialize timeout", func() {
	It("504 after InitializeTimeout, and the connection is gone", func() {
		e := startEnv(httpsse.Config{InitializeTimeout: 200 * time.Millisecond}, httpsse.HoldInitialize)
		start := time.Now()
		r := e.post(rpc(1, "initialize", map[string]any{"protocolVersion": 1}))
		Expect(r.status).To(Equal(http.StatusGatewayTimeout))
		Expect(string(r.body)).To(Equal(`{"error":"Initialize timeout"}`))
		Expect(time.Since(start)).To(BeNumerically(">=", 200*time.Millisecond))
		Expect(r.header.Get("Acp-Connection-Id")).To(BeEmpty())
		Eventually(func() string { return e.metrics() }).Should(ContainSubstring(`iaccode_http_connections_closed_total{reason="initialize_timeout"} 1`))
		Eventually(func() string { return e.metrics() }).Should(ContainSubstring("iaccode_http_connections 0"))
	})
})

var _ = Describe("authentication", func() {
	It("requires the bearer token on every route but /health when configured", func() {
		e := startEnv(httpsse.Config{Token: "s3cret"})
		for _, path := range []string{"/acp", "/metrics", "/nope"} {
			for _, auth := range []string{"", "Bearer wrong", "Basic czNjcmV0", "Bearer s3cret2", "s3cret"} {
				r := e.do(http.MethodGet, path, nil, "Authorization", auth)
				Expect(r.status).To(Equal(http.StatusUnauthorized), path+" "+auth)
				Expect(string(r.body)).To(Equal(`{"error":"Unauthorized"}`))
			}
		}
		r := e.post(rpc(1, "initialize", map[string]any{"protocolVersion": 1}))
		Expect(r.status).To(Equal(http.StatusUnauthorized))

		// Probes (kubelet, load balancers) carry no credentials; a wrong
		// one does not matter either.
		for _, auth := range []string{"", "Bearer wrong"} {
			r := e.do(http.MethodGet, "/health", nil, "Authorization", auth)
			Expect(r.status).To(Equal(http.StatusOK), auth)
			Expect(string(r.body)).To(Equal(`{"status":"healthy"}`))
		}
		Expect(e.do(http.MethodPost, "/health", nil).status).To(Equal(http.StatusMethodNotAllowed))

		ok := []string{"Authorization", "Bearer s3cret"}
		Expect(e.do(http.MethodGet, "/health", nil, ok...).status).To(Equal(http.StatusOK))
		Expect(e.do(http.MethodGet, "/metrics", nil, ok...).status).To(Equal(http.StatusOK))
		Expect(e.do(http.MethodGet, "/health", nil, "Authorization", "bearer s3cret").status).To(Equal(http.StatusOK))
		conn := e.initialize(ok...)
		s := e.stream(conn, ok...)
		sid := e.newSession(conn, s, 2, ok...)
		Expect(sid).NotTo(BeEmpty())
		Expect(e.logs.String()).NotTo(ContainSubstring("s3cret"))
	})

	It("is open when no token is set", func() {
		e := startEnv(httpsse.Config{})
		Expect(e.do(http.MethodGet, "/health", nil).status).To(Equal(http.StatusOK))
		Expect(e.initialize()).NotTo(BeEmpty())
	})
})

var _ = Describe("streams", func() {
	It("sends a keep-alive comment", func() {
		e := startEnv(httpsse.Config{KeepAlive: 50 * time.Millisecond})
		conn := e.initialize()
		s := e.stream(conn)
		Eventually(s.pings.Load).Should(BeNumerically(">=", 2))
	})

	It("answers a request pipelined before the stream's GET first, on the same connection", func() {
		e := startEnv(httpsse.Config{})
		conn := e.initialize()
		tcp, err := net.Dial("tcp", e.addr)
		Expect(err).NotTo(HaveOccurred())
		defer tcp.Close()
		// One write: the server reads both requests at once, and holds the
		// first one's response back while it serves the second.
		_, err = tcp.Write([]byte("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" +
			"GET /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAcp-Connection-Id: " + conn + "\r\n\r\n"))
		Expect(err).NotTo(HaveOccurred())
		_ = tcp.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(tcp)
		health, err := http.ReadResponse(br, nil)
		Expect(err).NotTo(HaveOccurred())
		body, err := io.ReadAll(health.Body)
		Expect(err).NotTo(HaveOccurred())
		Expect(health.Header.Get("Content-Type")).To(HavePrefix("application/json"))
		Expect(string(body)).To(Equal(`{"status":"healthy"}`))
		stream, err := http.ReadResponse(br, nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(stream.Header.Get("Content-Type")).To(HavePrefix("text/event-stream"))
		e.send(conn, rpc(2, "session/new", map[string]any{"cwd": e.cwd}))
		line, err := bufio.NewReader(stream.Body).ReadString('\n')
		Expect(err).NotTo(HaveOccurred())
		Expect(line).To(Equal("event: message\n"))
	})

	It("lets go of a pipelined stream GET whose client resets the connection at once", func() {
		// A stream that wrote its head before the reset came notices it at
		// its next keep-alive.
		e := startEnv(httpsse.Config{KeepAlive: 50 * time.Millisecond})
		conn := e.initialize()
		// The reset lands at different points: before the requests are
		// read, while the response held back for the first one is flushed
		// (fasthttp then skips the hijack handler), or once the stream runs.
		// Each way the stream must detach.
		for range 50 {
			tcp, err := net.Dial("tcp", e.addr)
			Expect(err).NotTo(HaveOccurred())
			_, err = tcp.Write([]byte("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" +
				"GET /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAcp-Connection-Id: " + conn + "\r\n\r\n"))
			Expect(err).NotTo(HaveOccurred())
			Expect(tcp.(*net.TCPConn).SetLinger(0)).To(Succeed())
			Expect(tcp.Close()).To(Succeed())
		}
		Eventually(func() string { return e.metrics() }, 5*time.Second).Should(ContainSubstring("iaccode_http_streams 0"))
	})

	It("outlives the server's write timeout", func() {
		e := startEnv(httpsse.Config{KeepAlive: 20 * time.Millisecond}, httpsse.SetWriteTimeout(100*time.Millisecond))
		conn := e.initialize()
		s := e.stream(conn)
		Consistently(s.eof, time.Second).ShouldNot(BeClosed())
		Expect(s.pings.Load()).To(BeNumerically(">=", 10))
		e.send(conn, rpc(2, "session/new", map[string]any{"cwd": e.cwd}))
		s.until(isResponse(2))
	})

	It("outlives the server's read timeout: the liveness probe must not read through its deadline", func() {
		e := startEnv(httpsse.Config{KeepAlive: 20 * time.Millisecond}, httpsse.SetReadTimeout(200*time.Millisecond))
		conn := e.initialize()
		s := e.stream(conn)
		Consistently(s.eof, time.Second).ShouldNot(BeClosed())
		e.send(conn, rpc(2, "session/new", map[string]any{"cwd": e.cwd}))
		s.until(isResponse(2))
	})

	It("drops written events from the replay window after ReplayMaxAge", func() {
		e := startEnv(httpsse.Config{ReplayMaxAge: 200 * time.Millisecond})
		conn := e.initialize()
		s := e.stream(conn)
		e.newSession(conn, s, 2)
		first := s.drain(200 * time.Millisecond)
		Expect(first).NotTo(BeEmpty())
		time.Sleep(300 * time.Millisecond)
		e.send(conn, rpc(3, "session/list", map[string]any{}))
		s.until(isResponse(3))
		s.close()
		// the early events are gone: resuming from before them is refused
		old := e.stream(conn, "Last-Event-ID", "0")
		ev := old.next()
		Expect(ev.event).To(Equal("error"))
	})

	It("isolates two connections under concurrent prompts", func() {
		e := startEnv(httpsse.Config{})
		textA := strings.Repeat("alpha ", 200)
		textB := strings.Repeat("beta ", 200)
		e.fake.Script(llmtest.Reply{Text: textA, Delay: time.Millisecond}, llmtest.Reply{Text: textB, Delay: time.Millisecond})
		type side struct {
			conn, sid string
			s         *sse
			evs       []sseEvent
		}
		sides := []*side{{}, {}}
		for _, sd := range sides {
			sd.conn = e.initialize()
			sd.s = e.stream(sd.conn)
			sd.sid = e.newSession(sd.conn, sd.s, 2)
		}
		var wg sync.WaitGroup
		for _, sd := range sides {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				e.prompt(sd.conn, 3, sd.sid, "go")
				sd.evs = sd.s.until(isResponse(3))
			}()
		}
		wg.Wait()
		got := []string{text(sides[0].evs), text(sides[1].evs)}
		Expect(got).To(ConsistOf(textA, textB))
		for i, sd := range sides {
			other := sides[1-i]
			for _, ev := range sd.evs {
				Expect(ev.data).NotTo(ContainSubstring(other.sid))
				if p, ok := ev.msg["params"].(map[string]any); ok {
					Expect(p["sessionId"]).To(Equal(sd.sid))
				}
			}
		}
	})

	It("resumes exactly after a dropped stream with Last-Event-ID", func() {
		e := startEnv(httpsse.Config{})
		words := make([]string, 400)
		for i := range words {
			words[i] = fmt.Sprintf("w%03d ", i)
		}
		full := strings.Join(words, "")
		e.fake.Script(llmtest.Reply{TextChunks: words, Delay: 2 * time.Millisecond})
		conn := e.initialize()
		s1 := e.stream(conn)
		sid := e.newSession(conn, s1, 2)
		e.prompt(conn, 3, sid, "go")

		var first []sseEvent
		for len(first) < 60 {
			first = append(first, s1.next())
		}
		s1.close()
		lastID := first[len(first)-1].id

		time.Sleep(50 * time.Millisecond) // events keep coming while detached
		s2 := e.stream(conn, "Last-Event-ID", lastID)
		rest := s2.until(isResponse(3))
		Expect(rest[0].id).To(Equal(strconv.Itoa(mustAtoi(lastID) + 1)))
		all := append(first, rest...)
		seen := map[string]bool{}
		for _, ev := range all {
			Expect(seen[ev.id]).To(BeFalse(), "duplicate event id "+ev.id)
			seen[ev.id] = true
		}
		Expect(text(all)).To(Equal(full))
		Expect(e.metrics()).To(ContainSubstring("iaccode_http_stream_reconnects_total 1"))
	})

	It("hands nothing to a stream whose client left, so a new GET without Last-Event-ID misses nothing", func() {
		e := startEnv(httpsse.Config{}) // 15 s keep-alive: the departure is seen when the next event is due
		conn := e.initialize()
		s1 := e.stream(conn)
		e.newSession(conn, s1, 2)
		s1.drain(100 * time.Millisecond)
		s1.close()
		s1.waitEOF()
		time.Sleep(50 * time.Millisecond)
		e.send(conn, rpc(3, "session/new", map[string]any{"cwd": e.cwd}))
		s2 := e.stream(conn)
		ev := s2.next()
		Expect(ev.msg["id"]).To(Equal(3.0))
	})

	It("reports a Last-Event-ID too old to replay with an error event and closes", func() {
		e := startEnv(httpsse.Config{ReplayBuffer: 5})
		conn := e.initialize()
		s := e.stream(conn)
		for i := 2; i <= 9; i++ {
			e.send(conn, rpc(i, "session/new", map[string]any{"cwd": e.cwd}))
			s.until(isResponse(float64(i)))
		}

		resp, cancel := e.getStream(conn, "Last-Event-ID", "1")
		defer cancel()
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		Expect(resp.Header.Get("Content-Type")).To(Equal("text/event-stream"))
		body, err := io.ReadAll(resp.Body)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(body)).To(HavePrefix("event: error\ndata: {\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{"))
		Expect(string(body)).To(ContainSubstring(`"reason":"stale_last_event_id"`))
		Expect(string(body)).To(HaveSuffix("\n\n"))

		By("an id never sent is refused the same way")
		resp2, cancel2 := e.getStream(conn, "Last-Event-ID", "999999")
		defer cancel2()
		body, _ = io.ReadAll(resp2.Body)
		Expect(string(body)).To(ContainSubstring(`"reason":"unknown_last_event_id"`))

		By("a malformed id is a 400")
		Expect(e.do(http.MethodGet, "/acp", nil, "Acp-Connection-Id", conn, "Last-Event-ID", "abc").status).To(Equal(http.StatusBadRequest))

		By("the live stream was not disturbed")
		e.send(conn, rpc(10, "session/new", map[string]any{"cwd": e.cwd}))
		s.until(isResponse(10))
	})

	It("replays from a recent Last-Event-ID within the window", func() {
		e := startEnv(httpsse.Config{ReplayBuffer: 5})
		conn := e.initialize()
		s := e.stream(conn)
		var seen []sseEvent
		for i := 2; i <= 8; i++ {
			e.send(conn, rpc(i, "session/new", map[string]any{"cwd": e.cwd}))
			seen = append(seen, s.until(isResponse(float64(i)))...)
		}
		seen = append(seen, s.drain(200*time.Millisecond)...)
		n := len(seen)
		Expect(seen[n-1].id).To(Equal(strconv.Itoa(n)), "ids 1..n on the only stream")
		s.close()
		By("the window keeps the last 5 events: n-4..n")
		s2 := e.stream(conn, "Last-Event-ID", strconv.Itoa(n-5))
		for want := n - 4; want <= n; want++ {
			Expect(s2.next().id).To(Equal(strconv.Itoa(want)))
		}
		resp, cancel := e.getStream(conn, "Last-Event-ID", strconv.Itoa(n-6))
		defer cancel()
		body, _ := io.ReadAll(resp.Body)
		Expect(string(body)).To(ContainSubstring(`"reason":"stale_last_event_id"`))
	})

	It("a second GET replaces the first, which is closed", func() {
		e := startEnv(httpsse.Config{})
		conn := e.initialize()
		s1 := e.stream(conn)
		e.newSession(conn, s1, 2)
		s2 := e.stream(conn)
		s1.waitEOF()
		e.send(conn, rpc(3, "session/new", map[string]any{"cwd": e.cwd}))
		s2.until(isResponse(3))
		Expect(e.metrics()).To(ContainSubstring("iaccode_http_stream_reconnects_total 1"))
	})
})

var _ = Describe("session-scoped streams (Streamable HTTP)", func() {
	It("routes a split session's traffic to its session stream only", func() {
		e := startEnv(httpsse.Config{})
		e.fake.Script(
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "touch", Arguments: `{}`}}},
			llmtest.Reply{Text: "session stream text"},
		)
		conn := e.initialize()
		cs := e.stream(conn, "Accept", "text/event-stream")
		sid := e.newSession(conn, cs, 2)
		ss := e.stream(conn, "Accept", "text/event-stream", "Acp-Session-Id", sid)
		// Session notifications emitted before the split (available
		// commands…) may still be on the connection stream.
		cs.drain(100 * time.Millisecond)
		e.prompt(conn, 3, sid, "go", "Acp-Session-Id", sid)
		perm := ss.until(isMethod("session/request_permission"))
		e.send(conn, map[string]any{"jsonrpc": "2.0", "id": perm[len(perm)-1].msg["id"],
			"result": map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}}},
			"Acp-Session-Id", sid)
		evs := ss.until(isResponse(3))
		Expect(text(evs)).To(Equal("session stream text"))
		cs.quiet(100 * time.Millisecond)

		By("connection-level responses stay on the connection stream")
		e.send(conn, rpc(4, "session/new", map[string]any{"cwd": e.cwd}), "Acp-Session-Id", sid)
		cs.until(isResponse(4))
		ss.quiet(100 * time.Millisecond)

		By("ids increase per connection across both streams")
		a, _ := strconv.Atoi(perm[0].id)
		b, _ := strconv.Atoi(evs[len(evs)-1].id)
		Expect(b).To(BeNumerically(">", a))
	})

	It("a session POST without its stream queues the events until the session GET", func() {
		e := startEnv(httpsse.Config{})
		e.fake.Script(llmtest.Reply{Text: "queued for later"})
		conn := e.initialize()
		cs := e.stream(conn)
		sid := e.newSession(conn, cs, 2)
		cs.drain(100 * time.Millisecond)
		e.prompt(conn, 3, sid, "go", "Acp-Session-Id", sid)
		Eventually(func() string { return e.metrics() }).Should(ContainSubstring("iaccode_running_turns 0"))
		cs.quiet(100 * time.Millisecond)
		ss := e.stream(conn, "Acp-Session-Id", sid)
		Expect(text(ss.until(isResponse(3)))).To(Equal("queued for later"))
	})

	It("accepts a session GET for any well-formed id; rejects mismatched or malformed ids", func() {
		e := startEnv(httpsse.Config{})
		conn := e.initialize()
		s := e.stream(conn, "Acp-Session-Id", "sess_not_created_yet")
		Expect(s.resp.StatusCode).To(Equal(http.StatusOK))
		r := e.post(rpc(3, "session/prompt", map[string]any{"sessionId": "a", "prompt": []any{}}),
			"Acp-Connection-Id", conn, "Acp-Session-Id", "b")
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(string(r.body)).To(Equal(`{"error":"Mismatched Acp-Session-Id"}`))
		g := e.do(http.MethodGet, "/acp", nil, "Acp-Connection-Id", conn, "Acp-Session-Id", "has space")
		Expect(g.status).To(Equal(http.StatusBadRequest))
	})

	It("caps the session streams of a connection", func() {
		e := startEnv(httpsse.Config{MaxSessionStreams: 2})
		conn := e.initialize()
		e.send(conn, rpc(nil, "session/cancel", map[string]any{"sessionId": "a"}), "Acp-Session-Id", "a")
		e.send(conn, rpc(nil, "session/cancel", map[string]any{"sessionId": "b"}), "Acp-Session-Id", "b")
		r := e.post(rpc(nil, "session/cancel", map[string]any{"sessionId": "c"}), "Acp-Connection-Id", conn, "Acp-Session-Id", "c")
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(string(r.body)).To(ContainSubstring("Too many session streams"))
	})
})

var _ = Describe("limits", func() {
	It("closes a connection whose events are never read, with a clear reason", func() {
		e := startEnv(httpsse.Config{ReplayBuffer: 50, KeepAlive: 50 * time.Millisecond})
		// A delay per chunk: deltas that arrive together go out joined.
		e.fake.Script(llmtest.Reply{Text: strings.Repeat("y ", 200), Delay: time.Millisecond})
		conn := e.initialize()
		e.send(conn, rpc(2, "session/new", map[string]any{"cwd": e.cwd}))
		// No stream: the session/new response waits in the buffer; read it
		// through a short-lived stream to get the session id.
		s := e.stream(conn)
		sid := s.until(isResponse(2))[0].msg["result"].(map[string]any)["sessionId"].(string)
		s.close()
		s.waitEOF()
		Eventually(func() string { return e.metrics() }).Should(ContainSubstring("iaccode_http_streams 0"))
		e.prompt(conn, 3, sid, "go")
		Eventually(func() string { return e.metrics() }, 5*time.Second).Should(
			ContainSubstring(`iaccode_http_connections_closed_total{reason="overflow"} 1`))
		r := e.post(rpc(nil, "session/cancel", map[string]any{"sessionId": sid}), "Acp-Connection-Id", conn)
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(string(r.body)).To(ContainSubstring("buffer overflowed"))
		Expect(e.logs.String()).To(ContainSubstring("client is not reading its event stream"))
	})

	It("closes a stalled stream's connection and tells a client that reads again", func() {
		e := startEnv(httpsse.Config{ReplayBuffer: 100, MaxBufferBytes: 1 << 20, KeepAlive: 50 * time.Millisecond})
		e.fake.Script(llmtest.Reply{Chunks: 2000, ChunkText: strings.Repeat("z", 16<<10)})
		conn, sid := e.sessionWithoutStream()

		By("a raw client opens the stream and stops reading")
		tcp := e.rawStream(conn, 0)
		defer tcp.Close()
		e.prompt(conn, 3, sid, "go")
		// Read again as soon as the overflow is logged: the server gives a
		// stalled stream 2 s to take its final event before closing it.
		Eventually(e.logs.String, 20*time.Second, time.Millisecond).Should(ContainSubstring("buffer full"))

		By("reading again: the backlog, then the final error event, then EOF")
		_ = tcp.SetReadDeadline(time.Now().Add(10 * time.Second))
		all, err := io.ReadAll(tcp)
		tail := all[max(0, len(all)-400):]
		Expect(err).NotTo(HaveOccurred(), fmt.Sprintf("read %d bytes, ending %q", len(all), tail))
		Expect(string(tail)).To(ContainSubstring(`"reason":"buffer_overflow"`))
		Eventually(func() string { return e.metrics() }, 10*time.Second).Should(
			ContainSubstring(`iaccode_http_connections_closed_total{reason="overflow"} 1`))
		Expect(e.post(rpc(nil, "session/cancel", map[string]any{"sessionId": sid}), "Acp-Connection-Id", conn).status).
			To(Equal(http.StatusBadRequest))
	})

	It("ends a stream whose client never reads again within the grace period after the overflow", func() {
		// The buffer is larger than what the socket holds (the server's send
		// buffer, at most 4 MiB by default, and the client's, kept small),
		// so the writer is blocked in a write when the buffer overflows.
		e := startEnv(httpsse.Config{ReplayBuffer: 1000, MaxBufferBytes: 8 << 20, KeepAlive: 50 * time.Millisecond})
		e.fake.Script(llmtest.Reply{Chunks: 2000, ChunkText: strings.Repeat("z", 16<<10)})
		conn, sid := e.sessionWithoutStream()

		tcp := e.rawStream(conn, 8<<10)
		defer tcp.Close()
		e.prompt(conn, 3, sid, "go")
		Eventually(e.logs.String, 20*time.Second, 5*time.Millisecond).Should(ContainSubstring("buffer full"))
		// The writer is blocked in a write to the full socket; the server
		// closes the socket under it 2 s after ending the stream.
		Eventually(func() string { return e.metrics() }, 4*time.Second, 20*time.Millisecond).
			Should(ContainSubstring("iaccode_http_streams 0"))
	})

	It("reaps idle connections, but not one with an open stream", func() {
		e := startEnv(httpsse.Config{IdleTimeout: 300 * time.Millisecond, KeepAlive: 50 * time.Millisecond})
		idle := e.initialize()
		busy := e.initialize()
		s := e.stream(busy)
		Eventually(func() string { return e.metrics() }, 3*time.Second).Should(
			ContainSubstring(`iaccode_http_connections_closed_total{reason="idle"} 1`))
		r := e.post(rpc(2, "session/new", map[string]any{"cwd": e.cwd}), "Acp-Connection-Id", idle)
		Expect(string(r.body)).To(ContainSubstring("idle"))
		time.Sleep(600 * time.Millisecond)
		e.send(busy, rpc(2, "session/new", map[string]any{"cwd": e.cwd}))
		s.until(isResponse(2))
		s.close()
		Eventually(func() string { return e.metrics() }, 3*time.Second).Should(
			ContainSubstring(`iaccode_http_connections_closed_total{reason="idle"} 2`))
		Expect(e.post(rpc(3, "session/new", map[string]any{"cwd": e.cwd}), "Acp-Connection-Id", busy).status).
			To(Equal(http.StatusBadRequest))
	})

	It("caps open streams with 503 while POSTs still work", func() {
		e := startEnv(httpsse.Config{MaxStreams: 2})
		conn := e.initialize()
		e.stream(conn)
		e.stream(conn, "Acp-Session-Id", "s1")
		r := e.do(http.MethodGet, "/acp", nil, "Acp-Connection-Id", conn, "Acp-Session-Id", "s2")
		Expect(r.status).To(Equal(http.StatusServiceUnavailable))
		Expect(e.initialize()).NotTo(BeEmpty())
	})
})

var _ = Describe("metrics", func() {
	It("exposes actor and transport metrics in Prometheus text", func() {
		e := startEnv(httpsse.Config{})
		conn := e.initialize()
		s := e.stream(conn)
		sid := e.newSession(conn, s, 2)
		e.prompt(conn, 3, sid, "hi")
		s.until(isResponse(3))
		Eventually(func() string { return e.metrics() }).Should(ContainSubstring("iaccode_running_turns 0"))
		r := e.do(http.MethodGet, "/metrics", nil)
		Expect(r.header.Get("Content-Type")).To(HavePrefix("text/plain"))
		m := string(r.body)
		for _, want := range []string{
			"iaccode_connections 1", "iaccode_sessions 1", "iaccode_running_turns 0", "iaccode_http_connections 1",
			"iaccode_http_streams 1", "iaccode_http_stream_reconnects_total 0", "iaccode_turns_paused_total 0", "iaccode_turns_resumed_total 0", "iaccode_turns_interrupted_total 0",
			`iaccode_http_request_duration_seconds_bucket{code="202",route="post_acp",le=`,
			`iaccode_http_request_duration_seconds_count{code="200",route="get_acp"} 1`,
			"# TYPE iaccode_http_events_sent_total counter", "go_goroutines",
		} {
			Expect(m).To(ContainSubstring(want))
		}
		Expect(m).To(MatchRegexp(`iaccode_http_events_sent_total [1-9]`))
	})
})

var _ = Describe("graceful shutdown", func() {
	It("cancels running turns, flushes their answers to the streams and closes them", func() {
		e := startEnv(httpsse.Config{})
		e.fake.Script(llmtest.Reply{Text: "partial answer", Hang: true, AfterChunks: 2})
		conn := e.initialize()
		s := e.stream(conn)
		sid := e.newSession(conn, s, 2)
		e.prompt(conn, 3, sid, "go")
		s.until(isMethod("session/update"))
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		Expect(e.edge.Shutdown(ctx)).To(Succeed())
		Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second))
		evs := s.until(isResponse(3))
		Expect(evs[len(evs)-1].msg["result"]).To(HaveKeyWithValue("stopReason", "cancelled"))
		s.waitEOF()
		Eventually(e.served).Should(Receive(BeNil()))
		_, err := net.DialTimeout("tcp", e.addr, time.Second)
		Expect(err).To(HaveOccurred())
		e.served <- nil // for the cleanup
	})
})

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	Expect(err).NotTo(HaveOccurred())
	return n
}
