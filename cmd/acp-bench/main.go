// Command acp-bench measures the iac-code ACP server: it starts the built
// server binary as a child process and the scripted fake model (llmtest) in
// this process, runs a workload, and prints a results table (--json and
// --html write machine-readable results and a self-contained report).
//
//	go build -o bin/iac-code ./cmd/iac-code
//	go run ./cmd/acp-bench http-fanout --conns 1000 --html report.html
//
// Every chunk of the fake model carries "<seq>@<unixnano>|", so the client
// measures the model→client delay and detects lost, duplicated and
// reordered events. Only loopback addresses are used.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/bench"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/proc"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/report"
)

func main() {
	bench.RunChildIfRequested()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		if errors.Is(context.Cause(ctx), context.Canceled) {
			// Give the run a moment to stop its servers, then make sure.
			time.Sleep(3 * time.Second)
			bench.KillAll()
			fmt.Fprintln(os.Stderr, "acp-bench: interrupted")
			os.Exit(130)
		}
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// workloads in the order "all" runs them (soak is never part of all).
var workloads = []string{"stdio-stream", "http-fanout", "idle-streams", "churn", "startup", "idle"}

const usage = `usage: acp-bench <workload> [flags]

workloads:
  stdio-stream   one session over stdio; the model streams --chunks (200000) as fast as it can
                 (--model-flush: a socket write per chunk); compared with a plain writer pushing
                 the same chunks, one line each, through a pipe
  http-fanout    --conns (100,1000,5000) HTTP+SSE connections, each its own session and prompt,
                 --chunks (500) per prompt at --rate (50) chunks/s each; --pods N: N cluster pods
                 (throwaway PostgreSQL) behind a round-robin proxy the clients go through;
                 --ws: every connection is a WebSocket on /acp; then the same run against a
                 minimal standard-library relay of the model stream (--baseline=false: not)
  idle-streams   --streams (10000) open idle SSE streams: server RSS per stream; --hold 90s
                 also checks that the server keeps them open
  churn          initialize → session/new → short prompt → session/close → DELETE in a loop
                 over --clients (50) parallel clients for --duration (10s)
  startup        process start → initialize answered over stdio, --runs (20) times
                 and the idle server's RssFile, RssAnon and tree PSS after it; --cold: the
                 binary dropped from the page cache before each start
  idle           an idle stdio server, --runs (5) starts: RssAnon, RssFile and PSS of the
                 server and of the other processes of its tree, the tree's PSS beside its
                 summed RSS, --settle (1s) after start and again after initialize; --cold
  soak           http-fanout for --duration (10m) with --conns (1000); streams drop at random
                 (mean --drop-every 5s) and resume with Last-Event-ID
  survive        --turns (100) running turns of 30 bash steps (0.3 s each) on one pod of --pods (3),
                 prompted through the others; SIGTERM of that pod (--kill: kill -9): the time from
                 the signal to each turn's next model request from another pod (p50, p99), and
                 every prompt must still end end_turn
  all            every workload above except soak and survive, with the defaults

compare with a previous build: add --compare REF (a git ref: main, HEAD~1, a commit);
the ref is built into bin/compare/<commit>/ and the workload runs --rounds times
against each build, alternating (before, after, after, before, ...), then the
medians of every figure are printed side by side, e.g.
  acp-bench stdio-stream --compare main --rounds 5

flags:
`

type config struct {
	server, jsonPath, htmlPath, home, logLevel, cpuProfile, authToken string
	selfProfile, compareRef, beforeServer                             string
	noProgress, debug, baseline, modelFlush, valgrind, cold           bool
	chunks, streams, clients, runs, maxCycles, setupWidth             int
	rounds, turns                                                     int
	kill                                                              bool
	conns                                                             string
	rate                                                              float64
	duration, dropEvery, reconnectMax, timeout, hold, ramp, settle    time.Duration
	pods                                                              int
	ws                                                                bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(stderr, usage)
		return 2
	}
	workload := args[0]
	var c config
	fs := flag.NewFlagSet("acp-bench "+workload, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	fs.StringVar(&c.server, "server", "bin/iac-code", "path of the built iac-code binary under test")
	fs.StringVar(&c.jsonPath, "json", "", "write machine-readable results to this file")
	fs.StringVar(&c.htmlPath, "html", "", "write a self-contained HTML report (charts) to this file")
	fs.StringVar(&c.home, "home", "", "IAC_CODE_HOME of the server (default: a fresh directory on /dev/shm)")
	fs.StringVar(&c.logLevel, "log-level", "warn", "IAC_CODE_LOG_LEVEL of the server")
	fs.StringVar(&c.authToken, "auth-token", "", "HTTP: require identities (a tokens file of 100 users, this token the last) and send this token on every request")
	fs.BoolVar(&c.noProgress, "no-progress", false, "no progress bar")
	fs.BoolVar(&c.valgrind, "valgrind", false, "run the server under valgrind's cachegrind and report the instructions it executed (robust to other load; ~50× slower: use small sizes)")
	fs.BoolVar(&c.debug, "debug", false, "read allocation counts from a profiling build of the server (bin/iac-code-prof, task bench:profserver)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "with a profiling build: write a CPU profile of each measured phase to PREFIX-<workload>.pprof (implies --debug)")
	fs.StringVar(&c.selfProfile, "bench-cpuprofile", "", "write a CPU profile of acp-bench itself (fake model + clients) to this file")
	fs.IntVar(&c.chunks, "chunks", 0, "chunks per prompt (default: stdio-stream 200000, http-fanout/soak 500, churn 5)")
	fs.StringVar(&c.conns, "conns", "", "connections, comma-separated for several runs (default: http-fanout 100,1000,5000; soak 1000)")
	fs.Float64Var(&c.rate, "rate", 50, "chunks/s of each prompt (http-fanout, soak)")
	fs.IntVar(&c.streams, "streams", 10000, "idle SSE streams (idle-streams)")
	fs.DurationVar(&c.hold, "hold", 0, "keep the idle streams open this long, then check the server still holds them all (idle-streams)")
	fs.IntVar(&c.clients, "clients", 50, "parallel clients (churn)")
	fs.IntVar(&c.maxCycles, "max-cycles", 0, "stop churn after this many cycles (0: only --duration)")
	fs.DurationVar(&c.duration, "duration", 0, "run time (default: churn 10s, soak 10m)")
	fs.IntVar(&c.runs, "runs", 0, "process starts (startup 20, idle 5)")
	fs.DurationVar(&c.settle, "settle", time.Second, "idle: how long the server idles before each reading")
	fs.BoolVar(&c.cold, "cold", false, "startup, idle: drop the server binary from the page cache before each start, as after a reboot or an image pull (the idle RssFile then does not depend on how the file was written)")
	fs.DurationVar(&c.dropEvery, "drop-every", 5*time.Second, "mean time between stream drops per connection (soak)")
	fs.DurationVar(&c.reconnectMax, "reconnect-max", 200*time.Millisecond, "longest pause before a dropped stream resumes (soak)")
	fs.BoolVar(&c.baseline, "baseline", true, "also run the baseline: the plain writer (stdio-stream), the standard-library relay (http-fanout over SSE on one server; not with --compare)")
	fs.BoolVar(&c.modelFlush, "model-flush", false, "the fake model flushes every chunk, a socket write each (stdio-stream; default: full buffers, as a model that outruns the network)")
	fs.IntVar(&c.setupWidth, "setup-width", 64, "connections set up at once")
	fs.DurationVar(&c.ramp, "ramp", 0, "http-fanout: start the prompts evenly over this time instead of all at once")
	fs.IntVar(&c.turns, "turns", 100, "survive: running turns on the pod that goes")
	fs.BoolVar(&c.kill, "kill", false, "survive: kill -9 the pod instead of SIGTERM")
	fs.BoolVar(&c.ws, "ws", false, "http-fanout: every connection is a WebSocket on /acp instead of POSTs and an SSE stream")
	fs.IntVar(&c.pods, "pods", 0, "http-fanout: run that many cluster pods (throwaway PostgreSQL) behind a round-robin proxy; 0: one plain server")
	fs.DurationVar(&c.timeout, "timeout", 0, "bound of one run (default: derived from the sizes)")
	fs.StringVar(&c.compareRef, "compare", "", "compare --server with the build of this git ref, in alternating rounds")
	fs.IntVar(&c.rounds, "rounds", 3, "rounds per build (--compare)")
	fs.StringVar(&c.beforeServer, "before-server", "", "with --compare: use this binary as the before build instead of building the ref")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "acp-bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	var names []string
	switch workload {
	case "all":
		names = workloads
	case "stdio-stream", "http-fanout", "idle-streams", "churn", "startup", "idle", "soak", "survive":
		names = []string{workload}
	default:
		fmt.Fprintf(stderr, "acp-bench: unknown workload %q\n\n", workload)
		fmt.Fprint(stderr, usage)
		return 2
	}

	if lim, err := proc.RaiseNoFile(); err != nil {
		fmt.Fprintf(stderr, "acp-bench: raising the open-file limit: %v\n", err)
	} else if need := neededFiles(names, &c); uint64(need) > lim {
		fmt.Fprintf(stderr, "acp-bench: warning: the open-file limit is %d, the run needs about %d (raise ulimit -n)\n", lim, need)
	}
	o := &bench.Options{
		Bin: c.server, Home: c.home, LogLevel: c.logLevel, AuthToken: c.authToken, Debug: c.debug || c.cpuProfile != "",
		CPUProfile: c.cpuProfile, Progress: !c.noProgress, ProgressOut: stderr, Log: stderr, Valgrind: c.valgrind,
	}
	if err := o.Prepare(); err != nil {
		fmt.Fprintln(stderr, "acp-bench:", err)
		return 2
	}
	defer o.Cleanup()

	if c.selfProfile != "" {
		f, err := os.Create(c.selfProfile)
		if err != nil {
			fmt.Fprintln(stderr, "acp-bench:", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "acp-bench:", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	if c.compareRef != "" || c.beforeServer != "" {
		return runCompare(ctx, names, args, o, &c, stdout, stderr)
	}
	var results []*bench.Result
	failed := false
	for _, name := range names {
		rs, err := runWorkload(ctx, name, o, &c)
		results = append(results, rs...)
		if err != nil {
			fmt.Fprintf(stderr, "acp-bench: %s: %v\n", name, err)
			failed = true
			continue
		}
		report.Table(stdout, rs)
	}
	run := report.Machine("acp-bench "+strings.Join(args, " "), o.Bin)
	if c.jsonPath != "" {
		if err := report.WriteJSON(c.jsonPath, run, results); err != nil {
			fmt.Fprintln(stderr, "acp-bench: --json:", err)
			failed = true
		}
	}
	if c.htmlPath != "" {
		if err := report.WriteHTML(c.htmlPath, run, results); err != nil {
			fmt.Fprintln(stderr, "acp-bench: --html:", err)
			failed = true
		}
	}
	for _, r := range results {
		failed = failed || !r.OK
	}
	if failed {
		return 1
	}
	return 0
}

// neededFiles estimates the descriptors the largest run holds in this
// process (streams, fake-model connections, POST pool).
func neededFiles(names []string, c *config) int {
	need := 0
	for _, n := range names {
		switch n {
		case "http-fanout", "soak":
			for _, k := range connList(c.conns, n) {
				need = max(need, 2*k+600)
			}
		case "idle-streams":
			need = max(need, c.streams+600)
		}
	}
	return need
}

func connList(s, workload string) []int {
	if s == "" {
		if workload == "soak" {
			return []int{1000}
		}
		return []int{100, 1000, 5000}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func runWorkload(ctx context.Context, name string, o *bench.Options, c *config) ([]*bench.Result, error) {
	one := func(r *bench.Result, err error) ([]*bench.Result, error) {
		if err != nil {
			return nil, err
		}
		return []*bench.Result{r}, nil
	}
	switch name {
	case "stdio-stream":
		return one(bench.StdioStream(ctx, o, bench.StdioStreamParams{
			Chunks: orDefault(c.chunks, 200_000), Baseline: c.baseline, ModelFlush: c.modelFlush, Timeout: c.timeout}))
	case "http-fanout":
		var out []*bench.Result
		for _, n := range connList(c.conns, name) {
			r, err := bench.Fanout(ctx, o, bench.FanoutParams{
				Conns: n, Chunks: orDefault(c.chunks, 500), Rate: c.rate, SetupWidth: c.setupWidth, Timeout: c.timeout, Pods: c.pods, Ramp: c.ramp, WS: c.ws,
				Relay: c.baseline && c.compareRef == "" && c.beforeServer == ""})
			if err != nil {
				return out, fmt.Errorf("conns=%d: %w", n, err)
			}
			out = append(out, r)
		}
		return out, nil
	case "idle-streams":
		return one(bench.Idle(ctx, o, bench.IdleParams{Streams: c.streams, SetupWidth: c.setupWidth, Hold: c.hold}))
	case "churn":
		return one(bench.Churn(ctx, o, bench.ChurnParams{
			Clients: c.clients, Duration: orDefault(c.duration, 10*time.Second), MaxCycles: c.maxCycles, Chunks: orDefault(c.chunks, 5)}))
	case "startup":
		return one(bench.Startup(ctx, o, bench.StartupParams{Runs: orDefault(c.runs, 20), Cold: c.cold}))
	case "idle":
		return one(bench.IdleFootprint(ctx, o, bench.IdleFootprintParams{Runs: orDefault(c.runs, 5), Cold: c.cold, Settle: c.settle}))
	case "survive":
		return one(bench.Survive(ctx, o, bench.SurviveParams{Turns: c.turns, Pods: c.pods, Kill: c.kill, Timeout: c.timeout}))
	case "soak":
		conns := connList(c.conns, name)
		return one(bench.Soak(ctx, o, bench.SoakParams{
			Conns: conns[0], Chunks: orDefault(c.chunks, 500), Rate: c.rate, Duration: orDefault(c.duration, 10*time.Minute),
			DropEvery: c.dropEvery, ReconnectMax: c.reconnectMax, SetupWidth: c.setupWidth}))
	}
	return nil, fmt.Errorf("unknown workload %q", name)
}
