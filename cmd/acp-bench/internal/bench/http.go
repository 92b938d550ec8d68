package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/acpclient"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/marker"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/proc"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/stats"
)

// parallel runs fn(i) for i in [0, n) on at most width goroutines.
func parallel(n, width int, fn func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(width, 1))
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(i)
		}()
	}
	wg.Wait()
}

// serverMetrics reads /metrics, nil when it cannot.
func serverMetrics(ctx context.Context, h *acpclient.HTTP) acpclient.Metrics {
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := h.Metrics(c)
	if err != nil {
		return nil
	}
	return m
}

// delta is after-before of a metric present in both.
func delta(before, after acpclient.Metrics, name string) (float64, bool) {
	if before == nil || after == nil {
		return 0, false
	}
	b, ok1 := before.Get(name)
	a, ok2 := after.Get(name)
	return a - b, ok1 && ok2
}

// setupConns dials n connections, each with one session; failed ones are
// counted in errs and left nil.
func setupConns(ctx context.Context, o *Options, h *acpclient.HTTP, n, width int, deadline time.Time, withSession, ws bool, errs *stats.Counter) ([]*hconn, []string) {
	dial := dialConn
	if ws {
		dial = dialWSConn
	}
	conns := make([]*hconn, n)
	sids := make([]string, n)
	prog := o.progress("connecting", int64(n), "conns")
	parallel(n, width, func(i int) {
		defer prog.add(1)
		c, err := dial(ctx, h, deadline)
		if err != nil {
			errs.Inc(errKey("connect", err))
			return
		}
		if withSession {
			sid, err := c.newSession(ctx, o.Workdir)
			if err != nil {
				errs.Inc(errKey("session/new", err))
				_ = c.close(ctx)
				return
			}
			sids[i] = sid
		}
		conns[i] = c
	})
	prog.finish()
	return conns, sids
}

// warmPool opens n pooled POST connections at once, as n editors would
// have theirs open from their session/new, so that the prompts do not
// queue for a connection in the client.
func warmPool(ctx context.Context, h *acpclient.HTTP, n int) {
	var ready, wg sync.WaitGroup
	ready.Add(1)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Wait()
			_ = h.Health(ctx)
		}()
	}
	ready.Done()
	wg.Wait()
}

func closeConns(ctx context.Context, conns []*hconn, errs *stats.Counter) {
	parallel(len(conns), 64, func(i int) {
		if c := conns[i]; c != nil {
			if err := c.close(ctx); err != nil && errs != nil {
				errs.Inc(errKey("DELETE", err))
			}
		}
	})
}

// FanoutParams sizes http-fanout.
type FanoutParams struct {
	// Conns connections, each with its own session and prompt (1,000).
	Conns int
	// Chunks per prompt (500), streamed at Rate chunks/s each (50).
	Chunks int
	Rate   float64
	// SetupWidth is how many connections are set up at once (64).
	SetupWidth int
	// Timeout bounds the run (0: derived from the sizes).
	Timeout time.Duration
	// Ramp spreads the prompt starts evenly over this time (0: all at
	// once, a burst: the first-chunk latency then measures the burst).
	Ramp time.Duration
	// Pods > 0 runs that many cluster pods (a throwaway PostgreSQL) behind
	// a round-robin proxy, which the clients talk to (see cluster.go).
	Pods int
	// WS runs every connection over a WebSocket on /acp instead of POSTs
	// and an SSE stream.
	WS bool
	// Relay also runs the workload against the standard-library relay
	// (relay.go) after the server, and reports the server's figures as
	// multiples of the relay's (one server, SSE only).
	Relay bool
}

func (p *FanoutParams) defaults() {
	if p.SetupWidth <= 0 {
		p.SetupWidth = 64
	}
	if p.Timeout <= 0 {
		stream := time.Duration(float64(p.Chunks) / max(p.Rate, 1) * float64(time.Second))
		p.Timeout = 2*time.Minute + 3*stream + time.Duration(p.Conns)*20*time.Millisecond
	}
}

func interval(rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / rate)
}

// Fanout runs Conns concurrent prompts over HTTP+SSE.
func Fanout(ctx context.Context, o *Options, p FanoutParams) (*Result, error) {
	p.defaults()
	r := newResult("http-fanout", "conns="+strconv.Itoa(p.Conns), map[string]any{
		"conns": p.Conns, "chunks": p.Chunks, "rate": p.Rate})
	if p.Ramp > 0 {
		r.Params["ramp"] = p.Ramp.String()
		r.Variant += ",ramp=" + p.Ramp.String()
	}
	if p.WS {
		r.Params["transport"] = "websocket"
		r.Variant += ",ws"
	}
	fake, stopFake := startFake(2 * time.Second)
	defer stopFake()
	fake.SetDefault(streamingReply(p.Chunks, interval(p.Rate)))
	var (
		srv  *Server
		addr string
		err  error
	)
	if p.Pods > 0 {
		var cl *benchCluster
		if cl, err = startCluster(ctx, o, fake.URL(), p.Pods); err != nil {
			return nil, err
		}
		defer cl.stop()
		srv, addr = cl.pods[0], cl.addr
		r.Params["pods"] = p.Pods
		r.Variant += ",pods=" + strconv.Itoa(p.Pods)
	} else {
		if srv, err = StartServer(ctx, o, "http", fake.URL()); err != nil {
			return nil, err
		}
		defer srv.Stop()
		addr = srv.Addr
	}
	total, errs, events := fanoutDrive(ctx, o, p, srv, addr, r)
	r.stop(srv)
	r.instructions(srv, events, "event")
	if p.Relay && p.Pods == 0 && !p.WS {
		rr := newResult("http-relay", "", nil)
		if err := fanoutRelay(ctx, o, p, fake.URL(), r, rr); err != nil {
			r.fail("relay: %v", err)
		}
	}
	r.finish(&total, errs)
	return r, nil
}

// fanoutRelay runs the same workload against the standard-library relay
// (relay.go) and adds its figures, and the server's as multiples of them,
// to r.
func fanoutRelay(ctx context.Context, o *Options, p FanoutParams, fakeURL string, r, rr *Result) error {
	srv, err := startRelay(ctx, o, fakeURL)
	if err != nil {
		return err
	}
	defer srv.Stop()
	ro := *o
	ro.CPUProfile = ""
	check, errs, _ := fanoutDrive(ctx, &ro, p, srv, srv.Addr, rr)
	if !check.OK() || len(errs) > 0 {
		return fmt.Errorf("relay run: %s, errors %v", &check, errs)
	}
	for _, name := range []string{"server CPU/event", "server CPU (stream)", "server tree PSS peak", "delay p50", "delay p99",
		"first chunk p50", "first chunk p99", "first chunk from model p50", "prompt POST answered p50", "lost events"} {
		if m, ok := rr.Metric(name); ok {
			r.add("relay "+strings.TrimPrefix(name, "server "), m.Value, m.Unit).Note = "the standard-library relay, same workload, same run"
		}
	}
	ratio := func(name, target string, limit float64) {
		a, ok1 := r.Metric(name)
		b, ok2 := rr.Metric(name)
		if !ok1 || !ok2 || b.Value <= 0 {
			return
		}
		x := a.Value / b.Value
		r.add(strings.TrimPrefix(name, "server ")+" ÷ relay", x, "×").target(target, x <= limit)
	}
	ratio("server CPU/event", "≤ 1.3", 1.3)
	ratio("server tree PSS peak", "≤ 3", 3)
	ratio("delay p99", "≤ 2", 2)
	ratio("first chunk p50", "≤ 1.5", 1.5)
	return nil
}

// fanoutDrive sets up p.Conns connections on the server at addr, runs
// their prompts and adds the figures to r.
func fanoutDrive(ctx context.Context, o *Options, p FanoutParams, srv *Server, addr string, r *Result) (marker.Check, map[string]int64, int64) {
	h := o.newHTTP(addr, max(256, p.Conns))
	defer h.Close()
	deadline := time.Now().Add(p.Timeout)
	var errs stats.Counter

	u0 := srv.Usage()
	conns, sids := setupConns(ctx, o, h, p.Conns, p.SetupWidth, deadline, true, p.WS, &errs)
	if !p.WS {
		warmPool(ctx, h, p.Conns)
	}
	defer closeConns(context.Background(), conns, nil)
	uSetup := srv.Usage()
	treeSetup, _ := proc.ReadTree(srv.Pid())

	m0 := serverMetrics(ctx, h)
	cw := watchCPU(srv.Pid())
	sampler := proc.StartTreeSampler(srv.Pid(), 500*time.Millisecond, 2000)
	start := time.Now()
	prog := o.progress(fmt.Sprintf("fanout %d", p.Conns), int64(p.Conns*p.Chunks), "chunks")
	s := newSink(start, time.Until(deadline), prog, true)
	stopProfile := o.profile(ctx, srv, r, fmt.Sprintf("http-fanout-%d", p.Conns))
	var mu sync.Mutex
	total := marker.Check{FirstGap: -1}
	var lastDone time.Time
	var wg sync.WaitGroup
	for i, c := range conns {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p.Ramp > 0 {
				time.Sleep(time.Until(start.Add(p.Ramp * time.Duration(i) / time.Duration(len(conns)))))
			}
			check, err := c.prompt(ctx, sids[i], p.Chunks, s)
			now := time.Now()
			mu.Lock()
			total.Add(check)
			if now.After(lastDone) {
				lastDone = now
			}
			mu.Unlock()
			if err != nil {
				errs.Inc(errKey("prompt", err))
			}
		}()
	}
	wg.Wait()
	cpuReport := &Result{}
	cw.report(cpuReport)
	prog.finish()
	stopProfile()
	sampler.Stop()
	m1 := serverMetrics(ctx, h)
	u1 := srv.Usage()

	elapsed := lastDone.Sub(start)
	ok := 0
	for _, c := range conns {
		if c != nil {
			ok++
			if c.ids.Repeats > 0 {
				errs.Inc("duplicate SSE event ids")
			}
		}
	}
	events := s.events.Load()
	r.add("connections", float64(ok), "conns")
	r.add("events/s", perSecond(events, elapsed), "events/s")
	r.add("chunks/s", perSecond(s.chunks.Load(), elapsed), "chunks/s")
	r.add("stream time", elapsed.Seconds(), "s").Note = fmt.Sprintf("ideal %.1f s", float64(p.Chunks)/max(p.Rate, 1))
	sum := s.hist.Summary()
	r.add("delay p50", sum.P50MS, "ms")
	m := r.add("delay p99", sum.P99MS, "ms")
	if p.Conns >= 1000 {
		m.target("< 20 ms at 1,000 conns", sum.P99MS < 20)
	}
	r.add("delay max", sum.MaxMS, "ms")
	fs, fm := s.first.Summary(), s.firstModel.Summary()
	r.add("first chunk p50", fs.P50MS, "ms").Note = "prompt sent → its first chunk at the client"
	r.add("first chunk p99", fs.P99MS, "ms")
	r.add("first chunk from model p50", fm.P50MS, "ms").Note = "prompt sent → the model wrote its first chunk"
	r.add("first chunk from model p99", fm.P99MS, "ms")
	fp := s.firstPost.Summary()
	r.add("prompt POST answered p50", fp.P50MS, "ms").Note = "prompt sent → its 202"
	r.add("prompt POST answered p99", fp.P99MS, "ms")
	lost := total.Lost
	m = r.add("lost events", float64(lost), "chunks")
	m.target("0", lost == 0)
	r.add("duplicated events", float64(total.Duplicate), "chunks").target("0", total.Duplicate == 0)
	r.add("errors", float64(errs.Total()), "")
	r.add("server RSS peak", mib(sampler.Peak()), "MiB")
	r.add("server tree PSS peak", mib(sampler.PeakPSS()), "MiB").Note = "the process tree's PSS, sampled every 0.5 s during the stream"
	r.add("server RSS/conn", float64(uSetup.RSS-u0.RSS)/1024/float64(max(ok, 1)), "KiB").Note = "after setup, before prompts"
	if treeSetup.Procs > 0 {
		r.add("server tree PSS after setup", mib(treeSetup.PSS), "MiB").Note = fmt.Sprintf("PSS summed over the server's %d processes, shared pages counted once; summed RSS %.1f MiB", treeSetup.Procs, mib(treeSetup.RSS))
	}
	if tree1, err := proc.ReadTree(srv.Pid()); err == nil {
		r.add("server tree PSS end", mib(tree1.PSS), "MiB").Note = fmt.Sprintf("after the stream; summed RSS %.1f MiB", mib(tree1.RSS))
	}
	r.add("server CPU", (u1.CPU - u0.CPU).Seconds(), "s").Note = "whole run"
	r.add("server CPU (stream)", (u1.CPU - uSetup.CPU).Seconds(), "s")
	r.add("server CPU/event", float64((u1.CPU-uSetup.CPU).Nanoseconds())/1e3/float64(max(events, 1)), "µs").Note = "= ms per 1,000 events"
	r.add("server system CPU/event", float64((u1.SysCPU-uSetup.SysCPU).Nanoseconds())/1e3/float64(max(events, 1)), "µs").Note = "the kernel's part: socket reads and writes"
	if u1.ReadCalls > 0 {
		r.add("server read calls/event", float64(u1.ReadCalls-uSetup.ReadCalls)/float64(max(events, 1)), "calls")
		r.add("server write calls/event", float64(u1.WriteCalls-uSetup.WriteCalls)/float64(max(events, 1)), "calls")
	}
	r.Metrics = append(r.Metrics, cpuReport.Metrics...)
	if v, ok := m1.Get("iaccode_http_buffered_events"); ok {
		r.add("server buffered events", v, "events").Note = "unsent + kept for Last-Event-ID replay, at the end"
	}
	if d, ok := delta(m0, m1, "go_memstats_mallocs_total"); ok {
		r.add("server allocs/event", d/float64(max(events, 1)), "allocs")
	}
	if d, ok := delta(m0, m1, "go_memstats_alloc_bytes_total"); ok {
		r.add("server alloc bytes/event", d/float64(max(events, 1)), "B")
	}
	r.latency("model→client delay", s.hist)
	r.EventsPerSecond = s.rate.PerSecond(lastDone)
	r.Server = sampler.Samples()
	closeConns(ctx, conns, &errs)
	conns = nil
	return total, errs.Snapshot(), events
}

// IdleParams sizes idle-streams.
type IdleParams struct {
	// Streams is the number of open idle SSE streams (10,000), each on its
	// own ACP connection.
	Streams    int
	SetupWidth int
	// Settle is the wait before measuring (2 s).
	Settle time.Duration
	// Hold keeps the streams open that much longer, then checks that the
	// server still holds every one of them (0: no check).
	Hold time.Duration
}

// Idle opens Streams idle event streams and measures the server's memory
// per stream.
func Idle(ctx context.Context, o *Options, p IdleParams) (*Result, error) {
	if p.SetupWidth <= 0 {
		p.SetupWidth = 64
	}
	if p.Settle <= 0 {
		p.Settle = 2 * time.Second
	}
	r := newResult("idle-streams", "streams="+strconv.Itoa(p.Streams), map[string]any{"streams": p.Streams, "hold": p.Hold.String()})
	fake, stopFake := startFake(0)
	defer stopFake()
	srv, err := StartServer(ctx, o, "http", fake.URL())
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	h := o.newHTTP(srv.Addr, 64)
	defer h.Close()
	var errs stats.Counter
	time.Sleep(300 * time.Millisecond)
	m0 := serverMetrics(ctx, h)
	u0 := srv.Usage()
	deadline := time.Now().Add(5*time.Minute + p.Hold + time.Duration(p.Streams)*10*time.Millisecond)
	conns, _ := setupConns(ctx, o, h, p.Streams, p.SetupWidth, deadline, false, false, &errs)
	defer closeConns(context.Background(), conns, nil)
	time.Sleep(p.Settle)
	m1 := serverMetrics(ctx, h)
	u1 := srv.Usage()
	open := 0
	for _, c := range conns {
		if c != nil {
			open++
		}
	}
	if v, ok := m1.Get("iaccode_http_streams"); ok && int(v) != open {
		errs.Inc(fmt.Sprintf("server reports %d open streams, client holds %d", int(v), open))
	}
	per := float64(u1.RSS-u0.RSS) / 1024 / float64(max(open, 1))
	r.add("open streams", float64(open), "streams")
	r.add("server RSS/stream", per, "KiB").target("≤ 32 KiB", per <= 32)
	r.add("server RSS before", mib(u0.RSS), "MiB")
	r.add("server RSS with streams", mib(u1.RSS), "MiB")
	if d, ok := delta(m0, m1, "go_memstats_heap_inuse_bytes"); ok {
		r.add("heap/stream", d/1024/float64(max(open, 1)), "KiB")
	}
	if d, ok := delta(m0, m1, "go_memstats_stack_inuse_bytes"); ok {
		r.add("stack/stream", d/1024/float64(max(open, 1)), "KiB")
	}
	if d, ok := delta(m0, m1, "go_goroutines"); ok {
		r.add("goroutines/stream", d/float64(max(open, 1)), "")
	}
	r.add("server threads", float64(u1.Threads), "")
	if p.Hold > 0 {
		time.Sleep(p.Hold)
		m2 := serverMetrics(ctx, h)
		still, _ := m2.Get("iaccode_http_streams")
		r.add("streams open after hold", still, "streams").Note = "held " + p.Hold.String()
		r.add("server RSS after hold", mib(srv.Usage().RSS), "MiB")
		if int(still) != open {
			errs.Inc(fmt.Sprintf("server closed %d idle streams within %v", open-int(still), p.Settle+p.Hold))
		}
	}
	closeConns(ctx, conns, &errs)
	conns = nil
	r.stop(srv)
	r.instructions(srv, int64(open), "stream")
	r.finish(nil, errs.Snapshot())
	if open != p.Streams {
		r.fail("%d of %d streams opened", open, p.Streams)
	}
	return r, nil
}

// ChurnParams sizes churn.
type ChurnParams struct {
	// Clients run cycles in parallel (50).
	Clients int
	// Duration bounds the run (10 s); MaxCycles too when > 0.
	Duration  time.Duration
	MaxCycles int
	// Chunks of the short prompt's answer (5).
	Chunks int
}

// Churn loops initialize → session/new → prompt → session/close → DELETE.
func Churn(ctx context.Context, o *Options, p ChurnParams) (*Result, error) {
	r := newResult("churn", "clients="+strconv.Itoa(p.Clients), map[string]any{
		"clients": p.Clients, "duration": p.Duration.String(), "chunks": p.Chunks, "maxCycles": p.MaxCycles})
	fake, stopFake := startFake(2 * time.Second)
	defer stopFake()
	fake.SetDefault(streamingReply(p.Chunks, 0))
	srv, err := StartServer(ctx, o, "http", fake.URL())
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	h := o.newHTTP(srv.Addr, max(p.Clients*2, 16))
	defer h.Close()
	var errs stats.Counter
	cycles := stats.NewHistogram()
	var mu sync.Mutex
	total := marker.Check{FirstGap: -1}
	u0 := srv.Usage()
	sampler := proc.StartSampler(srv.Pid(), 500*time.Millisecond, 2000)
	cw := watchCPU(srv.Pid())
	start := time.Now()
	stopAt := start.Add(p.Duration)
	prog := o.progress("churn", int64(p.Duration/time.Second), "s")
	s := newSink(start, p.Duration+time.Minute, &progress{}, false) // the bar shows time, not events
	stopProfile := o.profile(ctx, srv, r, "churn")
	var claimed int64
	var wg sync.WaitGroup
	ticker := time.NewTicker(time.Second)
	go func() {
		for range ticker.C {
			prog.set(int64(time.Since(start) / time.Second))
		}
	}()
	for range p.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stopAt) {
				if p.MaxCycles > 0 {
					mu.Lock()
					claimed++
					over := claimed > int64(p.MaxCycles)
					mu.Unlock()
					if over {
						return
					}
				}
				t0 := time.Now()
				check, err := churnCycle(ctx, o, h, p.Chunks, s, t0.Add(time.Minute))
				mu.Lock()
				total.Add(check)
				mu.Unlock()
				if err != nil {
					errs.Inc(err.Error())
					continue
				}
				cycles.RecordDuration(time.Since(t0))
			}
		}()
	}
	wg.Wait()
	ticker.Stop()
	elapsed := time.Since(start)
	cpuReport := &Result{}
	cw.report(cpuReport)
	prog.finish()
	stopProfile()
	sampler.Stop()
	u1 := srv.Usage()
	n := cycles.Count()
	sum := cycles.Summary()
	r.add("cycles", float64(n), "")
	r.add("cycles/s", perSecond(n, elapsed), "cycles/s")
	r.add("cycle p50", sum.P50MS, "ms")
	r.add("cycle p99", sum.P99MS, "ms")
	r.add("cycle max", sum.MaxMS, "ms")
	r.add("errors", float64(errs.Total()), "")
	r.add("server CPU", (u1.CPU - u0.CPU).Seconds(), "s")
	r.add("server CPU/cycle", float64((u1.CPU-u0.CPU).Microseconds())/1e3/float64(max(n, 1)), "ms").Note = "robust to other load, unlike cycles/s"
	r.add("server RSS start", mib(u0.RSS), "MiB")
	r.add("server RSS end", mib(u1.RSS), "MiB")
	r.Metrics = append(r.Metrics, cpuReport.Metrics...)
	r.latency("cycle time", cycles)
	r.EventsPerSecond = s.rate.PerSecond(time.Now())
	r.Server = sampler.Samples()
	r.stop(srv)
	r.instructions(srv, n, "cycle")
	r.finish(&total, errs.Snapshot())
	return r, nil
}

// churnCycle is one full connection lifetime; errors come back classified.
func churnCycle(ctx context.Context, o *Options, h *acpclient.HTTP, chunks int, s *sink, deadline time.Time) (marker.Check, error) {
	c, err := dialConn(ctx, h, deadline)
	if err != nil {
		return marker.Check{FirstGap: -1}, fmt.Errorf("%s", errKey("connect", err))
	}
	defer func() { _ = c.st.Close() }()
	sid, err := c.newSession(ctx, o.Workdir)
	if err != nil {
		_ = c.close(ctx)
		return marker.Check{FirstGap: -1}, fmt.Errorf("%s", errKey("session/new", err))
	}
	check, err := c.prompt(ctx, sid, chunks, s)
	if err != nil {
		_ = c.close(ctx)
		return check, fmt.Errorf("%s", errKey("prompt", err))
	}
	if err := c.closeSession(ctx, sid); err != nil {
		_ = c.close(ctx)
		return check, fmt.Errorf("%s", errKey("session/close", err))
	}
	if err := c.close(ctx); err != nil {
		return check, fmt.Errorf("%s", errKey("DELETE", err))
	}
	if c.ids.Repeats > 0 {
		return check, fmt.Errorf("duplicate SSE event ids")
	}
	return check, nil
}
