package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/bench"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/marker"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/proc"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/stats"
)

func TestFormatValue(t *testing.T) {
	cases := map[float64]string{0: "0.00", 1234567: "1,234,567", -1500: "-1,500", 123.456: "123.5", 1.234: "1.23", 0.01234: "0.0123"}
	for v, want := range cases {
		if got := FormatValue(v); got != want {
			t.Errorf("FormatValue(%v) = %q, want %q", v, got, want)
		}
	}
}

func sample() *bench.Result {
	h := stats.NewHistogram()
	for i := range 1000 {
		h.RecordDuration(time.Duration(i) * 10 * time.Microsecond)
	}
	met, missed := true, false
	s := h.Summary()
	return &bench.Result{
		Workload: "http-fanout", Variant: "conns=3", OK: true,
		Metrics: []bench.Metric{
			{Name: "events/s", Value: 12345, Unit: "events/s"},
			{Name: "delay p99", Value: 9.9, Unit: "ms", Target: "< 20 ms", Met: &met},
			{Name: "ratio", Value: 0.1, Target: "≥ 0.5", Met: &missed},
			{Name: "allocs", NA: true, Note: "why"},
		},
		Check:        &marker.Check{Expected: 10, Received: 10, FirstGap: -1},
		LatencyLabel: "model→client delay", Latency: &s, LatencyBins: h.Bins([]int64{1e6, 5e6}),
		EventsPerSecond: []int64{1, 5, 3},
		Server:          []proc.Sample{{T: 0, Usage: proc.Usage{RSS: 1 << 20}}, {T: time.Second, Usage: proc.Usage{RSS: 2 << 20}}},
	}
}

func TestTable(t *testing.T) {
	var b bytes.Buffer
	Table(&b, []*bench.Result{sample()})
	out := b.String()
	for _, want := range []string{"http-fanout conns=3", "12,345", "met", "MISSED", "n/a", "p99", "10/10 ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	run := Machine("acp-bench test", "/bin/iac-code")
	if err := WriteJSON(filepath.Join(dir, "r.json"), run, []*bench.Result{sample()}); err != nil {
		t.Fatal(err)
	}
	if err := WriteHTML(filepath.Join(dir, "r.html"), run, []*bench.Result{sample()}); err != nil {
		t.Fatal(err)
	}
	html, _ := os.ReadFile(filepath.Join(dir, "r.html"))
	// Three charts (histogram, rate, RSS), inline and self-contained.
	if n := bytes.Count(html, []byte("<svg")); n != 3 {
		t.Errorf("%d charts", n)
	}
	if bytes.Contains(html, []byte("<script")) || bytes.Contains(html, []byte(`src="http`)) || bytes.Contains(html, []byte(`href="http`)) {
		t.Error("report is not self-contained")
	}
}
