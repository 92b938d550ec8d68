// Package bench runs acp-bench's workloads against the server under test
// (the built iac-code binary, as a child process) fed by the scripted fake
// model (llmtest, in this process on 127.0.0.1). The CLI and the smoke tests
// call the same functions.
package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/marker"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/proc"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/stats"
	"github.com/iac-code/iac-code/llm/llmtest"
)

// Options are shared by every workload.
type Options struct {
	// Bin is the iac-code binary under test.
	Bin string
	// Home is IAC_CODE_HOME for the server; Workdir is the session cwd.
	// Prepare fills empty ones with temporary directories (Home on tmpfs
	// when /dev/shm exists, so fsyncs do not measure the disk).
	Home    string
	Workdir string
	// LogLevel is IAC_CODE_LOG_LEVEL (default warn: info logs a line per
	// connection, which would be measured too).
	LogLevel string
	// Debug asks a profiling build of the server for allocation counts
	// (see DebugAddrEnv); the shipped binary ignores it.
	Debug bool
	// CPUProfile, when set (needs Debug and a profiling build), is the
	// prefix of the files receiving a CPU profile of each measured phase.
	CPUProfile string
	// Valgrind runs the server under valgrind's cachegrind, which counts
	// the instructions it executes: a figure that other load on the
	// machine does not change (the run itself is ~50× slower).
	Valgrind bool
	// Progress shows a progress bar on ProgressOut (default stderr).
	Progress    bool
	ProgressOut io.Writer
	// Log receives one-line notes (nil: discarded).
	Log io.Writer
	// AuthToken, when set, makes the HTTP server require identities: a
	// tokens file of 100 users (IAC_CODE_AUTH_TOKENS_FILE) of which this
	// token is one, sent by every client request.
	AuthToken  string
	tokensFile string

	cleanup []func()
}

// Prepare creates the temporary directories; Cleanup removes them.
func (o *Options) Prepare() error {
	if o.LogLevel == "" {
		o.LogLevel = "warn"
	}
	if o.ProgressOut == nil {
		o.ProgressOut = os.Stderr
	}
	if o.Bin == "" {
		return fmt.Errorf("no server binary (--server)")
	}
	if abs, err := filepath.Abs(o.Bin); err == nil {
		o.Bin = abs
	}
	if _, err := os.Stat(o.Bin); err != nil {
		return fmt.Errorf("server binary: %w (build it: go build -o bin/iac-code ./cmd/iac-code)", err)
	}
	if o.Home == "" {
		root := ""
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			root = "/dev/shm"
		}
		d, err := os.MkdirTemp(root, "acp-bench-home-")
		if err != nil {
			return err
		}
		o.Home = d
		o.cleanup = append(o.cleanup, func() { _ = os.RemoveAll(d) })
	}
	if o.AuthToken != "" {
		o.tokensFile = filepath.Join(o.Home, "acp-bench-users.yaml")
		var b strings.Builder
		b.WriteString("users:\n")
		for i := range 100 {
			tok := fmt.Sprintf("acp-bench-user-%d", i)
			if i == 99 {
				tok = o.AuthToken // the last one: the whole list is compared
			}
			sum := sha256.Sum256([]byte(tok))
			fmt.Fprintf(&b, "  - name: bench-%d\n    token_sha256: \"%x\"\n", i, sum)
		}
		if err := os.WriteFile(o.tokensFile, []byte(b.String()), 0o600); err != nil {
			return err
		}
	}
	if o.Workdir == "" {
		d, err := os.MkdirTemp("", "acp-bench-cwd-")
		if err != nil {
			return err
		}
		o.Workdir = d
		o.cleanup = append(o.cleanup, func() { _ = os.RemoveAll(d) })
	}
	return nil
}

// Clone is a copy of o that owns none of o's temporary directories (its
// own Prepare and Cleanup leave o's alone).
func (o *Options) Clone() *Options {
	c := *o
	c.cleanup = nil
	return &c
}

// Cleanup removes what Prepare created.
func (o *Options) Cleanup() {
	for _, f := range o.cleanup {
		f()
	}
	o.cleanup = nil
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// Metric is one figure of a result.
type Metric struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Target is the goal in words, Met whether it was reached
	// (nil: no target).
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
	// NA marks a figure that could not be measured (Note says why).
	NA   bool   `json:"na,omitempty"`
	Note string `json:"note,omitempty"`
}

// Result is what one workload run produced.
type Result struct {
	Workload string         `json:"workload"`
	Variant  string         `json:"variant,omitempty"`
	Params   map[string]any `json:"params"`
	Started  time.Time      `json:"started"`
	Seconds  float64        `json:"seconds"`
	Metrics  []Metric       `json:"metrics"`
	// OK is the correctness verdict: no lost, duplicated or reordered
	// event, no error. Performance targets do not affect it.
	OK       bool     `json:"ok"`
	Failures []string `json:"failures,omitempty"`
	// Check sums the per-stream sequence checks.
	Check  *marker.Check    `json:"check,omitempty"`
	Errors map[string]int64 `json:"errors,omitempty"`
	// Latency is the model→client delay of chunks (or the cycle time for
	// churn, the start time for startup: see LatencyLabel).
	LatencyLabel string         `json:"latencyLabel,omitempty"`
	Latency      *stats.Summary `json:"latency,omitempty"`
	LatencyBins  []stats.Bin    `json:"latencyBins,omitempty"`
	// EventsPerSecond is the client's receive rate, second by second.
	EventsPerSecond []int64 `json:"eventsPerSecond,omitempty"`
	// Server are RSS/CPU samples of the server process.
	Server   []proc.Sample `json:"server,omitempty"`
	Profiles []string      `json:"profiles,omitempty"`
	Notes    []string      `json:"notes,omitempty"`
}

func newResult(workload, variant string, params map[string]any) *Result {
	return &Result{Workload: workload, Variant: variant, Params: params, Started: time.Now(), OK: true}
}

func (r *Result) add(name string, v float64, unit string) *Metric {
	r.Metrics = append(r.Metrics, Metric{Name: name, Value: v, Unit: unit})
	return &r.Metrics[len(r.Metrics)-1]
}

func (r *Result) na(name, unit, why string) {
	r.Metrics = append(r.Metrics, Metric{Name: name, Unit: unit, NA: true, Note: why})
}

// target attaches a goal to the metric just added.
func (m *Metric) target(text string, met bool) *Metric {
	m.Target, m.Met = text, &met
	return m
}

// Metric finds a metric by name.
func (r *Result) Metric(name string) (Metric, bool) {
	for _, m := range r.Metrics {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}

func (r *Result) fail(format string, args ...any) {
	r.OK = false
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// finish sets the duration and folds checks and errors into OK.
func (r *Result) finish(check *marker.Check, errs map[string]int64) {
	r.Seconds = time.Since(r.Started).Seconds()
	r.Check = check
	if check != nil && !check.OK() {
		r.fail("sequence check: %s", check)
	}
	if len(errs) > 0 {
		r.Errors = errs
		keys := make([]string, 0, len(errs))
		for k := range errs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s×%d", k, errs[k]))
		}
		r.fail("errors: %s", strings.Join(parts, ", "))
	}
}

func (r *Result) latency(label string, h *stats.Histogram) {
	if h.Count() == 0 {
		return
	}
	s := h.Summary()
	r.LatencyLabel, r.Latency = label, &s
	r.LatencyBins = h.Bins(latencyEdges)
}

// latencyEdges are the chart bins, in nanoseconds: 1-2-5 steps from 50 µs
// to 20 s.
var latencyEdges = func() []int64 {
	var e []int64
	for base := int64(10_000); base <= 1_000_000_000; base *= 10 {
		e = append(e, base*5, base*10, base*20)
	}
	return e
}()

// progress shows a bar fed from an atomic counter, redrawn a few times a
// second (never from the hot path).
type progress struct {
	n    atomic.Int64
	bar  *progressbar.ProgressBar
	stop chan struct{}
	done chan struct{}
}

func (o *Options) progress(desc string, total int64, unit string) *progress {
	p := &progress{stop: make(chan struct{}), done: make(chan struct{})}
	if !o.Progress {
		close(p.done)
		return p
	}
	p.bar = progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(o.ProgressOut),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionSetItsString(unit),
		progressbar.OptionShowIts(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	go func() {
		defer close(p.done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				_ = p.bar.Set64(p.n.Load())
				_ = p.bar.Finish()
				return
			case <-t.C:
				_ = p.bar.Set64(p.n.Load())
			}
		}
	}()
	return p
}

func (p *progress) add(n int64) { p.n.Add(n) }
func (p *progress) set(n int64) { p.n.Store(n) }

func (p *progress) finish() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// startFake starts the fake model; with reset > 0 its request log is
// cleared that often (long runs would otherwise keep every request body).
func startFake(reset time.Duration) (*llmtest.Server, func()) {
	f := llmtest.NewServer()
	stop := make(chan struct{})
	if reset > 0 {
		go func() {
			t := time.NewTicker(reset)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					f.Reset()
				}
			}
		}()
	}
	return f, func() { close(stop); f.Close() }
}

// streamingReply is every prompt's answer: n chunks carrying markers, one
// every interval (0: as fast as possible).
func streamingReply(n int, interval time.Duration) llmtest.Reply {
	return llmtest.Reply{Chunks: n, ChunkFunc: marker.Now, Delay: interval}
}

// profile starts a CPU profile of the server when asked and possible; the
// returned function stops it and writes the file.
func (o *Options) profile(ctx context.Context, s *Server, r *Result, name string) func() {
	if o.CPUProfile == "" {
		return func() {}
	}
	if s.Debug == "" {
		r.Notes = append(r.Notes, "no CPU profile: the server binary has no profiling endpoint (build cmd/acp-bench/internal/profserver)")
		return func() {}
	}
	if err := s.StartCPUProfile(ctx); err != nil {
		r.Notes = append(r.Notes, "CPU profile: "+err.Error())
		return func() {}
	}
	return func() {
		b, err := s.StopCPUProfile(ctx)
		if err != nil {
			r.Notes = append(r.Notes, "CPU profile: "+err.Error())
			return
		}
		path := o.CPUProfile + "-" + name + ".pprof"
		if err := os.WriteFile(path, b, 0o644); err != nil {
			r.Notes = append(r.Notes, "CPU profile: "+err.Error())
			return
		}
		r.Profiles = append(r.Profiles, path)
	}
}

// stop stops the server; a server that did not end cleanly (a non-zero
// exit, a crash by a signal it was not sent: valgrind's SIGILL, a
// segfault) fails the run, whatever it measured before.
func (r *Result) stop(s *Server) {
	if err := s.Stop(); err != nil {
		r.fail("%v", err)
	}
}

// instructions adds the server's instruction count (Options.Valgrind),
// in total and per unit of work (startup included: compare runs of one
// size).
func (r *Result) instructions(s *Server, n int64, unit string) {
	ir, ok := s.Instructions()
	if !ok {
		return
	}
	r.add("server instructions", float64(ir), "instr").Note = "cachegrind, the whole run, startup included"
	r.add("server instructions/"+unit, float64(ir)/float64(max(n, 1)), "instr")
}

// mib formats bytes as MiB.
func mib(b int64) float64 { return float64(b) / (1 << 20) }

// cpuWatch splits the machine's CPU time over an interval between the
// server, acp-bench itself (fake model and clients) and everything else,
// so a figure taken while other work ran on the machine says so.
type cpuWatch struct {
	pid        int
	sys0       proc.System
	srv0, own0 time.Duration
	start      time.Time
}

func watchCPU(pid int) *cpuWatch {
	w := &cpuWatch{pid: pid, start: time.Now()}
	w.sys0, _ = proc.ReadSystem()
	if u, err := proc.Read(pid); err == nil {
		w.srv0 = u.CPU
	}
	if u, err := proc.Read(0); err == nil {
		w.own0 = u.CPU
	}
	return w
}

// report adds "server CPU", "acp-bench CPU" and "other CPU" in cores
// (CPU seconds per second of the interval).
func (w *cpuWatch) report(r *Result) {
	secs := time.Since(w.start).Seconds()
	if secs <= 0 {
		return
	}
	sys, _ := proc.ReadSystem()
	var srv, own time.Duration
	if u, err := proc.Read(w.pid); err == nil {
		srv = u.CPU - w.srv0
	}
	if u, err := proc.Read(0); err == nil {
		own = u.CPU - w.own0
	}
	busy := sys.Busy - w.sys0.Busy
	other := max(busy-srv-own, 0)
	r.add("server cores", srv.Seconds()/secs, "cores")
	r.add("acp-bench cores", own.Seconds()/secs, "cores").Note = "fake model + clients"
	r.add("other cores", other.Seconds()/secs, "cores").Note = "other processes on the machine: > 0.1 disturbs the figures"
}
