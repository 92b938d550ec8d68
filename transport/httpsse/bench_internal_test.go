package httpsse

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
)

// benchPace is the interval between two chunks of one connection: 2 ms, or
// IACCODE_BENCH_PACE_MS.
func benchPace() time.Duration {
	if ms, err := strconv.Atoi(os.Getenv("IACCODE_BENCH_PACE_MS")); err == nil && ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return 2 * time.Millisecond
}

// BenchmarkEdgeFanout1000 measures the edge alone: 1,000 connections with an
// attached stream; per op, every connection's outbox gets 50 session/update
// frames 2 ms apart (IACCODE_BENCH_PACE_MS; as a connection actor would emit model chunks) and the
// clients read them. Reported: events/s and the p50/p99 delay from Send to
// the client reading the event. BenchmarkEdgeFanout1000WebSocket: the same
// with every connection a WebSocket on /acp.
//
//	go test ./transport/httpsse -run '^$' -bench 'EdgeFanout1000(WebSocket)?$' -benchtime 3x
func BenchmarkEdgeFanout1000(b *testing.B) { benchEdgeFanout(b, false) }

func BenchmarkEdgeFanout1000WebSocket(b *testing.B) { benchEdgeFanout(b, true) }

func benchEdgeFanout(b *testing.B, ws bool) {
	const conns, frames = 1000, 50
	pace := benchPace()
	home, err := os.MkdirTemp("", "iaccode-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(home)
	st, err := store.New(home)
	if err != nil {
		b.Fatal(err)
	}
	srv := actors.NewServer(actors.Deps{Config: actors.Config{Home: home, LLM: llm.Config{APIKey: "k", Model: "m"}},
		Store: st, Log: zerolog.Nop()})
	defer srv.Shutdown()
	e := New(srv, Config{}, zerolog.Nop())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- e.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
		<-served
	}()
	addr := ln.Addr().String()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

	type client struct {
		c   *conn
		nc  net.Conn
		br  *bufio.Reader
		ws  *websocket.Conn
		sid string
	}
	clients := make([]*client, conns)
	for i := range clients {
		if ws {
			wc, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/acp", nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := wc.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)); err != nil {
				b.Fatal(err)
			}
			if _, _, err := wc.ReadMessage(); err != nil { // the answer
				b.Fatal(err)
			}
			e.mu.RLock()
			c := e.conns[resp.Header.Get(HeaderConnectionID)] // lookup hides sockets
			e.mu.RUnlock()
			clients[i] = &client{c: c, nc: wc.NetConn(), ws: wc, sid: fmt.Sprintf("sess-%04d", i)}
			continue
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/acp",
			strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		id := resp.Header.Get(HeaderConnectionID)
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(nc, "GET /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nAcp-Connection-Id: %s\r\n\r\n", id)
		sresp, err := http.ReadResponse(bufio.NewReader(nc), nil)
		if err != nil || sresp.StatusCode != http.StatusOK {
			b.Fatal("stream", err)
		}
		clients[i] = &client{c: e.lookup([]byte(id)), nc: nc, br: bufio.NewReader(sresp.Body), sid: fmt.Sprintf("sess-%04d", i)}
	}
	defer func() {
		for _, c := range clients {
			c.nc.Close()
		}
	}()

	var mu sync.Mutex
	var delays []time.Duration
	var elapsed time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		var wg sync.WaitGroup
		for _, cl := range clients {
			wg.Add(2)
			go func() { // the connection actor
				defer wg.Done()
				for k := range frames {
					data := fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":%q,"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"%d;%d"}}}}`,
						cl.sid, time.Now().UnixNano(), k)
					cl.c.Send(actors.Frame{Data: data, SessionID: cl.sid})
					time.Sleep(pace)
				}
			}()
			go func() { // the client
				defer wg.Done()
				local := make([]time.Duration, 0, frames)
				for len(local) < frames {
					var line []byte
					var err error
					if cl.ws != nil {
						_, line, err = cl.ws.ReadMessage()
						line = append([]byte("data: "), line...)
					} else {
						line, err = cl.br.ReadSlice('\n')
					}
					if err != nil {
						b.Error(err)
						return
					}
					now := time.Now().UnixNano()
					if i := bytes.Index(line, []byte(`"text":"`)); i >= 0 && bytes.HasPrefix(line, []byte("data: ")) {
						rest := line[i+len(`"text":"`):]
						ts, _ := strconv.ParseInt(string(rest[:bytes.IndexByte(rest, ';')]), 10, 64)
						local = append(local, time.Duration(now-ts))
					}
				}
				mu.Lock()
				delays = append(delays, local...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		elapsed += time.Since(start)
	}
	b.StopTimer()
	slices.Sort(delays)
	pct := func(p float64) float64 {
		return float64(delays[int(float64(len(delays)-1)*p)]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(len(delays))/elapsed.Seconds(), "events/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
