package httpsse_test

// Benchmarks (not part of the normal run; they need -bench):
//
//	go test ./transport/httpsse -run '^$' -bench Fanout1000 -benchtime 3x
//	go test ./transport/httpsse -run '^$' -bench Fanout1000WebSocket -benchtime 3x
//	go test ./transport/httpsse -run '^$' -bench IdleStreams -benchtime 1x
//
// BenchmarkFanout1000 streams one prompt on each of 1,000 connections at
// once (BenchmarkFanout1000WebSocket: the same over WebSockets) and reports events/s and the p50/p99 delay from the fake model writing
// a chunk to the client reading it. BenchmarkIdleStreams opens 10,000 idle
// streams from a child process (two processes of 10,000 sockets each stay
// under the 20,000 descriptor limit) and reports the server's memory per
// stream.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/transport/httpsse"
)

type benchServer struct {
	fake *llmtest.Server
	srv  *actors.Server
	edge *httpsse.Edge
	addr string
	cwd  string
}

func startBench(tb testing.TB, cfg httpsse.Config) *benchServer {
	tb.Helper()
	// Session files go to tmpfs when there is one: the benchmarks measure the
	// transport, not the disk (IACCODE_BENCH_HOME overrides).
	home := tb.TempDir()
	if d := os.Getenv("IACCODE_BENCH_HOME"); d != "" {
		home = d
	} else if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "iaccode-bench-"); err == nil {
			home = d
			tb.Cleanup(func() { _ = os.RemoveAll(d) })
		}
	}
	bs := &benchServer{fake: llmtest.Start(tb), cwd: tb.TempDir()}
	provider, err := llm.New(llm.Config{Provider: "openai_compatible", BaseURL: bs.fake.URL(), APIKey: "k", Model: "m"})
	if err != nil {
		tb.Fatal(err)
	}
	st, err := store.New(home)
	if err != nil {
		tb.Fatal(err)
	}
	log := zerolog.Nop()
	bs.srv = actors.NewServer(actors.Deps{
		Config:   actors.Config{Home: home, LLM: llm.Config{APIKey: "k", Model: "m"}},
		Provider: provider, Tools: tools.NewRegistry(), Store: st, Log: log,
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	bs.addr = ln.Addr().String()
	bs.edge = httpsse.New(bs.srv, cfg, log)
	served := make(chan error, 1)
	go func() { served <- bs.edge.Serve(ln) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = bs.edge.Shutdown(ctx)
		<-served
		bs.srv.Shutdown()
	})
	return bs
}

// benchClient speaks the raw protocol for one connection.
type benchClient struct {
	base   string
	http   *http.Client
	conn   string
	sid    string
	stream net.Conn
	br     *bufio.Reader
	// ws, when set, carries the connection instead of POSTs and stream.
	ws *websocket.Conn
}

// newBenchWSClient opens a WebSocket connection with one session.
func newBenchWSClient(addr, cwd string) (*benchClient, error) {
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/acp", nil)
	if err != nil {
		return nil, err
	}
	bc := &benchClient{ws: ws}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": map[string]any{"cwd": cwd}})
	for _, m := range []string{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`, string(body)} {
		if err := bc.send(m); err != nil {
			return nil, err
		}
	}
	return bc, bc.readSessionID()
}

// send delivers one message: a WebSocket frame or a POST.
func (bc *benchClient) send(body string) error {
	if bc.ws != nil {
		return bc.ws.WriteMessage(websocket.TextMessage, []byte(body))
	}
	_, _, err := postJSON(bc.http, bc.base, bc.conn, body)
	return err
}

func (bc *benchClient) close() {
	if bc.ws != nil {
		_ = bc.ws.Close()
		return
	}
	_ = bc.stream.Close()
}

// readSessionID reads up to the answer to session/new (id 2).
func (bc *benchClient) readSessionID() error {
	for {
		data, err := bc.nextData()
		if err != nil {
			return err
		}
		if i := bytes.Index(data, []byte(`"sessionId":"`)); i >= 0 && bytes.Contains(data, []byte(`"id":2,`)) {
			rest := data[i+len(`"sessionId":"`):]
			bc.sid = string(rest[:bytes.IndexByte(rest, '"')])
			return nil
		}
	}
}

func postJSON(hc *http.Client, base, conn string, body string) (*http.Response, []byte, error) {
	req, _ := http.NewRequest(http.MethodPost, base+"/acp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if conn != "" {
		req.Header.Set("Acp-Connection-Id", conn)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// openStream dials a raw GET /acp and reads the response head.
func openStream(addr, conn string) (net.Conn, *bufio.Reader, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	if _, err := io.WriteString(c, "GET /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAcp-Connection-Id: "+conn+"\r\n\r\n"); err != nil {
		c.Close()
		return nil, nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, nil, fmt.Errorf("GET /acp: %s", resp.Status)
	}
	// resp.Body removes the chunked framing.
	return c, bufio.NewReaderSize(resp.Body, 4096), nil
}

func newBenchClient(base, addr, cwd string, hc *http.Client) (*benchClient, error) {
	bc := &benchClient{base: base, http: hc}
	resp, _, err := postJSON(hc, base, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	if err != nil {
		return nil, err
	}
	bc.conn = resp.Header.Get("Acp-Connection-Id")
	if bc.stream, bc.br, err = openStream(addr, bc.conn); err != nil {
		return nil, err
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": map[string]any{"cwd": cwd}})
	if _, _, err := postJSON(hc, base, bc.conn, string(body)); err != nil {
		return nil, err
	}
	return bc, bc.readSessionID()
}

// nextData returns the payload of the next data: line (WebSocket: of the
// next message).
func (bc *benchClient) nextData() ([]byte, error) {
	if bc.ws != nil {
		_, data, err := bc.ws.ReadMessage()
		return data, err
	}
	for {
		line, err := bc.br.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		if bytes.HasPrefix(line, []byte("data: ")) {
			return bytes.TrimRight(line[len("data: "):], "\r\n"), nil
		}
	}
}

// BenchmarkFanout1000: each op is one round in which 1,000 connections
// stream one prompt each, concurrently: 50 model chunks 2 ms apart
// (IACCODE_BENCH_PACE_MS) through the real provider, actors and edge.
func BenchmarkFanout1000(b *testing.B) { benchFanout(b, false) }

func BenchmarkFanout1000WebSocket(b *testing.B) { benchFanout(b, true) }

func benchFanout(b *testing.B, ws bool) {
	const conns, chunks = 1000, 50
	bs := startBench(b, httpsse.Config{})
	pace := 2 * time.Millisecond
	if ms, err := strconv.Atoi(os.Getenv("IACCODE_BENCH_PACE_MS")); err == nil && ms > 0 {
		pace = time.Duration(ms) * time.Millisecond
	}
	bs.fake.SetDefault(llmtest.Reply{Chunks: chunks, Delay: pace,
		ChunkFunc: func(int) string { return strconv.FormatInt(time.Now().UnixNano(), 10) + ";" }})
	base := "http://" + bs.addr
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, MaxConnsPerHost: 128}}
	clients := make([]*benchClient, conns)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	var setupErr atomic.Value
	for i := range clients {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var c *benchClient
			var err error
			if ws {
				c, err = newBenchWSClient(bs.addr, bs.cwd)
			} else {
				c, err = newBenchClient(base, bs.addr, bs.cwd, hc)
			}
			if err != nil {
				setupErr.Store(err)
				return
			}
			clients[i] = c
		}()
	}
	wg.Wait()
	if err, _ := setupErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()

	var delays []time.Duration
	var mu sync.Mutex
	var events atomic.Int64
	var elapsed time.Duration
	b.ResetTimer()
	for round := range b.N {
		id := 100 + round
		start := time.Now()
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"go"}]}}`, id, c.sid)
				err := c.send(body)
				<-sem
				if err != nil {
					b.Error(err)
					return
				}
				var local []time.Duration
				done := []byte(fmt.Sprintf(`"id":%d,"result"`, id))
				for {
					data, err := c.nextData()
					if err != nil {
						b.Error(err)
						return
					}
					now := time.Now().UnixNano()
					events.Add(1)
					if bytes.Contains(data, done) {
						break
					}
					if i := bytes.Index(data, []byte(`"agent_message_chunk","content":{"type":"text","text":"`)); i >= 0 {
						rest := data[i+len(`"agent_message_chunk","content":{"type":"text","text":"`):]
						if ts, err := strconv.ParseInt(string(rest[:bytes.IndexByte(rest, ';')]), 10, 64); err == nil {
							local = append(local, time.Duration(now-ts))
						}
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
		if len(delays) == 0 {
			return 0
		}
		return float64(delays[int(float64(len(delays)-1)*p)]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(events.Load())/elapsed.Seconds(), "events/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(len(delays))/float64(b.N), "chunks/op")
}

// BenchmarkIdleStreams: the server (this process) holds 10,000 idle streams
// opened by a child process; memory is measured here.
func BenchmarkIdleStreams(b *testing.B) {
	n := 10_000
	if v, err := strconv.Atoi(os.Getenv("IACCODE_BENCH_STREAMS")); err == nil && v > 0 {
		n = v
	}
	bs := startBench(b, httpsse.Config{KeepAlive: time.Minute})
	for range b.N {
		runtime.GC()
		before := readMem()
		child := exec.Command(os.Args[0], "-test.run", "^TestIdleStreamsClient$", "-test.v")
		child.Env = append(os.Environ(), "IACCODE_BENCH_CLIENT_ADDR="+bs.addr, "IACCODE_BENCH_STREAMS="+strconv.Itoa(n))
		stdin, _ := child.StdinPipe()
		out, _ := child.StdoutPipe()
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		ready := false
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "READY") {
				ready = true
				break
			}
			if strings.HasPrefix(sc.Text(), "FAIL") || strings.HasPrefix(sc.Text(), "---") {
				b.Log(sc.Text())
			}
		}
		if !ready {
			_ = child.Wait()
			b.Fatal("client did not open its streams")
		}
		time.Sleep(time.Second)
		runtime.GC()
		after := readMem()
		stdin.Close()
		go func() { _, _ = io.Copy(io.Discard, out) }()
		_ = child.Wait()
		per := func(a, b uint64) float64 { return float64(int64(a)-int64(b)) / float64(n) / 1024 }
		b.ReportMetric(per(after.rss, before.rss), "rss-KiB/stream")
		b.ReportMetric(per(after.heap, before.heap), "heap-KiB/stream")
		b.ReportMetric(per(after.stack, before.stack), "stack-KiB/stream")
		b.ReportMetric(float64(after.goroutines-before.goroutines)/float64(n), "goroutines/stream")
	}
}

type memSample struct {
	rss, heap, stack uint64
	goroutines       int
}

func readMem() memSample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := memSample{heap: ms.HeapInuse, stack: ms.StackInuse, goroutines: runtime.NumGoroutine()}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				s.rss = kb * 1024
			}
		}
	}
	return s
}

// TestIdleStreamsClient is the child process of BenchmarkIdleStreams; it does
// nothing in a normal run.
func TestIdleStreamsClient(t *testing.T) {
	addr := os.Getenv("IACCODE_BENCH_CLIENT_ADDR")
	if addr == "" {
		t.Skip("child process of BenchmarkIdleStreams")
	}
	n, _ := strconv.Atoi(os.Getenv("IACCODE_BENCH_STREAMS"))
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, MaxConnsPerHost: 32}}
	streams := make([]net.Conn, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	var failed atomic.Value
	start := time.Now()
	for i := range streams {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			resp, _, err := postJSON(hc, "http://"+addr, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
			if err != nil {
				failed.Store(err)
				return
			}
			c, _, err := openStream(addr, resp.Header.Get("Acp-Connection-Id"))
			if err != nil {
				failed.Store(err)
				return
			}
			streams[i] = c
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("READY %d streams in %v\n", n, time.Since(start))
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range streams {
		c.Close()
	}
}

// BenchmarkInitializeFlood posts 100,000 initialize requests (32 keep-alive
// clients) that never open a stream nor send anything else, and reports the
// server's memory growth. With the defaults the oldest unused connections
// are closed past MaxUnused (10,000); IACCODE_BENCH_MAX_UNUSED=1000000 and
// IACCODE_BENCH_UNUSED_TIMEOUT=10m show the unbounded behaviour before it.
//
//	go test ./transport/httpsse -run '^$' -bench InitializeFlood -benchtime 1x
func BenchmarkInitializeFlood(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("IACCODE_BENCH_INITIALIZES")); err == nil && v > 0 {
		n = v
	}
	cfg := httpsse.Config{}
	if v, err := strconv.Atoi(os.Getenv("IACCODE_BENCH_MAX_UNUSED")); err == nil && v > 0 {
		cfg.MaxUnused = v
	}
	if d, err := time.ParseDuration(os.Getenv("IACCODE_BENCH_UNUSED_TIMEOUT")); err == nil {
		cfg.UnusedTimeout = d
	}
	bs := startBench(b, cfg)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, MaxConnsPerHost: 32}}
	defer hc.CloseIdleConnections()
	for range b.N {
		runtime.GC()
		before := readMem()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		liveBefore := ms.HeapAlloc
		start := time.Now()
		var wg sync.WaitGroup
		var next, failed atomic.Int64
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					resp, _, err := postJSON(hc, "http://"+bs.addr, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
					if err != nil || resp.StatusCode != http.StatusOK {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		time.Sleep(2 * time.Second) // closes of evicted connections finish
		runtime.GC()
		after := readMem()
		runtime.ReadMemStats(&ms)
		mib := func(a, b uint64) float64 { return float64(int64(a)-int64(b)) / (1 << 20) }
		b.ReportMetric(mib(ms.HeapAlloc, liveBefore), "live-heap-growth-MiB")
		b.ReportMetric(float64(n)/took.Seconds(), "initialize/s")
		b.ReportMetric(mib(after.rss, before.rss), "rss-growth-MiB")
		b.ReportMetric(mib(after.heap, before.heap), "heap-growth-MiB")
		b.ReportMetric(float64(bs.srv.Metrics().Connections.Load()), "live-connections")
		b.ReportMetric(float64(failed.Load()), "failed")
	}
}
