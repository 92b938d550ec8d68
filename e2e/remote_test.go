package e2e

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// wsPeer is one ACP connection over a WebSocket on /acp with a raw client:
// every frame each way goes through the agent's schema checker.
type wsPeer struct {
	ws     *websocket.Conn
	resp   *http.Response
	check  *wireChecker
	nextID int
	msgs   chan map[string]any
	closed chan struct{}
	err    error
	wmu    sync.Mutex
	got    []map[string]any
}

// activeTurnOf is the _meta.activeTurn of a load or resume answer.
func activeTurnOf(res map[string]any) any {
	meta, _ := res["_meta"].(map[string]any)
	return meta["activeTurn"]
}

// isTurnEnd: m is the session_info_update saying the running turn ended.
func isTurnEnd(m map[string]any) bool {
	if m["method"] != "session/update" {
		return false
	}
	u := m["params"].(map[string]any)["update"].(map[string]any)
	meta, _ := u["_meta"].(map[string]any)
	v, has := meta["activeTurn"]
	return u["sessionUpdate"] == "session_info_update" && has && v == nil
}

func wsURL(base string) string { return "ws" + strings.TrimPrefix(base, "http") + "/acp" }

// dialWS upgrades GET /acp at base; dial (nil: plain TCP) makes the socket.
func dialWS(base string, hdr http.Header, dial func(network, addr string) (net.Conn, error)) (*websocket.Conn, *http.Response, error) {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, NetDial: dial}
	return d.Dial(wsURL(base), hdr)
}

// openWS opens and initializes a WebSocket connection whose frames its own
// checker validates (request ids are per connection).
func openWS(base string, hdr http.Header, dial func(network, addr string) (net.Conn, error)) *wsPeer {
	ws, resp, err := dialWS(base, hdr, dial)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	check := newWireChecker(schemaV1)
	p := &wsPeer{ws: ws, resp: resp, check: check, msgs: make(chan map[string]any, 10_000), closed: make(chan struct{})}
	go func() {
		defer close(p.closed)
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				p.err = err
				return
			}
			check.ServerSent(data)
			var m map[string]any
			if json.Unmarshal(data, &m) == nil {
				p.msgs <- m
			}
		}
	}()
	DeferCleanup(func() { _ = ws.Close() })
	p.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "e2e-ws", "version": "1"}})
	return p
}

func (p *wsPeer) send(method string, params any) float64 {
	p.nextID++
	p.write(jrpc(p.nextID, method, params))
	return float64(p.nextID)
}

// write sends one message as a text frame, schema-checked.
func (p *wsPeer) write(msg map[string]any) {
	b, err := json.Marshal(msg)
	ExpectWithOffset(2, err).NotTo(HaveOccurred())
	p.check.ClientSent(b)
	p.wmu.Lock()
	defer p.wmu.Unlock()
	ExpectWithOffset(2, p.ws.WriteMessage(websocket.TextMessage, b)).To(Succeed())
}

// allow answers the session/request_permission request perm with allow_once.
func (p *wsPeer) allow(perm map[string]any) {
	p.write(map[string]any{"jsonrpc": "2.0", "id": perm["id"],
		"result": map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}}})
}

// kill closes the socket's TCP connection with a reset, no close frame: a
// client process that died.
func (p *wsPeer) kill() {
	tcp := p.ws.NetConn().(*net.TCPConn)
	ExpectWithOffset(1, tcp.SetLinger(0)).To(Succeed())
	ExpectWithOffset(1, tcp.Close()).To(Succeed())
}

// until reads messages up to the first that matches, within 20 s.
func (p *wsPeer) until(what string, match func(map[string]any) bool) map[string]any {
	return p.read(what, match, false)
}

// untilStalled reads messages up to the first that matches, failing only
// when none at all comes for 20 s: for a wait whose length depends on how
// many other clients the server is busy with, not on this one.
func (p *wsPeer) untilStalled(what string, match func(map[string]any) bool) map[string]any {
	return p.read(what, match, true)
}

// read reads messages up to the first that matches; its 20 s start again
// with each message read when stalled is set.
func (p *wsPeer) read(what string, match func(map[string]any) bool, stalled bool) map[string]any {
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	for {
		select {
		case m := <-p.msgs:
			p.got = append(p.got, m)
			if match(m) {
				return m
			}
			if stalled {
				timer.Reset(20 * time.Second)
			}
		case <-p.closed:
			Fail("websocket closed before " + what + ": " + errorText(p.err))
		case <-timer.C:
			if stalled {
				Fail("nothing for 20 s before " + what)
			}
			Fail("no " + what + " within 20 s")
		}
	}
}

// seen is the first message read so far that matches, else the next one
// that does (a server request may come before the answer being waited for).
func (p *wsPeer) seen(what string, match func(map[string]any) bool) map[string]any {
	for _, m := range p.got {
		if match(m) {
			return m
		}
	}
	return p.until(what, match)
}

func errorText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func (p *wsPeer) call(method string, params any) map[string]any {
	id := p.send(method, params)
	m := p.until("answer to "+method, func(m map[string]any) bool { return m["id"] == id && m["method"] == nil })
	ExpectWithOffset(1, m).To(HaveKey("result"), "answer to %s", method)
	r, _ := m["result"].(map[string]any)
	return r
}

func (p *wsPeer) prompt(sid, text string) float64 {
	return p.send("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": text}}})
}

// text is the agent's message text in the messages read so far, from from on.
func (p *wsPeer) text(from int) string {
	var b strings.Builder
	for _, m := range p.got[from:] {
		if isAgentChunk(m) {
			b.WriteString(m["params"].(map[string]any)["update"].(map[string]any)["content"].(map[string]any)["text"].(string))
		}
	}
	return b.String()
}

// replayedOf is the "replayed" updates of a load scenario's result.
func replayedOf(run tsRun) []map[string]any {
	var out []map[string]any
	for _, u := range run.Result["replayed"].([]any) {
		out = append(out, u.(map[string]any))
	}
	return out
}

// silentProxy is a loopback TCP proxy to addr that, once frozen, forwards
// nothing either way while keeping both sockets open: a peer that is gone
// without a FIN (a sleeping laptop, a cut network).
func silentProxy(addr string) (dial func(network, addr string) (net.Conn, error), freeze func()) {
	var frozen atomic.Bool
	dial = func(network, _ string) (net.Conn, error) {
		a, b := net.Pipe()
		server, err := net.Dial(network, addr)
		if err != nil {
			return nil, err
		}
		DeferCleanup(func() { _ = server.Close(); _ = b.Close() })
		pipe := func(dst, src net.Conn) {
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				if err != nil {
					return
				}
				if !frozen.Load() {
					if _, err := dst.Write(buf[:n]); err != nil {
						return
					}
				}
			}
		}
		go pipe(server, b)
		go pipe(b, server)
		return a, nil
	}
	return dial, func() { frozen.Store(true) }
}

var _ = Describe("WebSocket on /acp", Label("e2e", "remote"), func() {
	var (
		fake *llmtest.Server
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
	})

	wsArgs := func(a *httpAgent, auth, scenario string, extra ...string) []string {
		return append([]string{"--transport", "ws", "--ws-url", wsURL(a.base), "--ws-auth", auth, "--scenario", scenario, "--cwd", cwd}, extra...)
	}

	It("runs the whole flow with the TypeScript SDK's WebSocket client: token in a header, then in the subprotocol on a new connection that loads the session", Label("node"), func() {
		fake.Script(
			toolCallReply("call_w", "write_file", map[string]any{"path": "ws.txt", "content": "over a websocket"}),
			llmtest.Reply{Text: "Done writing."},
			llmtest.Reply{Text: "one two three four", Hang: true, AfterChunks: 3},
			llmtest.Reply{Text: "Loaded over a websocket."},
		)
		a := startHTTPAgent(agentEnv(fake), "tok-ws")
		env := agentEnv(fake, "IACCODE_ACP_HTTP_TOKEN=tok-ws")
		run := runTSClient(env, wsArgs(a, "header", "flow", "--text", "write it", "--text", "count slowly")...)
		Expect(run.Result["permitted"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(run.Result["cancelled"]).To(HaveKeyWithValue("stopReason", "cancelled"))
		Expect(run.PermissionRequests).To(HaveLen(1))
		content, err := os.ReadFile(filepath.Join(cwd, "ws.txt"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(content)).To(Equal("over a websocket"))
		ws := run.Raw["ws"].(map[string]any)
		Expect(ws["status"]).To(Equal(101.0))
		Expect(ws["connectionId"]).To(MatchRegexp(`^[0-9a-f-]{36}$`))
		Expect(ws["protocol"]).To(Equal("acp"))
		sid := run.Result["sessionId"].(string)

		run = runTSClient(env, wsArgs(a, "subprotocol", "load", "--session-id", sid, "--text", "still there?")...)
		Expect(run.Result["prompt"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		replayed := replayedOf(run)
		Expect(chunkText(replayed, "agent_message_chunk")).To(HavePrefix("Done writing.one"))
		Expect(chunkText(run.Updates, "agent_message_chunk")).To(HaveSuffix("Loaded over a websocket."))
		Expect(run.Raw["ws"]).To(HaveKeyWithValue("protocol", "acp"))
		Expect(a.stderr.String()).NotTo(ContainSubstring("tok-ws"))
		a.sigterm(10 * time.Second)
	})

	It("decides before the upgrade: 401 without the token, 403 for a foreign Origin; an oversized frame closes with 1009", func() {
		a := startHTTPAgent(agentEnv(fake, "IAC_CODE_ALLOWED_ORIGINS=https://ide.example"), "tok-ws")
		for _, hdr := range []http.Header{nil, {"Authorization": {"Bearer wrong"}}, {"Sec-WebSocket-Protocol": {"acp, acp.bearer.wrong"}}} {
			_, resp, err := dialWS(a.base, hdr, nil)
			Expect(err).To(MatchError(websocket.ErrBadHandshake))
			Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
			b, _ := io.ReadAll(resp.Body)
			Expect(string(b)).To(Equal(`{"error":"Unauthorized"}`))
		}
		_, resp, err := dialWS(a.base, http.Header{"Origin": {"https://evil.example"}, "Authorization": {"Bearer tok-ws"}}, nil)
		Expect(err).To(MatchError(websocket.ErrBadHandshake))
		Expect(resp.StatusCode).To(Equal(http.StatusForbidden))
		b, _ := io.ReadAll(resp.Body)
		Expect(string(b)).To(Equal(`{"error":"Origin not allowed"}`))

		p := openWS(a.base, http.Header{"Origin": {"https://ide.example"}, "Sec-WebSocket-Protocol": {"acp, acp.bearer.tok-ws"}}, nil)
		Expect(p.resp.Header.Get("Sec-WebSocket-Protocol")).To(Equal("acp"))
		sid := p.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})["sessionId"]
		Expect(sid).NotTo(BeEmpty())
		big := `{"jsonrpc":"2.0","id":9,"method":"session/list","params":{"cwd":"` + strings.Repeat("x", 4<<20) + `"}}`
		Expect(p.ws.WriteMessage(websocket.TextMessage, []byte(big))).To(Succeed())
		Eventually(p.closed, 10*time.Second).Should(BeClosed())
		var ce *websocket.CloseError
		Expect(errors.As(p.err, &ce)).To(BeTrue(), errorText(p.err))
		Expect(ce.Code).To(Equal(websocket.CloseMessageTooBig))
		Expect(p.check.Violations()).To(BeEmpty())
		Expect(a.stderr.String()).NotTo(ContainSubstring("tok-ws"))
	})

	It("notices a killed client at once and a silent one within 2.5 ping intervals; with IAC_CODE_DETACHED_TURN_MAX=0 their running turns end", func() {
		fake.SetDefault(llmtest.Reply{Text: "never finished", Hang: true, AfterChunks: 3})
		a := startHTTPAgent(agentEnv(fake, "IAC_CODE_WS_PING_INTERVAL=200ms", "IAC_CODE_DETACHED_TURN_MAX=0"), "")
		running := func(p *wsPeer) {
			sid := p.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})["sessionId"].(string)
			p.prompt(sid, "go on")
			p.until("first chunk", isAgentChunk)
		}

		By("a client whose process dies: its kernel resets the connection")
		killed := openWS(a.base, nil, nil)
		running(killed)
		Expect(a.metric("iaccode_http_websockets")).To(Equal(1.0))
		Expect(a.metric("iaccode_running_turns")).To(Equal(1.0))
		killed.kill()
		Eventually(func() float64 { return a.metric("iaccode_http_websockets") }, 5*time.Second, 20*time.Millisecond).Should(BeZero())
		Eventually(func() float64 { return a.metric("iaccode_running_turns") }, 5*time.Second, 20*time.Millisecond).Should(BeZero())

		By("a client that is gone without a FIN: its pongs stop")
		dial, freeze := silentProxy(strings.TrimPrefix(a.base, "http://"))
		silent := openWS(a.base, nil, dial)
		running(silent)
		time.Sleep(700 * time.Millisecond) // pings and pongs keep it alive past the dead-peer window
		Expect(a.metric("iaccode_http_websockets")).To(Equal(1.0))
		freeze()
		start := time.Now()
		Eventually(func() float64 { return a.metric("iaccode_http_websockets") }, 5*time.Second, 20*time.Millisecond).Should(BeZero())
		Expect(time.Since(start)).To(BeNumerically("<", 2*time.Second))
		Eventually(func() float64 { return a.metric("iaccode_running_turns") }, 5*time.Second, 20*time.Millisecond).Should(BeZero())
		Expect(a.metric(`iaccode_http_connections_closed_total{reason="websocket_closed"}`)).To(Equal(2.0))
		Expect(killed.check.Violations()).To(BeEmpty())
		Expect(silent.check.Violations()).To(BeEmpty())
	})
})

var _ = Describe("WebSocket on /acp across pods", Label("e2e", "remote", "cluster", "postgres"), func() {
	var (
		fake *llmtest.Server
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
	})

	It("serves the TypeScript SDK's WebSocket client through a round-robin proxy; a load on another pod takes the session over", Label("node"), func() {
		fake.Script(
			toolCallReply("call_w", "write_file", map[string]any{"path": "ws.txt", "content": "x"}),
			llmtest.Reply{Text: "Done writing."},
			llmtest.Reply{Text: "one two three four", Hang: true, AfterChunks: 3},
			llmtest.Reply{Text: "Loaded on another pod."},
		)
		cl := newCluster(fake, 3)
		lb := newRoundRobin(cl.pods)
		args := func(scenario string, extra ...string) []string {
			return append([]string{"--transport", "ws", "--ws-url", wsURL(lb.base), "--scenario", scenario, "--cwd", cwd}, extra...)
		}
		run := runTSClient(agentEnv(fake), args("flow")...)
		Expect(run.Result["permitted"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(run.Result["cancelled"]).To(HaveKeyWithValue("stopReason", "cancelled"))
		first := lb.lastServed()
		sid := run.Result["sessionId"].(string)
		run = runTSClient(agentEnv(fake), args("load", "--session-id", sid, "--text", "still there?")...)
		Expect(lb.lastServed()).NotTo(Equal(first), "the second WebSocket landed on another pod")
		Expect(run.Result["prompt"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		replayed := replayedOf(run)
		Expect(chunkText(replayed, "agent_message_chunk")).To(HavePrefix("Done writing."))
		Expect(chunkText(run.Updates, "agent_message_chunk")).To(HaveSuffix("Loaded on another pod."))
	})

	It("loses nothing with 1,000 WebSockets over 3 pods, one prompt each, all at once; sessions loaded on another pod go on there", func() {
		const n, dialing = 1000, 64
		raiseFileLimit(4*n + 1024) // the sockets, the model's connections, the pods'
		var words []string
		for i := range 40 {
			words = append(words, "w"+jsonText(i)+" ")
		}
		want := strings.Join(words, "")
		fake.SetDefault(llmtest.Reply{TextChunks: words, Delay: 2 * time.Millisecond})
		cl := newCluster(fake, 3)
		// prompt runs one prompt on p and checks its whole answer. A
		// thousand turns at once take the pods as long as the machine's load
		// makes them: the wait fails when its socket stalls, not after a
		// fixed time.
		prompt := func(p *wsPeer, sid string) {
			from := len(p.got)
			id := p.prompt(sid, "stream")
			m := p.untilStalled("prompt answer", func(m map[string]any) bool { return m["id"] == id && m["method"] == nil })
			ExpectWithOffset(1, m["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
			ExpectWithOffset(1, p.text(from)).To(Equal(want), "every chunk exactly once, in order")
			ExpectWithOffset(1, p.check.Violations()).To(BeEmpty())
		}
		sids := make([]string, n)
		// The sockets open and create their sessions dialing at a time; the
		// prompts all start once every socket is open.
		slots := make(chan struct{}, dialing)
		var opened, wg sync.WaitGroup
		start := make(chan struct{})
		opened.Add(n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				ready := sync.OnceFunc(opened.Done) // also when this one fails
				defer ready()
				slots <- struct{}{}
				p := func() *wsPeer {
					defer func() { <-slots }()
					p := openWS(cl.pods[i%3].base, nil, nil)
					sids[i] = p.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})["sessionId"].(string)
					return p
				}()
				ready()
				<-start
				prompt(p, sids[i])
				Expect(p.ws.Close()).To(Succeed())
			}()
		}
		t0 := time.Now()
		opened.Wait()
		GinkgoWriter.Printf("%d sockets open with their sessions in %v\n", n, time.Since(t0))
		t0 = time.Now()
		close(start)
		wg.Wait()
		GinkgoWriter.Printf("%d prompts answered in %v\n", n, time.Since(t0))
		Expect(sids).NotTo(ContainElement(""))

		By("every fiftieth session, loaded on the next pod, goes on there")
		for i := 0; i < n; i += 50 {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				p := openWS(cl.pods[(i+1)%3].base, nil, nil)
				p.call("session/load", loadParams(sids[i], cwd))
				Expect(p.text(0)).To(Equal(want), "the first answer is replayed once")
				prompt(p, sids[i])
			}()
		}
		wg.Wait()
		// A pod counts a socket closed when it reads the client's end, which
		// a busy pod does some time after the client closed it.
		Eventually(func() float64 {
			var closed float64
			for _, p := range cl.pods {
				closed += p.metric(`iaccode_http_connections_closed_total{reason="websocket_closed"}`)
			}
			return closed
		}, 30*time.Second, 100*time.Millisecond).Should(BeNumerically(">=", n))
	})
})

var _ = Describe("detached turns (IAC_CODE_DETACHED_TURN_MAX)", Label("e2e", "remote"), func() {
	var (
		fake *llmtest.Server
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
	})
	words := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, "w"+jsonText(i)+" ")
		}
		return out
	}
	agentText := func(evs []sseEvent) string {
		var msgs []map[string]any
		for _, ev := range evs {
			msgs = append(msgs, ev.msg)
		}
		return (&wsPeer{got: msgs}).text(0)
	}

	// sseDropThenLoad: an SSE client drops mid-turn and stays away past the
	// replay window; a new connection then loads the session. It returns
	// the load's answer, the new connection's events up to it, the agent
	// and the new connection.
	sseDropThenLoad := func(text []string, cancelled bool, env ...string) (map[string]any, []sseEvent, *httpAgent, string, *sseStream, string) {
		fake.Script(llmtest.Reply{TextChunks: text, Delay: 200 * time.Millisecond})
		a := startHTTPAgent(agentEnv(fake, append([]string{"IAC_CODE_HTTP_REPLAY_MAX_AGE=1s"}, env...)...), "")
		conn := a.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1})).header.Get("Acp-Connection-Id")
		s := a.stream(conn)
		a.accepted(conn, jrpc(2, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))
		evs := s.until("session", respTo(2))
		sid := evs[len(evs)-1].msg["result"].(map[string]any)["sessionId"].(string)
		a.accepted(conn, jrpc("prompt-α", "session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": "count slowly"}}}))
		s.until("first chunk", isAgentChunk)
		s.cancel()
		s.resp.Body.Close()
		time.Sleep(1500 * time.Millisecond) // past the replay window
		if cancelled {
			Eventually(func() float64 { return a.metric("iaccode_running_turns") }, 5*time.Second, 20*time.Millisecond).Should(BeZero())
		} else {
			Expect(a.metric("iaccode_running_turns")).To(Equal(1.0))
		}

		other := a.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1})).header.Get("Acp-Connection-Id")
		s2 := a.stream(other)
		a.accepted(other, jrpc(2, "session/load", loadParams(sid, cwd)))
		got := s2.until("load answer", respTo(2))
		res, _ := got[len(got)-1].msg["result"].(map[string]any)
		Expect(res).NotTo(BeNil(), "load answered: %v", got[len(got)-1].msg)
		return res, got, a, other, s2, sid
	}

	It("SSE: a client gone past the replay window; a new connection's load gets activeTurn, the message so far, the rest live once, and the turn's end", func() {
		text := words(12)
		res, got, a, other, s2, sid := sseDropThenLoad(text, false)
		active, ok := activeTurnOf(res).(map[string]any)
		Expect(ok).To(BeTrue(), "activeTurn in the load answer: %v", res)
		Expect(active["promptRequest"]).To(Equal("prompt-α"))
		replayed := agentText(got)
		Expect(replayed).NotTo(BeEmpty())
		Expect(strings.HasPrefix(strings.Join(text, ""), replayed)).To(BeTrue(), "replayed %q", replayed)
		Expect(replayed).NotTo(Equal(strings.Join(text, "")), "the turn still ran")
		rest := s2.until("the turn's end", isTurnEnd)
		Expect(replayed+agentText(rest)).To(Equal(strings.Join(text, "")), "the whole answer exactly once, in order")
		a.accepted(other, jrpc(3, "session/resume", loadParams(sid, cwd)))
		after := s2.until("resume answer", respTo(3))
		Expect(activeTurnOf(after[len(after)-1].msg["result"].(map[string]any))).To(BeNil())
		Expect(a.check.Violations()).To(BeEmpty())
	})

	It("SSE with IAC_CODE_DETACHED_TURN_MAX=0: the turn was cancelled with the replay window; the load shows no activeTurn and the partial answer", func() {
		text := words(12)
		res, got, a, _, _, _ := sseDropThenLoad(text, true, "IAC_CODE_DETACHED_TURN_MAX=0")
		Expect(activeTurnOf(res)).To(BeNil())
		Expect(a.metric("iaccode_running_turns")).To(BeZero())
		replayed := agentText(got)
		Expect(strings.HasPrefix(strings.Join(text, ""), replayed)).To(BeTrue(), "replayed %q", replayed)
		Expect(replayed).NotTo(Equal(strings.Join(text, "")), "cut short")
		Expect(a.check.Violations()).To(BeEmpty())
	})
	It("SSE: a client gone past the replay window comes back with Last-Event-ID to the rest of its turn, exactly once, and answers the permission asked meanwhile", func() {
		text := words(8)
		fake.Script(
			llmtest.Reply{TextChunks: text, Delay: 300 * time.Millisecond,
				ToolCalls: []llmtest.ToolCall{{ID: "w1", Name: "write_file", Arguments: `{"path":"away.txt","content":"while away"}`}}},
			llmtest.Reply{Text: "Written."},
		)
		a := startHTTPAgent(agentEnv(fake, "IAC_CODE_HTTP_REPLAY_MAX_AGE=1s"), "")
		conn := a.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1})).header.Get("Acp-Connection-Id")
		s := a.stream(conn)
		a.accepted(conn, jrpc(2, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))
		evs := s.until("session", respTo(2))
		sid := evs[len(evs)-1].msg["result"].(map[string]any)["sessionId"]
		a.accepted(conn, jrpc(3, "session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": "write it"}}}))
		seen := s.until("first chunk", isAgentChunk)
		last := seen[len(seen)-1].id

		By("the client goes away for more than two replay windows")
		s.cancel()
		s.resp.Body.Close()
		time.Sleep(2500 * time.Millisecond)
		Expect(a.metric("iaccode_running_turns")).To(Equal(1.0))
		Expect(a.metric("iaccode_http_abandoned_total")).To(BeZero())

		By("it comes back on the same connection with Last-Event-ID")
		back := a.stream(conn, "Last-Event-ID", last)
		ask := back.until("the permission request asked while it was away", methodIs("session/request_permission"))
		perm := ask[len(ask)-1].msg
		a.accepted(conn, map[string]any{"jsonrpc": "2.0", "id": perm["id"],
			"result": map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}}})
		rest := back.until("the prompt's answer", respTo(3))
		Expect(rest[len(rest)-1].msg["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(agentText(seen) + agentText(ask) + agentText(rest)).To(Equal(strings.Join(text, "") + "Written."))
		content, err := os.ReadFile(filepath.Join(cwd, "away.txt"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(content)).To(Equal("while away"))
		Expect(a.check.Violations()).To(BeEmpty())
	})

	It("WebSocket across pods: the socket dies mid-turn, the turn runs to its end on its pod, a load on another pod replays the whole answer once", Label("cluster", "postgres"), func() {
		text := words(10)
		fake.Script(llmtest.Reply{TextChunks: text, Delay: 100 * time.Millisecond}, llmtest.Reply{Text: "Still here."})
		cl := newCluster(fake, 2)
		home, away := cl.pods[0], cl.pods[1]
		p := openWS(home.base, nil, nil)
		sid := p.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})["sessionId"].(string)
		p.prompt(sid, "stream slowly")
		p.until("first chunk", isAgentChunk)
		p.kill()
		Eventually(func() float64 { return home.metric("iaccode_http_detached_total") }, 5*time.Second, 20*time.Millisecond).Should(Equal(1.0))
		Expect(home.metric("iaccode_running_turns")).To(Equal(1.0))
		Eventually(func() float64 { return home.metric("iaccode_running_turns") }, 10*time.Second, 50*time.Millisecond).Should(BeZero())

		q := openWS(away.base, nil, nil)
		q.call("session/load", loadParams(sid, cwd))
		Expect(q.text(0)).To(Equal(strings.Join(text, "")), "the whole answer, once")
		from := len(q.got)
		id := q.prompt(sid, "still there?")
		m := q.until("prompt answer", func(m map[string]any) bool { return m["id"] == id && m["method"] == nil })
		Expect(m["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(q.text(from)).To(Equal("Still here."))
		Expect(p.check.Violations()).To(BeEmpty())
		Expect(q.check.Violations()).To(BeEmpty())
	})

	It("WebSocket across pods: a load on another pod while the detached turn runs gets activeTurn, the message so far, then the rest live, once; a session_info_update at the end", Label("cluster", "postgres"), func() {
		text := words(12)
		fake.Script(llmtest.Reply{TextChunks: text, Delay: 150 * time.Millisecond})
		cl := newCluster(fake, 2, "IAC_CODE_HTTP_REPLAY_MAX_AGE=1s")
		home, away := cl.pods[0], cl.pods[1]
		p := openWS(home.base, nil, nil)
		sid := p.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})["sessionId"].(string)
		promptID := p.prompt(sid, "stream slowly")
		p.until("first chunk", isAgentChunk)
		p.kill()
		Eventually(func() float64 { return home.metric("iaccode_http_detached_total") }, 5*time.Second, 20*time.Millisecond).Should(Equal(1.0))

		By("a new connection on the other pod loads the session mid-turn")
		q := openWS(away.base, nil, nil)
		res := q.call("session/load", loadParams(sid, cwd))
		active, ok := activeTurnOf(res).(map[string]any)
		Expect(ok).To(BeTrue(), "activeTurn in the load answer: %v", res)
		Expect(active["promptRequest"]).To(Equal(promptID), "the prompt's id as its client sent it")
		_, err := time.Parse(time.RFC3339, active["startedAt"].(string))
		Expect(err).NotTo(HaveOccurred())
		replayed := q.text(0)
		Expect(replayed).NotTo(BeEmpty(), "the message so far is in the replay")
		Expect(strings.HasPrefix(strings.Join(text, ""), replayed)).To(BeTrue(), "replayed %q", replayed)
		Expect(replayed).NotTo(Equal(strings.Join(text, "")), "the turn was still running")

		By("a list on the pod that runs the turn shows it")
		r := openWS(home.base, nil, nil)
		list := r.call("session/list", map[string]any{})
		Expect(list["sessions"]).To(ContainElement(And(HaveKeyWithValue("sessionId", sid),
			HaveKeyWithValue("_meta", HaveKeyWithValue("activeTurn", active)))))

		By("the rest comes live, then the turn's end")
		q.until("the turn's end", isTurnEnd)
		Expect(q.text(0)).To(Equal(strings.Join(text, "")), "replay + live: the whole answer exactly once, in order")

		By("afterwards no activeTurn")
		Expect(activeTurnOf(r.call("session/resume", loadParams(sid, cwd)))).To(BeNil())
		list = r.call("session/list", map[string]any{})
		Expect(list["sessions"]).To(ContainElement(And(HaveKeyWithValue("sessionId", sid), Not(HaveKey("_meta")))))
		for _, peer := range []*wsPeer{p, q, r} {
			Expect(peer.check.Violations()).To(BeEmpty())
		}
	})

	It("WebSocket across pods: the socket dies before the permission asked on it is answered; a load on another pod gets activeTurn and the same request, answers it, the tool runs, the turn ends with the whole answer once", Label("cluster", "postgres"), func() {
		text := words(6)
		fake.Script(
			llmtest.Reply{TextChunks: text, Delay: 50 * time.Millisecond,
				ToolCalls: []llmtest.ToolCall{{ID: "w1", Name: "write_file", Arguments: `{"path":"away.txt","content":"answered elsewhere"}`}}},
			llmtest.Reply{Text: "Written."},
		)
		cl := newCluster(fake, 2)
		home, away := cl.pods[0], cl.pods[1]
		p := openWS(home.base, nil, nil)
		sid := p.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})["sessionId"].(string)
		promptID := p.prompt(sid, "write it")
		asked := p.until("permission request", methodIs("session/request_permission"))
		p.kill()
		Eventually(func() float64 { return home.metric("iaccode_http_detached_total") }, 5*time.Second, 20*time.Millisecond).Should(Equal(1.0))
		Expect(home.metric("iaccode_running_turns")).To(Equal(1.0), "the turn waits for its permission")
		_, err := os.Stat(filepath.Join(cwd, "away.txt"))
		Expect(err).To(MatchError(os.ErrNotExist), "not written before the permission is given")

		By("a new connection on the other pod loads the session")
		q := openWS(away.base, nil, nil)
		res := q.call("session/load", loadParams(sid, cwd))
		active, ok := activeTurnOf(res).(map[string]any)
		Expect(ok).To(BeTrue(), "activeTurn in the load answer: %v", res)
		Expect(active["promptRequest"]).To(Equal(promptID))
		perm := q.seen("the permission request again", methodIs("session/request_permission"))
		toolCallID := func(m map[string]any) any {
			return m["params"].(map[string]any)["toolCall"].(map[string]any)["toolCallId"]
		}
		Expect(toolCallID(perm)).To(Equal(toolCallID(asked)), "the same request")
		Expect(perm["params"]).To(HaveKeyWithValue("sessionId", sid))
		q.allow(perm)

		By("the tool runs and the turn ends")
		q.until("the turn's end", isTurnEnd)
		content, err := os.ReadFile(filepath.Join(cwd, "away.txt"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(content)).To(Equal("answered elsewhere"))
		// The prompt's answer (end_turn) went to its connection, gone; the
		// new client sees the turn end as updates: the model's last reply
		// whole, then activeTurn null.
		Expect(q.text(0)).To(Equal(strings.Join(text, "")+"Written."), "the whole answer exactly once, in order")
		Expect(q.got).To(ContainElement(WithTransform(func(m map[string]any) any {
			if m["method"] != "session/update" {
				return nil
			}
			u := m["params"].(map[string]any)["update"].(map[string]any)
			return []any{u["sessionUpdate"], u["toolCallId"], u["status"]}
		}, Equal([]any{"tool_call_update", toolCallID(asked), "completed"}))), "the permitted tool ran")
		Eventually(func() float64 { return home.metric("iaccode_running_turns") }, 5*time.Second, 20*time.Millisecond).Should(BeZero())
		Expect(activeTurnOf(q.call("session/resume", loadParams(sid, cwd)))).To(BeNil())
		Expect(p.check.Violations()).To(BeEmpty())
		Expect(q.check.Violations()).To(BeEmpty())
	})

	It("WebSocket across pods: the new client on another pod cancels the detached turn", Label("cluster", "postgres"), func() {
		fake.Script(llmtest.Reply{Text: "one two three four", Hang: true, AfterChunks: 3})
		cl := newCluster(fake, 2)
		home, away := cl.pods[0], cl.pods[1]
		p := openWS(home.base, nil, nil)
		sid := p.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})["sessionId"].(string)
		p.prompt(sid, "never ends by itself")
		p.until("first chunk", isAgentChunk)
		p.kill()
		Eventually(func() float64 { return home.metric("iaccode_http_detached_total") }, 5*time.Second, 20*time.Millisecond).Should(Equal(1.0))
		Consistently(func() float64 { return home.metric("iaccode_running_turns") }, 500*time.Millisecond, 50*time.Millisecond).Should(Equal(1.0),
			"the hanging turn keeps running detached")

		q := openWS(away.base, nil, nil)
		res := q.call("session/load", loadParams(sid, cwd))
		Expect(activeTurnOf(res)).To(HaveKey("promptRequest"))
		q.write(jrpc(nil, "session/cancel", map[string]any{"sessionId": sid}))
		q.until("the turn's end", isTurnEnd)
		Eventually(func() float64 { return home.metric("iaccode_running_turns") }, 5*time.Second, 20*time.Millisecond).Should(BeZero())
		Expect(activeTurnOf(q.call("session/resume", loadParams(sid, cwd)))).To(BeNil())
		Expect(p.check.Violations()).To(BeEmpty())
		Expect(q.check.Violations()).To(BeEmpty())
	})
})

var _ = Describe("deploy/nginx.conf passes WebSockets", Label("e2e", "remote", "nginx", "cluster", "postgres"), func() {
	It("upgrades /acp through nginx to a pod; a prompt with a permission runs over the socket", func() {
		bin := nginxBinary()
		if bin == "" {
			Skip("nginx is not installed (.ci/run installs Debian's nginx-light)")
		}
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd := GinkgoT().TempDir()
		fake.Script(toolCallReply("w1", "write_file", map[string]any{"path": "ng.txt", "content": "via nginx"}),
			llmtest.Reply{Text: "Written through nginx."})
		cl := newCluster(fake, 3)
		ng := startNginx(bin, cl.pods)
		p := openWS(ng.base, nil, nil)
		Expect(p.resp.Header.Get("Acp-Connection-Id")).NotTo(BeEmpty())
		sid := p.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})["sessionId"].(string)
		id := p.prompt(sid, "write it")
		perm := p.until("permission request", func(m map[string]any) bool { return m["method"] == "session/request_permission" })
		p.allow(perm)
		m := p.until("prompt answer", func(m map[string]any) bool { return m["id"] == id && m["method"] == nil })
		Expect(m["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(p.text(0)).To(Equal("Written through nginx."))
		content, err := os.ReadFile(filepath.Join(cwd, "ng.txt"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(content)).To(Equal("via nginx"))
		Expect(p.check.Violations()).To(BeEmpty())
	})
})
