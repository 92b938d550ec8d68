package compare

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/bench"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/stats"
)

func TestOrderAlternates(t *testing.T) {
	want := [][2]int{{Before, After}, {After, Before}, {Before, After}, {After, Before}}
	for i, w := range want {
		if got := Order(i); got != w {
			t.Fatalf("round %d: %v, want %v", i, got, w)
		}
	}
}

func result(v float64, ok bool) *bench.Result {
	return &bench.Result{Workload: "stdio-stream", Variant: "chunks=10", OK: ok,
		Metrics:      []bench.Metric{{Name: "chunks/s", Value: v, Unit: "chunks/s"}, {Name: "allocs", NA: true}},
		LatencyLabel: "delay", Latency: &stats.Summary{P50MS: v / 10, P99MS: v / 5, MaxMS: v}}
}

func TestSummarizeMedians(t *testing.T) {
	runs := []Run{
		{Side: Before, Load1: 1, Results: []*bench.Result{result(10, true)}},
		{Side: After, Load1: 2, Results: []*bench.Result{result(30, true)}},
		{Side: After, Load1: 2, Results: []*bench.Result{result(20, true)}},
		{Side: Before, Load1: 1, Results: []*bench.Result{result(14, true)}},
		{Side: Before, Load1: 1, Results: []*bench.Result{result(12, false)}},
		{Side: After, Load1: 2, Results: []*bench.Result{result(40, true)}},
	}
	rows := Summarize(runs)
	byName := map[string]*Row{}
	for _, r := range rows {
		byName[r.Name] = r
	}
	if _, ok := byName["allocs"]; ok {
		t.Fatal("an n/a figure was summarized")
	}
	cps := byName["chunks/s"]
	if cps == nil || cps.Median(Before) != 12 || cps.Median(After) != 30 || cps.Change() != 1.5 {
		t.Fatalf("chunks/s: %+v", cps)
	}
	if r := byName["delay p99"]; r == nil || r.Median(After) != 6 {
		t.Fatalf("delay p99: %+v", r)
	}
	if r := byName["correct runs"]; r == nil || r.Median(Before) != 1 || len(r.Values[Before]) != 3 || r.Values[Before][2] != 0 {
		t.Fatalf("correct runs: %+v", r)
	}
	if r := byName["load average (1 min) at start"]; r == nil || r.Median(After) != 2 {
		t.Fatalf("load: %+v", r)
	}
	var out bytes.Buffer
	Print(&out, "main", "bin/iac-code", 3, rows)
	for _, want := range []string{"stdio-stream chunks=10", "12.00 (10.00–14.00)", "30.00 (20.00–40.00)", "+150.0%"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// TestBuildRef builds a ref of a scratch repository (a tiny module with a
// main package at cmd/iac-code) and reuses the cached binary next time.
func TestBuildRef(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	repo := t.TempDir()
	write := func(name, data string) {
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write("go.mod", "module example.com/x\n\ngo 1.22\n")
	write("cmd/iac-code/main.go", "package main\n\nfunc main() { println(\"v1\") }\n")
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "v1")
	write("cmd/iac-code/main.go", "package main\n\nfunc main() { println(\"v2\") }\n")
	git("commit", "-q", "-am", "v2")

	cache := t.TempDir()
	var log bytes.Buffer
	r, err := Build(context.Background(), repo, "HEAD~1", cache, "", &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	out, err := exec.Command(r.Server).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "v1" {
		t.Fatalf("built %s prints %q (%v), want v1", r.Server, out, err)
	}
	if r.Prof != "" {
		t.Fatalf("a profiling build of a ref without one: %s", r.Prof)
	}
	log.Reset()
	again, err := Build(context.Background(), repo, r.Commit, cache, "", &log)
	if err != nil || again.Server != r.Server || strings.Contains(log.String(), "building") {
		t.Fatalf("second build not cached: %v %q", err, log.String())
	}
	if _, err := Build(context.Background(), repo, "no-such-ref", cache, "", &log); err == nil {
		t.Fatal("unknown ref accepted")
	}
}

// The ref is built with cgo on or off as the binary it is compared with,
// whatever the environment says.
func TestBuildRefLikeTheComparedBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "cmd/iac-code"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"go.mod":               "module example.com/x\n\ngo 1.22\n",
		"cmd/iac-code/main.go": "package main\n\nfunc main() {}\n",
	} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"commit", "-q", "-m", "v1"}} {
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	for _, c := range []struct{ like, env string }{{"0", "1"}, {"1", "0"}} {
		like := filepath.Join(t.TempDir(), "after")
		build := exec.Command("go", "build", "-o", like, "./cmd/iac-code")
		build.Dir, build.Env = repo, append(os.Environ(), "CGO_ENABLED="+c.like)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build the compared binary: %v\n%s", err, out)
		}
		t.Setenv("CGO_ENABLED", c.env)
		var log bytes.Buffer
		r, err := Build(context.Background(), repo, "HEAD", t.TempDir(), like, &log)
		if err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		info, err := buildinfo.ReadFile(r.Server)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		for _, s := range info.Settings {
			if s.Key == "CGO_ENABLED" {
				got = s.Value
			}
		}
		if got != c.like {
			t.Fatalf("compared with a CGO_ENABLED=%s build, the environment saying %s: the ref was built with %q", c.like, c.env, got)
		}
	}
}
