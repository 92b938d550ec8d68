package httpsse_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/fasthttp/websocket"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/transport/httpsse"
)

// tcpEnd reads the client's raw TCP connection for at most d: nil while
// the server keeps it open (the read timed out), else how it ended (io.EOF,
// a reset).
func tcpEnd(ws *websocket.Conn, d time.Duration) error {
	nc := ws.NetConn()
	_ = nc.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, nc)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	if err == nil {
		return io.EOF
	}
	return err
}

// The closing handshake (RFC 6455 7.1.1): after its close frame the
// server reads on until the peer's close frame or end of stream, so a
// client still sending is not reset before it read the code.
var _ = Describe("WebSocket closing handshake", func() {
	// mute makes the client's library not echo the server's close frame,
	// as a client busy sending does not at once.
	mute := func(c *wsClient) {
		c.ws.SetCloseHandler(func(int, string) error { return nil })
	}

	It("after 1009 on an oversized frame keeps TCP open until the client ends its stream", func() {
		e := startEnv(httpsse.Config{})
		c := e.ws(nil)
		mute(c)
		c.initialize()
		big := `{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"` + strings.Repeat("x", 4<<20) + `"}}`
		c.sendRaw(websocket.TextMessage, []byte(big))
		Expect(c.closeCode(10 * time.Second)).To(Equal(websocket.CloseMessageTooBig))
		Expect(tcpEnd(c.ws, 300*time.Millisecond)).To(Succeed(), "the server closed TCP right after its close frame")

		By("the client's close frame and FIN end it at once")
		Expect(c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseMessageTooBig, ""),
			time.Now().Add(time.Second))).To(Succeed())
		Expect(c.ws.NetConn().(*net.TCPConn).CloseWrite()).To(Succeed())
		start := time.Now()
		Expect(tcpEnd(c.ws, 5*time.Second)).To(MatchError(io.EOF))
		Expect(time.Since(start)).To(BeNumerically("<", time.Second))
		Eventually(e.metrics, 5*time.Second).Should(ContainSubstring("iaccode_http_websockets 0"))
	})

	It("closes TCP by itself about 2 s after its close frame when the client never answers", func() {
		e := startEnv(httpsse.Config{})
		c := e.ws(nil)
		mute(c)
		c.initialize()
		c.sendRaw(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":2,"method":"x","params":{"pad":"`+strings.Repeat("x", 4<<20)+`"}}`))
		Expect(c.closeCode(10 * time.Second)).To(Equal(websocket.CloseMessageTooBig))
		start := time.Now()
		Expect(tcpEnd(c.ws, 6*time.Second)).To(HaveOccurred(), "still open after 6 s")
		// Not before the linger (1.5 s: the close frame went out just
		// before start); the upper bound leaves room for a loaded machine.
		Expect(time.Since(start)).To(And(BeNumerically(">", 1500*time.Millisecond), BeNumerically("<", 4*time.Second)))
		Eventually(e.metrics, 5*time.Second).Should(ContainSubstring("iaccode_http_websockets 0"))
	})

	It("at shutdown sends 1001, drops what the client still sends and closes TCP on its close frame", func() {
		e := startEnv(httpsse.Config{})
		c := e.ws(nil)
		mute(c)
		c.initialize()
		sid := c.newSession(2, e.cwd)
		done := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(done)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			Expect(e.edge.Shutdown(ctx)).To(Succeed())
		}()
		Expect(c.closeCode(5 * time.Second)).To(Equal(websocket.CloseGoingAway))
		Expect(tcpEnd(c.ws, 300*time.Millisecond)).To(Succeed(), "the server closed TCP right after its close frame")
		// A prompt sent after the close frame is read and dropped, not run.
		c.send(rpc(3, "session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": "too late"}}}))
		Expect(tcpEnd(c.ws, 200*time.Millisecond)).To(Succeed())
		Expect(c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, ""),
			time.Now().Add(time.Second))).To(Succeed())
		start := time.Now()
		Expect(tcpEnd(c.ws, 5*time.Second)).To(HaveOccurred())
		Expect(time.Since(start)).To(BeNumerically("<", time.Second))
		Eventually(done, 5*time.Second).Should(BeClosed())
		Expect(e.fake.Requests()).To(BeEmpty(), "the prompt sent after the close frame reached the model")
	})
})
