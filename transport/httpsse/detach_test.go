package httpsse_test

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/transport/httpsse"
)

var _ = Describe("detached turns (DetachedTurnMax)", func() {
	touchThenDone := func(e *env) {
		e.fake.Script(
			llmtest.Reply{Text: "Touching. ", ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "touch", Arguments: `{}`}}},
			llmtest.Reply{Text: "Done."},
		)
	}
	permit := func(e *env, conn string, perm map[string]any) {
		e.send(conn, map[string]any{"jsonrpc": "2.0", "id": perm["id"],
			"result": map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}}})
	}

	It("keeps a turn running past the replay window while no stream is attached; the permission it asked meanwhile is answered by the returning client", func() {
		e := startEnv(httpsse.Config{ReplayMaxAge: 200 * time.Millisecond, KeepAlive: 50 * time.Millisecond, DetachedTurnMax: 30 * time.Second})
		touchThenDone(e)
		conn, sid := e.sessionWithoutStream()
		e.prompt(conn, 3, sid, "touch it")
		Eventually(e.metrics, 5*time.Second).Should(ContainSubstring("iaccode_running_turns 1"))
		time.Sleep(time.Second) // five replay windows without a stream
		Expect(e.metrics()).To(And(ContainSubstring("iaccode_http_abandoned_total 0"), ContainSubstring("iaccode_running_turns 1")))

		back := e.stream(conn)
		before := back.until(isMethod("session/request_permission"))
		permit(e, conn, before[len(before)-1].msg)
		after := back.until(isResponse(3))
		Expect(after[len(after)-1].msg["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(text(append(before, after...))).To(Equal("Touching. Done."))
	})

	It("keeps a waiting permission request waiting for the client that comes back with Last-Event-ID", func() {
		e := startEnv(httpsse.Config{ReplayMaxAge: 200 * time.Millisecond, KeepAlive: 50 * time.Millisecond, DetachedTurnMax: 30 * time.Second})
		touchThenDone(e)
		conn := e.initialize()
		s := e.stream(conn)
		sid := e.newSession(conn, s, 2)
		e.prompt(conn, 3, sid, "touch it")
		before := s.until(isMethod("session/request_permission"))
		perm := before[len(before)-1]
		s.close()
		s.waitEOF()
		time.Sleep(time.Second)
		Expect(e.metrics()).To(And(ContainSubstring("iaccode_http_abandoned_total 0"), ContainSubstring("iaccode_running_turns 1")))
		back := e.stream(conn, "Last-Event-ID", perm.id)
		permit(e, conn, perm.msg)
		after := back.until(isResponse(3))
		Expect(after[len(after)-1].msg["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(text(after)).To(Equal("Done."))
	})

	It("cancels them once the client has been gone for DetachedTurnMax; a negative limit cancels after the replay window", func() {
		for _, limit := range []time.Duration{700 * time.Millisecond, -1} {
			e := startEnv(httpsse.Config{ReplayMaxAge: 200 * time.Millisecond, KeepAlive: 50 * time.Millisecond, DetachedTurnMax: limit})
			e.fake.Script(llmtest.Reply{Text: "one two three four", Hang: true, AfterChunks: 3})
			conn, sid := e.sessionWithoutStream()
			e.prompt(conn, 3, sid, "go")
			start := time.Now()
			Eventually(e.metrics, 5*time.Second, 20*time.Millisecond).Should(ContainSubstring("iaccode_http_abandoned_total 1"))
			took := time.Since(start)
			Eventually(e.metrics, 5*time.Second, 20*time.Millisecond).Should(ContainSubstring("iaccode_running_turns 0"))
			if limit > 0 {
				Expect(took).To(BeNumerically(">=", limit-100*time.Millisecond), "not before the limit")
			} else {
				Expect(took).To(BeNumerically("<", 600*time.Millisecond), "after the replay window")
			}
			back := e.stream(conn)
			evs := back.until(isResponse(3))
			Expect(evs[len(evs)-1].msg["result"]).To(HaveKeyWithValue("stopReason", "cancelled"))
		}
	})

	It("does not reap an idle connection while its detached turn runs; it does after the turn is cancelled at the limit", func() {
		e := startEnv(httpsse.Config{ReplayMaxAge: 100 * time.Millisecond, IdleTimeout: 300 * time.Millisecond,
			KeepAlive: 50 * time.Millisecond, DetachedTurnMax: 1500 * time.Millisecond})
		e.fake.Script(llmtest.Reply{Text: "one two three four", Hang: true, AfterChunks: 3})
		conn, sid := e.sessionWithoutStream()
		e.prompt(conn, 3, sid, "go")
		Eventually(e.metrics, 5*time.Second).Should(ContainSubstring("iaccode_running_turns 1"))
		Consistently(e.metrics, time.Second, 50*time.Millisecond).Should(And(
			ContainSubstring(`iaccode_http_connections_closed_total{reason="idle"} 0`), ContainSubstring("iaccode_running_turns 1")))
		Eventually(e.metrics, 5*time.Second, 20*time.Millisecond).Should(And(ContainSubstring("iaccode_http_abandoned_total 1"),
			ContainSubstring("iaccode_running_turns 0")))
		Eventually(e.metrics, 5*time.Second, 20*time.Millisecond).Should(ContainSubstring(`iaccode_http_connections_closed_total{reason="idle"} 1`))
	})

	It("lets a WebSocket's turn run to its end when the socket goes; a new connection loads the whole answer", func() {
		e := startEnv(httpsse.Config{DetachedTurnMax: 30 * time.Second})
		var words []string
		for i := range 20 {
			words = append(words, "w"+string(rune('a'+i))+" ")
		}
		e.fake.Script(llmtest.Reply{TextChunks: words, Delay: 30 * time.Millisecond})
		c := e.ws(nil)
		c.initialize()
		sid := c.newSession(2, e.cwd)
		c.send(rpc(3, "session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": "stream"}}}))
		c.until(func(m map[string]any) bool { return wsText([]map[string]any{m}) != "" })
		Expect(c.ws.Close()).To(Succeed())
		Eventually(e.metrics, 5*time.Second, 20*time.Millisecond).Should(And(ContainSubstring("iaccode_http_websockets 0"),
			ContainSubstring("iaccode_http_detached_total 1")))
		Expect(e.metrics()).To(And(ContainSubstring("iaccode_running_turns 1"), ContainSubstring("iaccode_http_connections 1")))

		By("the turn ends, and its connection with it")
		Eventually(e.metrics, 5*time.Second, 20*time.Millisecond).Should(And(ContainSubstring("iaccode_running_turns 0"),
			ContainSubstring("iaccode_http_connections 0"), ContainSubstring(`iaccode_http_connections_closed_total{reason="websocket_closed"} 1`)))

		next := e.ws(nil)
		next.initialize()
		next.send(rpc(2, "session/load", map[string]any{"sessionId": sid, "cwd": e.cwd, "mcpServers": []any{}}))
		replay := next.until(isResponse(2))
		Expect(replay[len(replay)-1]).To(HaveKey("result"))
		Expect(wsText(replay)).To(Equal(strings.Join(words, "")))
	})

	It("treats a WebSocket client that stops reading as gone: 1008 once its buffer is full, the turn runs to its end", func() {
		e := startEnv(httpsse.Config{ReplayBuffer: 100, DetachedTurnMax: 30 * time.Second})
		const chunks, size = 1500, 16 << 10
		e.fake.Script(llmtest.Reply{Chunks: chunks, ChunkText: strings.Repeat("z", size)})
		ws, sid := dialSlowReader(e)
		Expect(ws.WriteJSON(rpc(2, "session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": "flood"}}}))).To(Succeed())
		Eventually(e.metrics, 20*time.Second, 50*time.Millisecond).Should(ContainSubstring("iaccode_http_detached_total 1"))
		Expect(e.logs.String()).To(ContainSubstring("buffer full, closing the socket; its turns go on detached"))
		Eventually(e.metrics, 30*time.Second, 50*time.Millisecond).Should(And(ContainSubstring("iaccode_running_turns 0"),
			ContainSubstring(`iaccode_http_connections_closed_total{reason="websocket_closed"} 1`),
			ContainSubstring(`iaccode_http_connections_closed_total{reason="overflow"} 0`), ContainSubstring("iaccode_http_connections 0")))

		By("the whole answer is in the session's history")
		next := e.ws(nil)
		next.initialize()
		next.send(rpc(2, "session/load", map[string]any{"sessionId": sid, "cwd": e.cwd, "mcpServers": []any{}}))
		replay := next.until(isResponse(2))
		Expect(replay[len(replay)-1]).To(HaveKey("result"))
		Expect(len(wsText(replay))).To(Equal(chunks * size))
	})
})

var _ = Describe("detached turns with shared sessions", func() {
	// The running turn's message so far is not part of the replay yet (it is
	// recorded when the message completes): the new client sees the rest.
	It("a new WebSocket loads the session while the detached turn runs: the rest of the turn live, without repeats; it answers the permission asked while nobody was attached and the tool runs", func() {
		e := startEnv(httpsse.Config{DetachedTurnMax: 30 * time.Second})
		var words []string
		for i := range 10 {
			words = append(words, "w"+string(rune('a'+i))+" ")
		}
		e.fake.Script(
			llmtest.Reply{TextChunks: words, Delay: 80 * time.Millisecond, ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "touch", Arguments: `{}`}}},
			llmtest.Reply{Text: "Done."},
		)
		a := e.ws(nil)
		a.initialize()
		sid := a.newSession(2, e.cwd)
		a.send(rpc(3, "session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": "touch it"}}}))
		a.until(func(m map[string]any) bool { return wsText([]map[string]any{m}) != "" })
		Expect(a.ws.Close()).To(Succeed())
		Eventually(e.metrics, 5*time.Second, 20*time.Millisecond).Should(ContainSubstring("iaccode_http_detached_total 1"))

		b := e.ws(nil)
		b.initialize()
		b.send(rpc(2, "session/load", map[string]any{"sessionId": sid, "cwd": e.cwd, "mcpServers": []any{}}))
		got := b.until(isMethod("session/request_permission"))
		perm := got[len(got)-1]
		b.send(map[string]any{"jsonrpc": "2.0", "id": perm["id"],
			"result": map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}}})
		got = append(got, b.until(func(m map[string]any) bool { return strings.Contains(wsText([]map[string]any{m}), "Done.") })...)
		full := strings.Join(words, "") + "Done."
		seen := wsText(got)
		Expect(full).To(HaveSuffix(seen), "each chunk at most once, in order")
		Expect(seen).To(HaveSuffix("wj Done."))
		Expect(got).To(ContainElement(WithTransform(func(m map[string]any) any {
			if m["method"] != "session/update" {
				return nil
			}
			u := m["params"].(map[string]any)["update"].(map[string]any)
			return []any{u["sessionUpdate"], u["status"]}
		}, Equal([]any{"tool_call_update", "completed"}))), "the permitted tool ran")
		Eventually(e.metrics, 5*time.Second, 20*time.Millisecond).Should(ContainSubstring("iaccode_running_turns 0"))
	})
})
