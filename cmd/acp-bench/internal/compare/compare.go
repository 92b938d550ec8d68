// Package compare runs one acp-bench workload against two server builds,
// the current one and one built from a git ref, in alternating rounds
// (before, after, after, before, …: drift of the machine's load cancels
// out), and prints the median of every figure per build.
//
// The ref is built from `git archive` into a temporary directory, so the
// repository and its worktrees are left untouched; binaries are cached
// under bin/compare/<commit>/.
package compare

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/bench"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/report"
)

// Build packages, by binary name.
const (
	ServerPkg  = "./cmd/iac-code"
	ProfPkg    = "./cmd/acp-bench/internal/profserver"
	ServerName = "iac-code"
	ProfName   = "iac-code-prof"
)

// Ref is a git ref resolved and built.
type Ref struct {
	Name   string
	Commit string
	// Server and Prof are the built binaries (Prof is "" when the ref has
	// no profiling build).
	Server, Prof string
}

// Build resolves ref in the repository at repo and builds its server (and
// profiling build, when the ref has one) into cacheDir/<commit>/, reusing
// binaries built earlier, with cgo on or off as the binary like was built
// (the environment's CGO_ENABLED when like says nothing). Build output goes
// to log, which need not be safe for concurrent use.
func Build(ctx context.Context, repo, ref, cacheDir, like string, log io.Writer) (*Ref, error) {
	// git archive and tar run at once: exec copies the stderr of each into
	// log from a goroutine of its own.
	log = &lockedWriter{w: log}
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--verify", "--quiet", ref+"^{commit}").Output()
	if err != nil {
		return nil, fmt.Errorf("unknown git ref %q", ref)
	}
	commit := strings.TrimSpace(string(out))
	r := &Ref{Name: ref, Commit: commit}
	// A build with cgo off is another binary (linked by Go's linker, not
	// the system's, another resolver): the ref is built as the binary it is
	// compared with, and cached apart. Built from the environment alone, a
	// shell without CGO_ENABLED=0 compared a cgo build with a build without
	// and read 14 % more CPU per stdio chunk into a change that had none.
	cgo := cgoOf(like)
	key := commit[:12]
	if cgo == "0" {
		key += "-nocgo"
	}
	dir, err := filepath.Abs(filepath.Join(cacheDir, key))
	if err != nil {
		return nil, err
	}
	r.Server = filepath.Join(dir, ServerName)
	prof := filepath.Join(dir, ProfName)
	if exists(r.Server) {
		if exists(prof) {
			r.Prof = prof
		}
		return r, nil
	}
	src, err := os.MkdirTemp("", "acp-bench-ref-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(src)
	fmt.Fprintf(log, "acp-bench: building %s (%s) in %s\n", ref, commit[:12], src)
	archive := exec.CommandContext(ctx, "git", "-C", repo, "archive", "--format=tar", commit)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return nil, err
	}
	untar.Stdin = pipe
	archive.Stderr, untar.Stderr = log, log
	if err := untar.Start(); err != nil {
		return nil, err
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return nil, fmt.Errorf("git archive %s: %w", ref, err)
	}
	if err := untar.Wait(); err != nil {
		return nil, fmt.Errorf("untar %s: %w", ref, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	build := func(pkg, bin string) error {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
		cmd.Dir, cmd.Stdout, cmd.Stderr = src, log, log
		if cgo != "" {
			cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
		}
		return cmd.Run()
	}
	if exists(filepath.Join(src, filepath.FromSlash(ProfPkg))) {
		if err := build(ProfPkg, prof); err != nil {
			return nil, fmt.Errorf("build %s of %s: %w", ProfPkg, ref, err)
		}
		r.Prof = prof
	}
	// The server last: its presence marks a complete cache entry.
	if err := build(ServerPkg, r.Server); err != nil {
		return nil, fmt.Errorf("build %s of %s: %w", ServerPkg, ref, err)
	}
	return r, nil
}

// cgoOf is the CGO_ENABLED the Go binary at path was built with, else the
// environment's ("" when neither says).
func cgoOf(path string) string {
	if info, err := buildinfo.ReadFile(path); err == nil {
		for _, s := range info.Settings {
			if s.Key == "CGO_ENABLED" {
				return s.Value
			}
		}
	}
	return os.Getenv("CGO_ENABLED")
}

// lockedWriter serializes the writes of several goroutines to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// RepoRoot is the top of the git work tree holding dir.
func RepoRoot(dir string) (string, error) {
	cmd := exec.Command("git", "rev-parse", "--show-toplevel")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", errors.New("not inside a git work tree (compare builds the ref from it)")
	}
	return strings.TrimSpace(string(out)), nil
}

// Sides of a comparison.
const (
	Before = 0
	After  = 1
)

// SideName names a side.
func SideName(side int) string {
	if side == Before {
		return "before"
	}
	return "after"
}

// Order is the order of the sides in round i (0-based): before/after,
// then after/before, and so on.
func Order(i int) [2]int {
	if i%2 == 0 {
		return [2]int{Before, After}
	}
	return [2]int{After, Before}
}

// LoadAvg reads the 1-minute load average (-1 when unreadable).
func LoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// Run is one workload run of one side.
type Run struct {
	Side    int             `json:"side"`
	Round   int             `json:"round"`
	Load1   float64         `json:"load1"`
	Results []*bench.Result `json:"results"`
}

// Row is one figure of the summary: medians and ranges per side.
type Row struct {
	Result string // workload and variant
	Name   string
	Unit   string
	// Values per side, in round order.
	Values [2][]float64
}

// Median of a side's values (NaN-free; 0 when there are none).
func (r *Row) Median(side int) float64 { return median(r.Values[side]) }

// Change is after/before - 1 of the medians (0 when before is 0).
func (r *Row) Change() float64 {
	b := r.Median(Before)
	if b == 0 {
		return 0
	}
	return r.Median(After)/b - 1
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Summarize gathers every figure of the runs into rows, in the order they
// first appear. Latency summaries become "delay p50/p99/max" rows, and
// the 1-minute load average at the start of each run a "load average" row.
func Summarize(runs []Run) []*Row {
	var rows []*Row
	index := map[string]*Row{}
	add := func(result, name, unit string, side int, v float64) {
		key := result + "\x00" + name
		row := index[key]
		if row == nil {
			row = &Row{Result: result, Name: name, Unit: unit}
			index[key] = row
			rows = append(rows, row)
		}
		row.Values[side] = append(row.Values[side], v)
	}
	for _, run := range runs {
		for _, r := range run.Results {
			key := strings.TrimSpace(r.Workload + " " + r.Variant)
			add(key, "load average (1 min) at start", "", run.Side, run.Load1)
			for _, m := range r.Metrics {
				if !m.NA {
					add(key, m.Name, m.Unit, run.Side, m.Value)
				}
			}
			if l := r.Latency; l != nil {
				add(key, r.LatencyLabel+" p50", "ms", run.Side, l.P50MS)
				add(key, r.LatencyLabel+" p99", "ms", run.Side, l.P99MS)
				add(key, r.LatencyLabel+" max", "ms", run.Side, l.MaxMS)
			}
			ok := 0.0
			if r.OK {
				ok = 1
			}
			add(key, "correct runs", "of 1", run.Side, ok)
		}
	}
	return rows
}

// Print writes the summary table.
func Print(w io.Writer, before, after string, rounds int, rows []*Row) {
	fmt.Fprintf(w, "\n== compare: before %s · after %s · %d alternating rounds, medians (min–max)\n", before, after, rounds)
	last := ""
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		if r.Result != last {
			fmt.Fprintf(tw, "\n  %s\tbefore\tafter\tchange\tunit\n", r.Result)
			last = r.Result
		}
		change := fmt.Sprintf("%+.1f%%", 100*r.Change())
		if r.Median(Before) == 0 {
			change = ""
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", r.Name, cell(r.Values[Before]), cell(r.Values[After]), change, r.Unit)
	}
	_ = tw.Flush()
}

func cell(vs []float64) string {
	if len(vs) == 0 {
		return "—"
	}
	m := report.FormatValue(median(vs))
	if len(vs) == 1 {
		return m
	}
	return fmt.Sprintf("%s (%s–%s)", m, report.FormatValue(slices.Min(vs)), report.FormatValue(slices.Max(vs)))
}
