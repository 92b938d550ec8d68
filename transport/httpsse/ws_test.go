package httpsse_test

import (
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

	"github.com/fasthttp/websocket"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/transport/httpsse"
)

// wsClient reads one WebSocket in the background: text frames as JSON-RPC
// messages; pings are counted (and answered unless mute).
type wsClient struct {
	ws     *websocket.Conn
	resp   *http.Response
	msgs   chan map[string]any
	pings  atomic.Int32
	mute   atomic.Bool
	closed chan struct{}
	err    error // set before closed is closed
	wmu    sync.Mutex
}

// dialWS opens ws://…/acp with the headers and subprotocols; on a refused
// handshake it returns the response and the error.
func (e *env) dialWS(hdr http.Header, protocols []string, dial func(network, addr string) (net.Conn, error)) (*websocket.Conn, *http.Response, error) {
	d := websocket.Dialer{Subprotocols: protocols, HandshakeTimeout: 5 * time.Second, NetDial: dial}
	return d.Dial("ws://"+e.addr+"/acp", hdr)
}

func (e *env) ws(hdr http.Header, protocols ...string) *wsClient {
	ws, resp, err := e.dialWS(hdr, protocols, nil)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return startWSClient(ws, resp)
}

func startWSClient(ws *websocket.Conn, resp *http.Response) *wsClient {
	c := &wsClient{ws: ws, resp: resp, msgs: make(chan map[string]any, 100_000), closed: make(chan struct{})}
	ws.SetPingHandler(func(data string) error {
		c.pings.Add(1)
		if c.mute.Load() {
			return nil
		}
		c.wmu.Lock()
		defer c.wmu.Unlock()
		return ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	go func() {
		defer close(c.closed)
		for {
			kind, data, err := ws.ReadMessage()
			if err != nil {
				c.err = err
				return
			}
			Expect(kind).To(Equal(websocket.TextMessage))
			var m map[string]any
			Expect(json.Unmarshal(data, &m)).To(Succeed(), string(data))
			c.msgs <- m
		}
	}()
	DeferCleanup(func() { _ = ws.Close() })
	return c
}

func (c *wsClient) send(m any) {
	b, err := json.Marshal(m)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	c.sendRaw(websocket.TextMessage, b)
}

func (c *wsClient) sendRaw(kind int, b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	ExpectWithOffset(2, c.ws.WriteMessage(kind, b)).To(Succeed())
}

// until collects messages up to and including the first that matches.
func (c *wsClient) until(match func(m map[string]any) bool) []map[string]any {
	var got []map[string]any
	for {
		select {
		case m, ok := <-c.msgs:
			ExpectWithOffset(1, ok).To(BeTrue())
			got = append(got, m)
			if match(m) {
				return got
			}
		case <-c.closed:
			Fail("websocket closed: " + errText(c.err))
		case <-time.After(10 * time.Second):
			Fail("no matching message within 10 s")
		}
	}
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// closeCode waits for the socket to end and returns the server's close code.
func (c *wsClient) closeCode(within time.Duration) int {
	select {
	case <-c.closed:
	case <-time.After(within):
		Fail("websocket still open")
	}
	var ce *websocket.CloseError
	if errors.As(c.err, &ce) {
		return ce.Code
	}
	return -1
}

func (c *wsClient) initialize() {
	c.send(rpc(0, "initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "ws-test", "version": "1.0"}}))
	r := c.until(isResponse(0))
	ExpectWithOffset(1, r[len(r)-1]["result"]).To(HaveKeyWithValue("protocolVersion", 1.0))
}

func (c *wsClient) newSession(id float64, cwd string) string {
	c.send(rpc(id, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))
	r := c.until(isResponse(id))
	return r[len(r)-1]["result"].(map[string]any)["sessionId"].(string)
}

func wsText(msgs []map[string]any) string {
	var b strings.Builder
	for _, m := range msgs {
		if m["method"] != "session/update" {
			continue
		}
		u := m["params"].(map[string]any)["update"].(map[string]any)
		if u["sessionUpdate"] == "agent_message_chunk" {
			b.WriteString(u["content"].(map[string]any)["text"].(string))
		}
	}
	return b.String()
}

// dialSlowReader opens a WebSocket with a 4 KiB receive buffer, reads
// synchronously up to a new session's id, and leaves reading to the spec
// (which then stops: a client that does not read).
func dialSlowReader(e *env) (*websocket.Conn, string) {
	dial := func(network, addr string) (net.Conn, error) {
		nc, err := net.Dial(network, addr)
		if err == nil {
			_ = nc.(*net.TCPConn).SetReadBuffer(4096)
		}
		return nc, err
	}
	ws, _, err := e.dialWS(nil, nil, dial)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	DeferCleanup(func() { _ = ws.Close() })
	call := func(m map[string]any) map[string]any {
		ExpectWithOffset(2, ws.WriteJSON(m)).To(Succeed())
		for {
			var got map[string]any
			ExpectWithOffset(2, ws.ReadJSON(&got)).To(Succeed())
			if got["id"] == m["id"] {
				return got
			}
		}
	}
	call(rpc(0.0, "initialize", map[string]any{"protocolVersion": 1}))
	res := call(rpc(1.0, "session/new", map[string]any{"cwd": e.cwd, "mcpServers": []any{}}))["result"].(map[string]any)
	return ws, res["sessionId"].(string)
}

var _ = Describe("WebSocket on /acp", func() {
	It("upgrades to 101 with Acp-Connection-Id and runs a prompt with a permission request over text frames", func() {
		e := startEnv(httpsse.Config{})
		e.fake.Script(
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "touch", Arguments: `{"path":"a.txt"}`}}},
			llmtest.Reply{Text: "Touched over a WebSocket."},
		)
		c := e.ws(nil, "acp")
		Expect(c.resp.StatusCode).To(Equal(http.StatusSwitchingProtocols))
		Expect(c.resp.Header.Get("Acp-Connection-Id")).To(MatchRegexp(uuidV4.String()))
		Expect(c.ws.Subprotocol()).To(Equal("acp"))
		Expect(e.metrics()).To(And(ContainSubstring("iaccode_http_websockets 1"), ContainSubstring("iaccode_http_streams 1"),
			ContainSubstring(`iaccode_http_request_duration_seconds_count{code="101",route="get_acp"} 1`)))

		By("initialize comes first: anything before it is refused")
		c.send(rpc(7, "session/new", map[string]any{"cwd": e.cwd}))
		r := c.until(isResponse(7))
		Expect(r[0]["error"]).To(HaveKeyWithValue("code", -32600.0))
		c.initialize()

		By("binary frames are ignored; bad text frames get JSON-RPC errors")
		c.sendRaw(websocket.BinaryMessage, []byte(`{"jsonrpc":"2.0","id":99,"method":"session/list","params":{}}`))
		c.sendRaw(websocket.TextMessage, []byte(`{not json`))
		r = c.until(func(m map[string]any) bool { return m["error"] != nil })
		Expect(r).To(HaveLen(1), "the binary frame got no answer")
		Expect(r[0]["id"]).To(BeNil())
		Expect(r[0]["error"]).To(HaveKeyWithValue("code", -32700.0))
		c.sendRaw(websocket.TextMessage, []byte(`[{"jsonrpc":"2.0","id":5,"method":"session/list","params":{}}]`))
		r = c.until(func(m map[string]any) bool { return m["error"] != nil })
		Expect(r[0]["error"]).To(HaveKeyWithValue("code", -32600.0))

		By("session/new, then a prompt whose tool asks permission over the socket")
		sid := c.newSession(2, e.cwd)
		c.send(rpc(3, "session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": "Touch a.txt"}}}))
		before := c.until(isMethod("session/request_permission"))
		perm := before[len(before)-1]
		Expect(perm["params"]).To(HaveKeyWithValue("sessionId", sid))
		c.send(map[string]any{"jsonrpc": "2.0", "id": perm["id"],
			"result": map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}}})
		after := c.until(isResponse(3))
		Expect(after[len(after)-1]["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(wsText(after)).To(Equal("Touched over a WebSocket."))

		By("the connection id is not an HTTP connection")
		id := c.resp.Header.Get("Acp-Connection-Id")
		p := e.post(rpc(4, "session/list", map[string]any{}), "Acp-Connection-Id", id)
		Expect(p.status).To(Equal(http.StatusBadRequest))
		Expect(e.do(http.MethodGet, "/acp", nil, "Acp-Connection-Id", id).status).To(Equal(http.StatusBadRequest))

		By("the client's close ends the connection")
		Expect(c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))).To(Succeed())
		Expect(c.closeCode(5 * time.Second)).To(Equal(websocket.CloseNormalClosure))
		Eventually(e.metrics, 5*time.Second).Should(And(ContainSubstring("iaccode_http_websockets 0"),
			ContainSubstring("iaccode_http_streams 0"), ContainSubstring(`iaccode_http_connections_closed_total{reason="websocket_closed"} 1`)))
	})

	It("decides the token before the upgrade: 401 without it, header or acp.bearer.<token> subprotocol, never echoed", func() {
		e := startEnv(httpsse.Config{Token: "s3cret"})
		for _, attempt := range []struct {
			hdr       http.Header
			protocols []string
		}{
			{nil, nil},
			{nil, []string{"acp"}},
			{http.Header{"Authorization": {"Bearer wrong"}}, nil},
			{nil, []string{"acp", "acp.bearer.wrong"}},
		} {
			ws, resp, err := e.dialWS(attempt.hdr, attempt.protocols, nil)
			Expect(err).To(MatchError(websocket.ErrBadHandshake))
			Expect(ws).To(BeNil())
			Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
			Expect(resp.Header.Get("Acp-Connection-Id")).To(BeEmpty())
			b, _ := io.ReadAll(resp.Body)
			Expect(string(b)).To(Equal(`{"error":"Unauthorized"}`))
		}

		byHeader := e.ws(http.Header{"Authorization": {"Bearer s3cret"}})
		byHeader.initialize()

		byProtocol := e.ws(nil, "acp", "acp.bearer.s3cret")
		Expect(byProtocol.resp.Header.Values("Sec-WebSocket-Protocol")).To(Equal([]string{"acp"}))
		Expect(byProtocol.ws.Subprotocol()).To(Equal("acp"))
		byProtocol.initialize()

		By("the subprotocol carries a token only on an upgrade")
		r := e.post(rpc(1, "initialize", map[string]any{"protocolVersion": 1}), "Sec-WebSocket-Protocol", "acp.bearer.s3cret")
		Expect(r.status).To(Equal(http.StatusUnauthorized))
		Expect(e.logs.String()).NotTo(ContainSubstring("s3cret"))
	})

	It("refuses a foreign Origin or Host with 403 before the upgrade, and accepts a listed origin", func() {
		e := startEnv(httpsse.Config{AllowedOrigins: []string{"https://ide.example"}})
		_, resp, err := e.dialWS(http.Header{"Origin": {"https://evil.example"}}, nil, nil)
		Expect(err).To(MatchError(websocket.ErrBadHandshake))
		Expect(resp.StatusCode).To(Equal(http.StatusForbidden))
		b, _ := io.ReadAll(resp.Body)
		Expect(string(b)).To(Equal(`{"error":"Origin not allowed"}`))

		_, resp, err = e.dialWS(http.Header{"Host": {"rebound.example:8765"}}, nil, nil)
		Expect(err).To(MatchError(websocket.ErrBadHandshake))
		Expect(resp.StatusCode).To(Equal(http.StatusForbidden))

		c := e.ws(http.Header{"Origin": {"https://ide.example"}})
		Expect(c.resp.Header.Get("Access-Control-Allow-Origin")).To(Equal("https://ide.example"))
		c.initialize()
		Expect(e.metrics()).To(ContainSubstring("iaccode_http_websockets 1"))
	})

	It("closes with 1009 on a frame over 4 MiB", func() {
		e := startEnv(httpsse.Config{})
		c := e.ws(nil)
		c.initialize()
		big := `{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"` + strings.Repeat("x", 4<<20) + `"}}`
		c.sendRaw(websocket.TextMessage, []byte(big))
		Expect(c.closeCode(10 * time.Second)).To(Equal(websocket.CloseMessageTooBig))
		Eventually(e.metrics, 5*time.Second).Should(ContainSubstring("iaccode_http_websockets 0"))

		By("a message just under the limit is served")
		c = e.ws(nil)
		c.initialize()
		c.send(rpc(3, "session/new", map[string]any{"cwd": e.cwd, "mcpServers": []any{}, "_meta": map[string]any{"pad": strings.Repeat("y", 4<<20-200)}}))
		r := c.until(isResponse(3))
		Expect(r[len(r)-1]["result"]).To(HaveKey("sessionId"))
	})

	It("pings an idle socket and keeps it while pongs come back", func() {
		// The dead-peer window (2.5 intervals, 625 ms) outlasts a stall of
		// this process under load; at 100 ms (250 ms) one closed the socket.
		e := startEnv(httpsse.Config{WSPingInterval: 250 * time.Millisecond})
		c := e.ws(nil)
		c.initialize()
		time.Sleep(2500 * time.Millisecond) // 4 dead-peer windows of silence from the client's side
		Expect(c.pings.Load()).To(BeNumerically(">=", 5))
		sid := c.newSession(2, e.cwd)
		Expect(sid).NotTo(BeEmpty())
	})

	It("detects a dead TCP peer (nothing comes back, not even a FIN) within 2.5 ping intervals", func() {
		e := startEnv(httpsse.Config{WSPingInterval: 200 * time.Millisecond, DetachedTurnMax: -1})
		e.fake.Script(llmtest.Reply{Text: "never read", Hang: true, AfterChunks: 1})
		var freeze func()
		dial := func(network, addr string) (net.Conn, error) {
			var nc net.Conn
			nc, freeze = frozenProxy(addr)
			return nc, nil
		}
		ws, resp, err := e.dialWS(nil, nil, dial)
		Expect(err).NotTo(HaveOccurred())
		c := startWSClient(ws, resp)
		c.initialize()
		sid := c.newSession(2, e.cwd)
		c.send(rpc(3, "session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": "hi"}}}))
		Eventually(e.metrics, 5*time.Second).Should(ContainSubstring("iaccode_running_turns 1"))
		freeze()
		// Closed by the pings' read deadline, 2.5 intervals after the last
		// sign of life (the log says so); not by the kernel, which would
		// take minutes to give up on a peer that sends nothing back. How
		// soon the close is seen here depends on the machine's load: the
		// bound only tells the two apart.
		Eventually(e.metrics, 10*time.Second, 20*time.Millisecond).Should(ContainSubstring("iaccode_http_websockets 0"))
		Expect(e.logs.String()).To(And(ContainSubstring("websocket peer does not answer pings: closed"),
			ContainSubstring(`"silent_for":500`)))
		Expect(e.metrics()).To(ContainSubstring(`iaccode_http_connections_closed_total{reason="websocket_closed"} 1`))
		By("its running turn is cancelled with it (no detached turns)")
		Eventually(e.metrics, 5*time.Second).Should(ContainSubstring("iaccode_running_turns 0"))
	})

	It("closes a socket whose client stops reading once its bounded buffer is full (turns cancelled without detached turns)", func() {
		e := startEnv(httpsse.Config{ReplayBuffer: 200, DetachedTurnMax: -1})
		e.fake.Script(llmtest.Reply{Chunks: 3000, ChunkText: strings.Repeat("z", 16<<10)})
		ws, sid := dialSlowReader(e)
		Expect(ws.WriteJSON(rpc(2, "session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": "flood"}}}))).To(Succeed())
		Eventually(e.metrics, 20*time.Second, 50*time.Millisecond).Should(
			ContainSubstring(`iaccode_http_connections_closed_total{reason="overflow"} 1`))
		Eventually(e.metrics, 10*time.Second).Should(And(ContainSubstring("iaccode_http_websockets 0"),
			ContainSubstring("iaccode_http_streams 0"), ContainSubstring("iaccode_running_turns 0")))
		Expect(e.logs.String()).To(ContainSubstring("buffer full, closing the connection"))
		// The kernel still delivers what the closed socket had queued, at
		// the pace of the client's tiny window: the server's part is done.
	})

	It("ends its sockets with 1001 at shutdown", func() {
		e := startEnv(httpsse.Config{})
		c := e.ws(nil)
		c.initialize()
		go func() {
			defer GinkgoRecover()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			Expect(e.edge.Shutdown(ctx)).To(Succeed())
		}()
		Expect(c.closeCode(5 * time.Second)).To(Equal(websocket.CloseGoingAway))
	})
})

// frozenProxy is a loopback TCP proxy to addr; freeze makes it stop
// forwarding in both directions while keeping both sockets open: the
// server's peer is alive for TCP but answers nothing.
func frozenProxy(addr string) (client net.Conn, freeze func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err == nil {
			accepted <- nc
		}
		_ = ln.Close()
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	Expect(err).NotTo(HaveOccurred())
	inner := <-accepted
	server, err := net.Dial("tcp", addr)
	Expect(err).NotTo(HaveOccurred())
	var frozen atomic.Bool
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				return
			}
			if frozen.Load() {
				continue // swallowed
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
	go pipe(server, inner)
	go pipe(inner, server)
	DeferCleanup(func() { _ = inner.Close(); _ = server.Close(); _ = client.Close() })
	return client, func() { frozen.Store(true) }
}
