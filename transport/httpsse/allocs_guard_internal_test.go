package httpsse

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
)

// The allocation guards of issue 30 for the HTTP edge: what one
// session/update frame costs from the connection's Send to the client
// reading it, as an SSE event and as a WebSocket text frame, pinned at its
// value. A change that adds an allocation per event fails with the number;
// one that removes one must lower the pin.
const (
	allocsPerSSEEvent       = 0
	allocsPerWebSocketFrame = 2
)

func TestAllocsPerEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation guard")
	}
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	t.Run("sse", func(t *testing.T) { checkEventPin(t, false, allocsPerSSEEvent) })
	t.Run("websocket", func(t *testing.T) { checkEventPin(t, true, allocsPerWebSocketFrame) })
}

// checkEventPin sends frames one at a time, each once the client read the
// one before (so none is joined to another), and pins the difference
// between 2n frames and n per frame.
func checkEventPin(t *testing.T, ws bool, pin int) {
	home := t.TempDir()
	st, err := store.New(home)
	if err != nil {
		t.Fatal(err)
	}
	srv := actors.NewServer(actors.Deps{Config: actors.Config{Home: home, LLM: llm.Config{APIKey: "k", Model: "m"}},
		Store: st, Log: zerolog.Nop()})
	defer srv.Shutdown()
	e := New(srv, Config{}, zerolog.Nop())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- e.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
		<-served
	}()
	c, read := openGuardStream(t, e, ln.Addr().String(), ws)

	const n = 1000
	frames := make([]actors.Frame, 3*n+n/10)
	for i := range frames {
		frames[i] = actors.Frame{SessionID: "sess-guard", Data: fmt.Appendf(nil,
			`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-guard","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"chunk %06d"}}}}`, i)}
	}
	next := 0
	send := func(count int) float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range count {
			c.Send(frames[next])
			next++
			read()
		}
		runtime.ReadMemStats(&after)
		return float64(after.Mallocs - before.Mallocs)
	}
	send(n / 10) // warm
	one := send(n)
	two := send(2 * n)
	per := (two - one) / n
	what := "one SSE event"
	if ws {
		what = "one WebSocket frame"
	}
	if got := int(math.Round(per)); got != pin {
		t.Errorf("%s: %.2f allocations, pinned at %d: a change moved the cost per event; if it is meant to, set the pin to %d (a rise wants its profile, docs/performance.md)", what, per, pin, got)
	}
	t.Logf("%s: %.2f allocations (pinned at %d)", what, per, pin)
}

// openGuardStream initializes a connection and opens its stream (GET /acp,
// or a WebSocket on /acp); read reads one event without allocating.
func openGuardStream(t *testing.T, e *Edge, addr string, ws bool) (*conn, func()) {
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`
	if ws {
		wc, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/acp", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { wc.Close() })
		if err := wc.WriteMessage(websocket.TextMessage, []byte(initialize)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := wc.ReadMessage(); err != nil {
			t.Fatal(err)
		}
		e.mu.RLock()
		c := e.conns[resp.Header.Get(HeaderConnectionID)]
		e.mu.RUnlock()
		buf := make([]byte, 64<<10)
		return c, func() {
			_, r, err := wc.NextReader()
			if err == nil {
				_, err = io.ReadFull(r, buf[:1])
				for err == nil {
					_, err = r.Read(buf)
				}
			}
			if err != io.EOF && err != io.ErrUnexpectedEOF {
				t.Fatal("read frame:", err)
			}
		}
	}
	resp, err := http.Post("http://"+addr+"/acp", "application/json", strings.NewReader(initialize))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := resp.Header.Get(HeaderConnectionID)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	fmt.Fprintf(nc, "GET /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nAcp-Connection-Id: %s\r\n\r\n", id)
	sresp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil || sresp.StatusCode != http.StatusOK {
		t.Fatal("stream", err)
	}
	br := bufio.NewReaderSize(sresp.Body, 64<<10)
	return e.lookup([]byte(id)), func() {
		// An event ends with an empty line.
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				t.Fatal("read event:", err)
			}
			if len(line) <= 2 && (len(line) == 1 || line[0] == '\r') {
				return
			}
		}
	}
}
