package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/acpclient"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/marker"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/proc"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/stats"
)

// StdioStreamParams sizes stdio-stream.
type StdioStreamParams struct {
	// Chunks is the number of chunks the model streams (200,000).
	Chunks int
	// Baseline also pushes the same lines through a plain writer process.
	Baseline bool
	// ModelFlush makes the fake model flush every chunk (a socket write
	// each, so the server reads one chunk per read); by default it writes
	// as fast as it can and its HTTP server sends full buffers.
	ModelFlush bool
	// Timeout bounds the run (0: 5 minutes).
	Timeout time.Duration
}

// lineStats is what a client read loop measured.
type lineStats struct {
	check      marker.Check
	chunkLines int64
	bytes      int64
	first      time.Time
	last       time.Time
	template   []byte // the first chunk line
	hist       *stats.Histogram
	rate       *stats.Rate
	response   *acpclient.Msg
}

// readChunks reads stdout until the response to id, measuring every
// agent_message_chunk line. The server and the baseline are read by this
// same loop.
func readChunks(c *acpclient.Stdio, id int64, expected int, p *progress, start time.Time, span time.Duration) (*lineStats, error) {
	ls := &lineStats{hist: stats.NewHistogram(), rate: stats.NewRate(start, span)}
	tr := marker.NewTracker()
	bytes0 := c.Bytes
	var pending int64
	resp, err := c.ReadUntil(id, func(m *acpclient.Msg) {
		if m.Kind != acpclient.KindUpdate || !acpclient.IsMessageChunk(m.Data) {
			return
		}
		now := time.Now()
		if ls.chunkLines == 0 {
			ls.first = now
			ls.template = append([]byte(nil), m.Data...)
		}
		ls.last = now
		ls.chunkLines++
		nowNS := now.UnixNano()
		marker.Scan(m.Data, func(seq, ts int64) {
			tr.Add(seq)
			ls.hist.Record(nowNS - ts)
		})
		// Counters shared with other goroutines are touched in batches.
		if pending++; pending == 256 {
			p.add(pending)
			ls.rate.Add(now, pending)
			pending = 0
		}
	})
	p.add(pending)
	ls.rate.Add(time.Now(), pending)
	ls.bytes = c.Bytes - bytes0
	ls.check = tr.Finish(int64(expected))
	ls.response = resp
	return ls, err
}

// StdioStream runs one session over stdio while the model streams Chunks
// chunks as fast as it can.
func StdioStream(ctx context.Context, o *Options, p StdioStreamParams) (*Result, error) {
	if p.Timeout <= 0 {
		p.Timeout = 5 * time.Minute
	}
	variant := "chunks=" + strconv.Itoa(p.Chunks)
	if p.ModelFlush {
		variant += " model-flush"
	}
	r := newResult("stdio-stream", variant, map[string]any{"chunks": p.Chunks, "baseline": p.Baseline, "modelFlush": p.ModelFlush})
	fake, stopFake := startFake(0)
	defer stopFake()
	reply := streamingReply(p.Chunks, 0)
	reply.Buffered = !p.ModelFlush
	fake.Script(reply)

	srv, err := StartServer(ctx, o, "stdio", fake.URL())
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	deadline := time.Now().Add(p.Timeout)
	acpclient.SetReadDeadline(srv.Stdout, deadline)
	c := acpclient.NewStdio(srv.Stdin, srv.Stdout)
	if _, err := c.Call(1, acpclient.Initialize(1), nil); err != nil {
		return nil, fmt.Errorf("initialize: %w; stderr:\n%s", err, srv.Stderr())
	}
	m, err := c.Call(2, acpclient.NewSession(2, o.Workdir), nil)
	if err != nil {
		return nil, fmt.Errorf("session/new: %w", err)
	}
	sid, err := acpclient.SessionID(m.Result)
	if err != nil {
		return nil, err
	}

	ms0, _ := srv.MemStats(ctx)
	u0 := srv.Usage()
	tree0, _ := proc.ReadTree(srv.Pid())
	sampler := proc.StartSampler(srv.Pid(), 5*time.Millisecond, 4000)
	cw := watchCPU(srv.Pid())
	prog := o.progress("stdio-stream", int64(p.Chunks), "chunks")
	stopProfile := o.profile(ctx, srv, r, "stdio-stream")
	start := time.Now()
	if err := c.Send(acpclient.Prompt(3, sid, "stream")); err != nil {
		return nil, err
	}
	ls, err := readChunks(c, 3, p.Chunks, prog, start, p.Timeout)
	total := time.Since(start)
	cpuReport := &Result{}
	cw.report(cpuReport)
	prog.finish()
	stopProfile()
	sampler.Stop()
	if err != nil {
		return nil, fmt.Errorf("prompt: %w; stderr:\n%s", err, srv.Stderr())
	}
	u1 := srv.Usage()
	ms1, _ := srv.MemStats(ctx)
	if ls.response.Err != nil {
		r.fail("prompt answered %v", ls.response.Err)
	} else if sr := acpclient.StopReason(ls.response.Result); sr != "end_turn" {
		r.fail("stopReason %q", sr)
	}

	span := ls.last.Sub(ls.first)
	cps := perSecond(ls.check.Received, span)
	r.add("chunks/s", cps, "chunks/s").Note = "first to last chunk at the client"
	r.add("MB/s", perSecond(ls.bytes, span)/1e6, "MB/s")
	r.add("chunk lines", float64(ls.chunkLines), "lines")
	r.add("bytes/line", float64(ls.bytes)/float64(max(ls.chunkLines, 1)), "B")
	r.add("prompt→response", total.Seconds()*1e3, "ms")
	r.add("server CPU", (u1.CPU - u0.CPU).Seconds(), "s")
	r.add("server CPU/chunk", float64((u1.CPU-u0.CPU).Nanoseconds())/1e3/float64(max(p.Chunks, 1)), "µs")
	r.add("server RSS", mib(u1.RSS), "MiB")
	r.add("server RSS peak", mib(u1.PeakRSS), "MiB").Note = "VmHWM: the highest RSS since the server started"
	r.add("server RSS before prompt", mib(u0.RSS), "MiB").Note = "after initialize and session/new"
	r.add("server anon RSS peak", mib(sampler.PeakAnon()), "MiB").Note = "RssAnon sampled every 5 ms: the process's own memory, without the binary's pages"
	r.add("server anon RSS before prompt", mib(u0.AnonRSS), "MiB")
	if tree0.Procs > 0 {
		r.add("server tree PSS before prompt", mib(tree0.PSS), "MiB").Note = fmt.Sprintf("PSS summed over the server's process tree (%d processes: a watchdog, started with the first tool process, maps the same binary), shared pages counted once; summed RSS %.1f MiB, anonymous PSS %.1f MiB", tree0.Procs, mib(tree0.RSS), mib(tree0.AnonPSS))
	}
	if ms0 != nil && ms1 != nil {
		r.add("server allocs/chunk", float64(ms1.Mallocs-ms0.Mallocs)/float64(max(p.Chunks, 1)), "allocs")
		r.add("server alloc bytes/chunk", float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(max(p.Chunks, 1)), "B")
	} else {
		r.na("server allocs/chunk", "allocs", "stdio mode has no metrics endpoint: run with --debug against the profiling build (task bench:profserver), or see BenchmarkStdioStream")
	}
	r.Metrics = append(r.Metrics, cpuReport.Metrics...)
	r.latency("model→client delay", ls.hist)
	r.EventsPerSecond = ls.rate.PerSecond(ls.last)

	if p.Baseline && ls.template != nil {
		b, err := runBaseline(ctx, o, ls.template, p.Chunks, deadline)
		if err != nil {
			r.fail("baseline: %v", err)
		} else {
			bspan := b.last.Sub(b.first)
			bcps := perSecond(b.check.Received, bspan)
			r.add("baseline chunks/s", bcps, "chunks/s")
			r.add("baseline MB/s", perSecond(b.bytes, bspan)/1e6, "MB/s")
			ratio := cps / bcps
			r.add("server/baseline", ratio, "×").target("≥ 0.5", ratio >= 0.5)
			if !b.check.OK() {
				r.fail("baseline sequence check: %s", b.check)
			}
		}
	}
	r.stop(srv)
	r.instructions(srv, int64(p.Chunks), "chunk")
	r.finish(&ls.check, nil)
	return r, nil
}

func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Environment of the baseline writer child.
const (
	childEnv          = "ACP_BENCH_CHILD"
	baselinePrefixEnv = "ACP_BENCH_BASELINE_PREFIX"
	baselineSuffixEnv = "ACP_BENCH_BASELINE_SUFFIX"
	baselineLinesEnv  = "ACP_BENCH_BASELINE_LINES"
	baselineResponse  = `{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}`
)

// runBaseline runs the minimal writer (this executable, re-executed as
// "baseline-writer") and reads its lines exactly as the server's: one line
// per chunk, the server's first chunk line with one marker (a server line
// may carry several joined chunks).
func runBaseline(ctx context.Context, o *Options, template []byte, n int, deadline time.Time) (*lineStats, error) {
	start, end, ok := marker.Span(template)
	if !ok {
		return nil, errors.New("no marker in the chunk line")
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), childEnv+"=baseline-writer",
		baselinePrefixEnv+"="+string(template[:start]),
		baselineSuffixEnv+"="+string(template[end:]),
		baselineLinesEnv+"="+strconv.Itoa(n))
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	cmd.Stdout = wr
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		wr.Close()
		return nil, err
	}
	wr.Close()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	acpclient.SetReadDeadline(rd, deadline)
	c := acpclient.NewStdio(nil, rd)
	prog := o.progress("baseline", int64(n), "chunks")
	defer prog.finish()
	return readChunks(c, 3, n, prog, time.Now(), time.Until(deadline))
}

// RunChildIfRequested turns this process into a helper child when the
// environment asks for one (the baseline writer, the HTTP relay); call it first thing in
// main and in TestMain.
func RunChildIfRequested() {
	switch os.Getenv(childEnv) {
	case "":
		return
	case "baseline-writer":
		if err := baselineWriter(); err != nil {
			fmt.Fprintln(os.Stderr, "baseline-writer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "http-relay":
		if err := relayMain(); err != nil {
			fmt.Fprintln(os.Stderr, "http-relay:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// baselineWriter is the minimal baseline: pre-encoded NDJSON lines (the
// server's own chunk line with each chunk's marker) written to a pipe
// through a 64 KiB buffer, then the prompt response.
func baselineWriter() error {
	prefix, suffix := os.Getenv(baselinePrefixEnv), os.Getenv(baselineSuffixEnv)
	n, err := strconv.Atoi(os.Getenv(baselineLinesEnv))
	if err != nil {
		return err
	}
	ts := time.Now().UnixNano()
	lines := make([][]byte, n)
	for i := range lines {
		b := make([]byte, 0, len(prefix)+len(suffix)+40)
		b = append(b, prefix...)
		b = marker.Append(b, int64(i), ts)
		b = append(b, suffix...)
		lines[i] = append(b, '\n')
	}
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	for _, l := range lines {
		if _, err := w.Write(l); err != nil {
			return err
		}
	}
	if _, err := w.WriteString(baselineResponse + "\n"); err != nil {
		return err
	}
	return w.Flush()
}

// StartupParams sizes startup.
type StartupParams struct {
	// Runs is the number of process starts (20).
	Runs int
	// Cold drops the server binary's pages from the page cache before each
	// start (posix_fadvise DONTNEED; pages mapped by a live process stay).
	// A binary the linker just wrote can sit in the cache in 2 MiB folios
	// that the kernel maps whole on the first touch (Linux 6.18 maps a
	// large folio at once), so a warm run measures the file's history;
	// a cold one measures what the server touches, as after a reboot.
	Cold bool
}

// Startup measures process start → initialize answered over stdio.
func Startup(ctx context.Context, o *Options, p StartupParams) (*Result, error) {
	params := "runs=" + strconv.Itoa(p.Runs)
	if p.Cold {
		params += " cold"
	}
	r := newResult("startup", params, map[string]any{"runs": p.Runs, "cold": p.Cold})
	fake, stopFake := startFake(0)
	defer stopFake()
	prog := o.progress("startup", int64(p.Runs), "runs")
	var times []time.Duration
	var idle []idleUsage
	h := stats.NewHistogram()
	errs := map[string]int64{}
	for range p.Runs {
		if p.Cold {
			if err := dropFromPageCache(o.Bin); err != nil {
				return nil, fmt.Errorf("--cold: %w", err)
			}
		}
		d, u, err := startOnce(ctx, o, fake.URL())
		prog.add(1)
		if err != nil {
			errs[err.Error()]++
			continue
		}
		times = append(times, d)
		h.RecordDuration(d)
		if u.ok {
			idle = append(idle, u)
		}
	}
	prog.finish()
	if len(times) == 0 {
		r.finish(nil, errs)
		return r, nil
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	med := stats.Exact(times, 50)
	r.add("median", ms(med), "ms").target("< 20 ms", med < 20*time.Millisecond)
	r.add("min", ms(stats.Exact(times, 0.001)), "ms")
	r.add("p90", ms(stats.Exact(times, 90)), "ms")
	r.add("max", ms(stats.Exact(times, 100)), "ms")
	r.latency("process start → initialize answered", h)
	if len(idle) > 0 {
		median := func(f func(idleUsage) int64) float64 {
			v := make([]float64, len(idle))
			for i, u := range idle {
				v[i] = mib(f(u))
			}
			return stats.Exact(v, 50)
		}
		file := median(func(u idleUsage) int64 { return u.self.FileRSS })
		r.add("idle RssFile", file, "MiB").target("≤ 30 MiB", file <= 30).Note =
			"the binary's pages in the server's page tables, idle after initialize (median of the runs); depends on the page cache: see docs/performance.md, Idle footprint"
		r.add("idle RssAnon", median(func(u idleUsage) int64 { return u.self.AnonRSS }), "MiB")
		r.add("idle tree PSS", median(func(u idleUsage) int64 { return u.tree.PSS }), "MiB").Note =
			"PSS summed over the server's process tree (a watchdog runs once a tool process started), shared pages counted once"
		r.add("idle tree RSS", median(func(u idleUsage) int64 { return u.tree.RSS }), "MiB").Note = "summed RSS: pages several processes map count once per process"
	}
	r.finish(nil, errs)
	return r, nil
}

// idleSettle is how long after the initialize answer the idle server is
// read: what it starts in the background settles meanwhile.
const idleSettle = 300 * time.Millisecond

// idleUsage is the server's memory, and its tree's, once idle after
// initialize.
type idleUsage struct {
	self proc.Usage
	tree proc.Tree
	ok   bool
}

// startOnce starts a fresh server over stdio, answers the time from just
// before exec to the initialize response and its memory idle after it,
// and stops it.
func startOnce(ctx context.Context, o *Options, fakeURL string) (time.Duration, idleUsage, error) {
	s, err := startStdioServer(o, fakeURL)
	if err != nil {
		return 0, idleUsage{}, err
	}
	defer s.stop()
	if err := s.initialize(); err != nil {
		return 0, idleUsage{}, err
	}
	d := time.Since(s.started)
	var u idleUsage
	select {
	case <-ctx.Done():
	case <-time.After(idleSettle):
		var err1, err2 error
		u.self, err1 = proc.Read(s.cmd.Process.Pid)
		u.tree, err2 = proc.ReadTree(s.cmd.Process.Pid)
		u.ok = err1 == nil && err2 == nil
	}
	return d, u, nil
}
