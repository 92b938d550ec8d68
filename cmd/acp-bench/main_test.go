package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/bench"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/report"
	"github.com/iac-code/iac-code/store/pgtest"
)

// serverBin is the iac-code binary the smoke runs measure, built once.
var serverBin string

func TestMain(m *testing.M) {
	// The stdio-stream baseline re-executes this binary as its writer.
	bench.RunChildIfRequested()
	code := m.Run()
	if serverBin != "" {
		_ = os.RemoveAll(filepath.Dir(serverBin))
	}
	os.Exit(code)
}

func buildServer(t *testing.T) string {
	t.Helper()
	if serverBin != "" {
		return serverBin
	}
	// Shared by every smoke test; TestMain removes it.
	dir, err := os.MkdirTemp("", "acp-bench-smoke-")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "iac-code")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goTool, "build", "-o", bin, "github.com/iac-code/iac-code/cmd/iac-code")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	serverBin = bin
	return bin
}

// smoke runs one workload through the CLI entry point with small sizes and
// checks correctness only: exit 0, parsable results, zero loss.
func smoke(t *testing.T, args ...string) *report.Document {
	t.Helper()
	if testing.Short() {
		t.Skip("smoke runs start the server")
	}
	bin := buildServer(t)
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "results.json")
	htmlPath := filepath.Join(dir, "report.html")
	args = append(args, "--server", bin, "--no-progress", "--json", jsonPath, "--html", htmlPath)
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	code := run(ctx, args, &stdout, &stderr)
	t.Logf("%s in %v:\n%s%s", args[0], time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	if code != 0 {
		t.Fatalf("acp-bench %s exited %d", strings.Join(args, " "), code)
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc report.Document
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("results do not parse: %v", err)
	}
	if len(doc.Results) == 0 {
		t.Fatal("no results")
	}
	for _, r := range doc.Results {
		if r.Workload != args[0] || !r.OK || len(r.Metrics) == 0 {
			t.Fatalf("result %s %s: ok=%v failures=%v", r.Workload, r.Variant, r.OK, r.Failures)
		}
		if c := r.Check; c != nil && (!c.OK() || c.Received == 0) {
			t.Fatalf("sequence check: %s", c)
		}
	}
	html, err := os.ReadFile(htmlPath)
	if err != nil || !bytes.Contains(html, []byte("<h1>acp-bench report</h1>")) {
		t.Fatalf("html report: %v", err)
	}
	return &doc
}

func metric(t *testing.T, r *bench.Result, name string) float64 {
	t.Helper()
	m, ok := r.Metric(name)
	if !ok {
		t.Fatalf("%s: no metric %q", r.Workload, name)
	}
	return m.Value
}

func TestSmokeStdioStream(t *testing.T) {
	doc := smoke(t, "stdio-stream", "--chunks", "2000")
	r := doc.Results[0]
	if r.Check.Received != 2000 || metric(t, r, "chunks/s") <= 0 || metric(t, r, "baseline chunks/s") <= 0 {
		t.Fatalf("%+v", r.Metrics)
	}
}

func TestSmokeHTTPFanout(t *testing.T) {
	doc := smoke(t, "http-fanout", "--conns", "20", "--chunks", "50", "--rate", "200")
	r := doc.Results[0]
	if r.Check.Received != 20*50 || metric(t, r, "lost events") != 0 || metric(t, r, "events/s") <= 0 {
		t.Fatalf("%+v", r.Metrics)
	}
}

func TestSmokeHTTPFanoutPods(t *testing.T) {
	if !pgtest.Available() {
		t.Skip(pgtest.SkipMessage)
	}
	doc := smoke(t, "http-fanout", "--pods", "2", "--conns", "6", "--chunks", "50", "--rate", "200")
	r := doc.Results[0]
	if r.Check.Received != 6*50 || metric(t, r, "lost events") != 0 || r.Params["pods"] != 2.0 {
		t.Fatalf("%+v %+v", r.Params, r.Metrics)
	}
}

func TestSmokeIdleStreams(t *testing.T) {
	doc := smoke(t, "idle-streams", "--streams", "50")
	if n := metric(t, doc.Results[0], "open streams"); n != 50 {
		t.Fatalf("%v streams", n)
	}
}

func TestSmokeChurn(t *testing.T) {
	doc := smoke(t, "churn", "--clients", "4", "--duration", "1s")
	if n := metric(t, doc.Results[0], "cycles"); n < 1 {
		t.Fatalf("%v cycles", n)
	}
}

func TestSmokeStartup(t *testing.T) {
	doc := smoke(t, "startup", "--runs", "3")
	if ms := metric(t, doc.Results[0], "median"); ms <= 0 {
		t.Fatalf("median %v", ms)
	}
	// The idle server's memory: its mapped binary, its own, and the tree's
	// (the server alone: its watchdog starts with the first tool process).
	r := doc.Results[0]
	file, anon := metric(t, r, "idle RssFile"), metric(t, r, "idle RssAnon")
	pss, rss := metric(t, r, "idle tree PSS"), metric(t, r, "idle tree RSS")
	if file <= 0 || anon <= 0 || pss <= 0 || rss < pss {
		t.Fatalf("RssFile %v, RssAnon %v, tree PSS %v, tree RSS %v MiB", file, anon, pss, rss)
	}
}

func TestSmokeStartupCold(t *testing.T) {
	doc := smoke(t, "startup", "--runs", "2", "--cold")
	if f := metric(t, doc.Results[0], "idle RssFile"); f <= 0 {
		t.Fatalf("idle RssFile %v", f)
	}
}

func TestSmokeIdle(t *testing.T) {
	doc := smoke(t, "idle", "--runs", "1", "--settle", "200ms")
	r := doc.Results[0]
	for _, phase := range []string{"before request", "after initialize"} {
		file, anon := metric(t, r, phase+": server RssFile"), metric(t, r, phase+": server RssAnon")
		pss, rss := metric(t, r, phase+": tree PSS"), metric(t, r, phase+": tree RSS (summed)")
		if file <= 0 || anon <= 0 || pss <= 0 || rss < pss {
			t.Fatalf("%s: RssFile %v, RssAnon %v, tree PSS %v, tree RSS %v MiB", phase, file, anon, pss, rss)
		}
		// No tool ran: no watchdog yet.
		if n := metric(t, r, phase+": other processes"); n != 0 {
			t.Fatalf("%s: %v processes below the idle server", phase, n)
		}
	}
}

func TestSmokeSoak(t *testing.T) {
	doc := smoke(t, "soak", "--conns", "10", "--chunks", "40", "--rate", "100",
		"--duration", "1s", "--drop-every", "150ms", "--reconnect-max", "20ms")
	r := doc.Results[0]
	if metric(t, r, "turns") < 10 || metric(t, r, "reconnects") < 1 || metric(t, r, "lost events") != 0 {
		t.Fatalf("%+v", r.Metrics)
	}
}

func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "workloads:") {
		t.Fatalf("no args: %d %q", code, errb.String())
	}
	errb.Reset()
	if code := run(context.Background(), []string{"nope"}, &out, &errb); code != 2 {
		t.Fatalf("unknown workload: %d", code)
	}
}

// TestCompareSmoke runs --compare with the same binary on both sides
// (--before-server skips building a ref) and checks the alternation and
// the summary.
func TestCompareSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the server")
	}
	bin := buildServer(t)
	jsonPath := filepath.Join(t.TempDir(), "compare.json")
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"startup", "--runs", "2", "--server", bin, "--before-server", bin, "--rounds", "2", "--no-progress", "--json", jsonPath}
	if code := run(ctx, args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	for _, want := range []string{"== compare:", "before", "after", "median", "load average"} {
		if !strings.Contains(stdout.String(), want) {
			t.Fatalf("summary lacks %q:\n%s", want, stdout.String())
		}
	}
	var doc compareDoc
	b, err := os.ReadFile(jsonPath)
	if err != nil || json.Unmarshal(b, &doc) != nil {
		t.Fatalf("json: %v", err)
	}
	var sides []int
	for _, r := range doc.Runs {
		sides = append(sides, r.Side)
		if len(r.Results) != 1 || !r.Results[0].OK {
			t.Fatalf("run %+v", r)
		}
	}
	if fmt.Sprint(sides) != "[0 1 1 0]" {
		t.Fatalf("sides in order %v, want before, after, after, before", sides)
	}
}
