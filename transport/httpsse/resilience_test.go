package httpsse_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/transport/httpsse"
)

var _ = Describe("abandoned connections", func() {
	It("reaps connections that never used their initialize after UnusedTimeout, and keeps used ones", func() {
		e := startEnv(httpsse.Config{UnusedTimeout: 200 * time.Millisecond, KeepAlive: 50 * time.Millisecond})
		unused := []string{e.initialize(), e.initialize(), e.initialize()}
		posted := e.initialize()
		streamed := e.initialize()
		e.send(posted, rpc(nil, "session/cancel", map[string]any{"sessionId": "none"}))
		e.stream(streamed)
		Eventually(e.metrics, 5*time.Second, 20*time.Millisecond).Should(
			ContainSubstring(`iaccode_http_connections_closed_total{reason="unused"} 3`))
		for _, id := range unused {
			r := e.post(rpc(2, "session/new", map[string]any{"cwd": e.cwd}), "Acp-Connection-Id", id)
			Expect(r.status).To(Equal(http.StatusBadRequest))
			Expect(string(r.body)).To(ContainSubstring("opened no stream and sent nothing after initialize"))
		}
		Consistently(e.metrics, 400*time.Millisecond, 50*time.Millisecond).Should(
			ContainSubstring(`iaccode_http_connections_closed_total{reason="unused"} 3`))
		e.send(posted, rpc(nil, "session/cancel", map[string]any{"sessionId": "none"}))
		Expect(e.metrics()).To(ContainSubstring("iaccode_http_connections 2"))
	})

	It("closes the oldest unused connection at once past MaxUnused", func() {
		e := startEnv(httpsse.Config{MaxUnused: 3})
		var ids []string
		for range 5 {
			ids = append(ids, e.initialize())
		}
		Eventually(e.metrics, 5*time.Second).Should(ContainSubstring(`iaccode_http_connections_closed_total{reason="unused"} 2`))
		for i, id := range ids {
			r := e.post(rpc(nil, "session/cancel", map[string]any{"sessionId": "none"}), "Acp-Connection-Id", id)
			if i < 2 {
				Expect(r.status).To(Equal(http.StatusBadRequest), "connection %d is the oldest", i)
			} else {
				Expect(r.status).To(Equal(http.StatusAccepted), "connection %d", i)
			}
		}
		// used connections no longer count: three more fit
		for range 3 {
			e.initialize()
		}
		Consistently(e.metrics, 200*time.Millisecond).Should(ContainSubstring(`iaccode_http_connections_closed_total{reason="unused"} 2`))
	})

	It("without detached turns, cancels the running turns of a connection whose stream is gone for longer than the replay window", func() {
		e := startEnv(httpsse.Config{ReplayMaxAge: 300 * time.Millisecond, KeepAlive: 50 * time.Millisecond, DetachedTurnMax: -1})
		e.fake.Script(llmtest.Reply{Text: "one two three four", Hang: true, AfterChunks: 2})
		conn := e.initialize()
		s := e.stream(conn)
		sid := e.newSession(conn, s, 2)
		e.prompt(conn, 3, sid, "go")
		s.until(isMethod("session/update"))
		s.close()
		s.waitEOF()
		Eventually(e.metrics, 5*time.Second, 20*time.Millisecond).Should(ContainSubstring("iaccode_http_abandoned_total 1"))
		Eventually(e.metrics, 5*time.Second, 20*time.Millisecond).Should(ContainSubstring("iaccode_running_turns 0"))
		// a client coming back finds the prompt answered cancelled
		back := e.stream(conn)
		evs := back.until(isResponse(3))
		Expect(evs[len(evs)-1].msg["result"]).To(HaveKeyWithValue("stopReason", "cancelled"))
		Expect(e.metrics()).To(ContainSubstring("iaccode_http_abandoned_total 1"), "once per spell of absence")
	})
})

var _ = Describe("connection cap", func() {
	It("at MaxConnections closes the oldest connection that sent no request to serve a new one, and answers 503 at once when all have", func() {
		e := startEnv(httpsse.Config{MaxConnections: 4}) // 3 handed out, 1 spare worker
		var silent []net.Conn
		DeferCleanup(func() {
			for _, c := range silent {
				c.Close()
			}
		})
		for range 3 {
			c, err := net.Dial("tcp", e.addr)
			Expect(err).NotTo(HaveOccurred())
			silent = append(silent, c)
		}
		// Each client keeps its connection (keep-alive), so each needs room.
		var busy []net.Conn
		keepAlive := func() int {
			c, err := net.Dial("tcp", e.addr)
			Expect(err).NotTo(HaveOccurred())
			_, err = c.Write([]byte("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
			Expect(err).NotTo(HaveOccurred())
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			r, err := http.ReadResponse(bufio.NewReader(c), nil)
			Expect(err).NotTo(HaveOccurred())
			_ = c.SetReadDeadline(time.Time{})
			if r.StatusCode != http.StatusOK {
				c.Close()
			} else {
				busy = append(busy, c)
			}
			return r.StatusCode
		}
		DeferCleanup(func() {
			for _, c := range busy {
				c.Close()
			}
		})
		for range 3 { // a flood of silent sockets does not keep a client out
			Expect(keepAlive()).To(Equal(http.StatusOK))
		}
		for _, c := range silent {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err := c.Read(make([]byte, 1))
			Expect(err).To(MatchError(io.EOF), "the silent ones were closed, oldest first")
		}
		// connections that sent a request are never closed for room: the
		// spare worker takes one more (once the evicted ones' workers are
		// back), then 503
		Eventually(keepAlive, 5*time.Second, 20*time.Millisecond).Should(Equal(http.StatusOK))
		start := time.Now()
		r, _ := e.rawRequest("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		Expect(r.StatusCode).To(Equal(http.StatusServiceUnavailable))
		Expect(time.Since(start)).To(BeNumerically("<", time.Second))
		for _, c := range busy {
			c.Close()
		}
		Eventually(func() int {
			r, _ := e.rawRequest("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
			return r.StatusCode
		}, 5*time.Second, 20*time.Millisecond).Should(Equal(http.StatusOK))
	})
})
