// Package report prints acp-bench results as a table, writes them as JSON,
// and renders a self-contained HTML report whose charts (latency histogram,
// events/s over time, server memory over time) are drawn by the
// go-analyze/charts library as inline SVG: the file needs no network.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/bench"
)

// Run describes the invocation and the machine.
type Run struct {
	Command   string    `json:"command"`
	Server    string    `json:"server"`
	Started   time.Time `json:"started"`
	CPUs      int       `json:"cpus"`
	CPUModel  string    `json:"cpuModel,omitempty"`
	GoVersion string    `json:"goVersion"`
	Kernel    string    `json:"kernel,omitempty"`
	MemTotal  string    `json:"memTotal,omitempty"`
}

// Machine fills in what the run was measured on.
func Machine(command, server string) Run {
	r := Run{Command: command, Server: server, Started: time.Now(), CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				r.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		r.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if l, _, ok := strings.Cut(string(b), "\n"); ok {
			r.MemTotal = strings.Join(strings.Fields(strings.TrimPrefix(l, "MemTotal:")), " ")
		}
	}
	return r
}

// Document is the JSON file.
type Document struct {
	Run     Run             `json:"run"`
	Results []*bench.Result `json:"results"`
}

// WriteJSON writes the results as indented JSON.
func WriteJSON(path string, run Run, results []*bench.Result) error {
	b, err := json.MarshalIndent(Document{Run: run, Results: results}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// FormatValue prints a figure with sensible precision and thousands
// separators.
func FormatValue(v float64) string {
	a := v
	if a < 0 {
		a = -a
	}
	switch {
	case a >= 1000:
		return group(strconv.FormatFloat(v, 'f', 0, 64))
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1 || a == 0:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func group(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func status(m bench.Metric) string {
	switch {
	case m.Met == nil:
		return ""
	case *m.Met:
		return "met"
	default:
		return "MISSED"
	}
}

// Table prints every result as a block of figures.
func Table(w io.Writer, results []*bench.Result) {
	for _, r := range results {
		verdict := "OK"
		if !r.OK {
			verdict = "FAILED"
		}
		fmt.Fprintf(w, "\n== %s %s  (%.1f s)  correctness: %s\n", r.Workload, r.Variant, r.Seconds, verdict)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  figure\tvalue\tunit\ttarget\t\tnote")
		for _, m := range r.Metrics {
			val := FormatValue(m.Value)
			if m.NA {
				val = "n/a"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", m.Name, val, m.Unit, m.Target, status(m), m.Note)
		}
		_ = tw.Flush()
		if l := r.Latency; l != nil {
			fmt.Fprintf(w, "  %s: p50 %s · p90 %s · p99 %s · p99.9 %s · max %s ms (%d samples)\n", r.LatencyLabel,
				FormatValue(l.P50MS), FormatValue(l.P90MS), FormatValue(l.P99MS), FormatValue(l.P999MS), FormatValue(l.MaxMS), l.Count)
		}
		if c := r.Check; c != nil {
			fmt.Fprintf(w, "  sequence check: %s\n", c)
		}
		for _, f := range r.Failures {
			fmt.Fprintf(w, "  FAILURE: %s\n", f)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		for _, p := range r.Profiles {
			fmt.Fprintf(w, "  CPU profile: %s (go tool pprof -top %s)\n", p, p)
		}
	}
}
