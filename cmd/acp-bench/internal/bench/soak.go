package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/marker"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/proc"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/stats"
)

// SoakParams sizes soak.
type SoakParams struct {
	// Conns connections (1,000) run turns back to back for Duration (10
	// min): session/new → prompt (Chunks at Rate chunks/s) → session/close.
	Conns  int
	Chunks int
	Rate   float64
	// Duration is when clients stop starting turns; running turns finish.
	Duration time.Duration
	// DropEvery is the mean time between stream drops of a connection (5 s;
	// exponentially distributed); a dropped stream is resumed with
	// Last-Event-ID after a random pause below ReconnectMax (200 ms).
	DropEvery    time.Duration
	ReconnectMax time.Duration
	SetupWidth   int
	// Warmup is the share of Duration left out of the RSS slope (0.2).
	Warmup float64
}

// Soak is http-fanout for a long time with random stream drops and resumes.
func Soak(ctx context.Context, o *Options, p SoakParams) (*Result, error) {
	if p.SetupWidth <= 0 {
		p.SetupWidth = 64
	}
	if p.Warmup <= 0 || p.Warmup >= 1 {
		p.Warmup = 0.2
	}
	r := newResult("soak", fmt.Sprintf("conns=%d duration=%v", p.Conns, p.Duration), map[string]any{
		"conns": p.Conns, "chunks": p.Chunks, "rate": p.Rate, "duration": p.Duration.String(),
		"dropEvery": p.DropEvery.String(), "reconnectMax": p.ReconnectMax.String()})
	fake, stopFake := startFake(2 * time.Second)
	defer stopFake()
	fake.SetDefault(streamingReply(p.Chunks, interval(p.Rate)))
	srv, err := StartServer(ctx, o, "http", fake.URL())
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	h := o.newHTTP(srv.Addr, 256)
	defer h.Close()
	turnTime := time.Duration(float64(p.Chunks) / max(p.Rate, 1) * float64(time.Second))
	deadline := time.Now().Add(p.Duration + 3*turnTime + 2*time.Minute + time.Duration(p.Conns)*20*time.Millisecond)
	var errs stats.Counter
	conns, _ := setupConns(ctx, o, h, p.Conns, p.SetupWidth, deadline, false, false, &errs)
	defer closeConns(context.Background(), conns, nil)

	live0, _ := srv.LiveMemStats(ctx) // nil unless a profiling build
	u0 := srv.Usage()
	m0 := serverMetrics(ctx, h)
	sampler := proc.StartSampler(srv.Pid(), time.Second, 4000)
	cw := watchCPU(srv.Pid())
	start := time.Now()
	stopAt := start.Add(p.Duration)
	prog := o.progress("soak", int64(p.Duration/time.Second), "s")
	s := newSink(start, p.Duration+3*turnTime+time.Minute, &progress{}, false)
	stopProfile := o.profile(ctx, srv, r, "soak")
	ticker := time.NewTicker(time.Second)
	go func() {
		for range ticker.C {
			prog.set(int64(time.Since(start) / time.Second))
		}
	}()

	var mu sync.Mutex
	total := marker.Check{FirstGap: -1}
	var turns, reconnects, gaveUp atomic.Int64
	var wg sync.WaitGroup
	for i, c := range conns {
		if c == nil {
			continue
		}
		c.enableDrops(p.DropEvery, p.ReconnectMax, uint64(i)+1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { reconnects.Add(c.reconnects) }()
			for time.Now().Before(stopAt) {
				err := soakTurn(ctx, o, c, p.Chunks, s, &mu, &total)
				if err == nil {
					turns.Add(1)
					continue
				}
				errs.Inc(err.Error())
				// Resume the stream and go on; give up when even that fails.
				if rerr := c.reconnect(ctx); rerr != nil {
					errs.Inc(errKey("resume after error", rerr))
					gaveUp.Add(1)
					return
				}
			}
		}()
	}
	wg.Wait()
	ticker.Stop()
	end := time.Now()
	cpuReport := &Result{}
	cw.report(cpuReport)
	prog.finish()
	stopProfile()
	sampler.Stop()
	u1 := srv.Usage()
	m1 := serverMetrics(ctx, h)
	live1, _ := srv.LiveMemStats(ctx)
	idRepeats := int64(0)
	for _, c := range conns {
		if c != nil {
			idRepeats += c.ids.Repeats
		}
	}
	if idRepeats > 0 {
		errs.Inc(fmt.Sprintf("duplicate SSE event ids ×%d", idRepeats))
	}

	samples := sampler.Samples()
	slope, r2, mean := rssSlope(samples, time.Duration(p.Warmup*float64(p.Duration)))
	elapsed := end.Sub(start)
	sum := s.hist.Summary()
	r.add("turns", float64(turns.Load()), "")
	r.add("events", float64(s.events.Load()), "")
	r.add("events/s", perSecond(s.events.Load(), elapsed), "events/s")
	r.add("reconnects", float64(reconnects.Load()), "")
	r.add("lost events", float64(total.Lost), "chunks").target("0", total.Lost == 0)
	r.add("duplicated events", float64(total.Duplicate+idRepeats), "").target("0", total.Duplicate+idRepeats == 0)
	r.add("errors", float64(errs.Total()), "")
	r.add("delay p50", sum.P50MS, "ms")
	r.add("delay p99", sum.P99MS, "ms")
	r.add("delay max", sum.MaxMS, "ms")
	// Flat: the fitted growth over the whole run stays under 5 % of the
	// mean RSS.
	flat := math.Abs(slope)*elapsed.Minutes() < 0.05*mean
	r.add("RSS slope", slope, "KiB/min").target("≈ 0 (growth over the run < 5 % of mean RSS)", flat).Note =
		fmt.Sprintf("least squares after %.0f%% warm-up, R²=%.2f", p.Warmup*100, r2)
	r.add("server RSS mean", mean/1024, "MiB")
	r.add("server RSS peak", mib(sampler.Peak()), "MiB")
	r.add("server CPU", (u1.CPU - u0.CPU).Seconds(), "s")
	r.Metrics = append(r.Metrics, cpuReport.Metrics...)
	if v, ok := m1.Get("iaccode_http_buffered_events"); ok {
		r.add("server buffered events", v, "events").Note = "unsent + kept for Last-Event-ID replay, at the end"
	}
	if v, ok := m1.Get("go_memstats_heap_inuse_bytes"); ok {
		r.add("server heap in use", v/(1<<20), "MiB")
	}
	// The live heap (after a collection, profiling build) grown since the
	// streams were set up, over the events kept for replay at the end (the
	// sessions of the turns are closed by then).
	if live1 != nil && live0 != nil {
		if v, ok := m1.Get("iaccode_http_buffered_events"); ok && v > 0 {
			r.add("live heap/buffered event", (float64(live1.HeapInuse)-float64(live0.HeapInuse))/v, "B").Note =
				"live heap (after a GC) grown since setup, over the events buffered at the end"
		}
	}
	if d, ok := delta(m0, m1, "iaccode_http_stream_reconnects_total"); ok {
		r.add("server-side resumes", d, "")
	}
	if gaveUp.Load() > 0 {
		r.fail("%d clients gave up", gaveUp.Load())
	}
	r.latency("model→client delay", s.hist)
	r.EventsPerSecond = s.rate.PerSecond(end)
	r.Server = samples
	closeConns(ctx, conns, &errs)
	conns = nil
	r.stop(srv)
	r.finish(&total, errs.Snapshot())
	return r, nil
}

func soakTurn(ctx context.Context, o *Options, c *hconn, chunks int, s *sink, mu *sync.Mutex, total *marker.Check) error {
	sid, err := c.newSession(ctx, o.Workdir)
	if err != nil {
		return fmt.Errorf("%s", errKey("session/new", err))
	}
	check, err := c.prompt(ctx, sid, chunks, s)
	mu.Lock()
	total.Add(check)
	mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s", errKey("prompt", err))
	}
	if err := c.closeSession(ctx, sid); err != nil {
		return fmt.Errorf("%s", errKey("session/close", err))
	}
	return nil
}

// rssSlope fits RSS (KiB) against time (minutes) over the samples after
// warmup; mean is the mean RSS in KiB of those samples.
func rssSlope(samples []proc.Sample, warmup time.Duration) (slope, r2, mean float64) {
	var xs, ys []float64
	for _, s := range samples {
		if s.T < warmup {
			continue
		}
		xs = append(xs, s.T.Minutes())
		ys = append(ys, float64(s.RSS)/1024)
	}
	if len(ys) == 0 {
		return 0, 0, 0
	}
	for _, y := range ys {
		mean += y
	}
	mean /= float64(len(ys))
	slope, r2 = stats.Slope(xs, ys)
	return slope, r2, mean
}
