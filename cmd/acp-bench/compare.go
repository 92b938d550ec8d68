package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/bench"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/compare"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/report"
)

// compareDoc is the --json output of a comparison.
type compareDoc struct {
	Run    report.Run    `json:"run"`
	Before string        `json:"before"`
	Ref    *compare.Ref  `json:"ref,omitempty"`
	After  string        `json:"after"`
	Rounds int           `json:"rounds"`
	Runs   []compare.Run `json:"runs"`
}

// runCompare runs the workloads against the before build (the ref's, or
// --before-server) and o.Bin in alternating rounds and prints the medians.
func runCompare(ctx context.Context, names, args []string, o *bench.Options, c *config, stdout, stderr io.Writer) int {
	before := c.beforeServer
	var ref *compare.Ref
	if before == "" {
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintln(stderr, "acp-bench:", err)
			return 2
		}
		root, err := compare.RepoRoot(wd)
		if err != nil {
			fmt.Fprintln(stderr, "acp-bench --compare:", err)
			return 2
		}
		ref, err = compare.Build(ctx, root, c.compareRef, root+"/bin/compare", o.Bin, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "acp-bench --compare:", err)
			return 2
		}
		before = ref.Server
		if o.Debug {
			if ref.Prof == "" {
				fmt.Fprintf(stderr, "acp-bench --compare: %s has no profiling build (--debug, --cpuprofile)\n", c.compareRef)
				return 2
			}
			before = ref.Prof
		}
	}
	beforeLabel := before
	if ref != nil {
		beforeLabel = fmt.Sprintf("%s (%s)", ref.Name, ref.Commit[:12])
	}
	bins := [2]string{compare.Before: before, compare.After: o.Bin}
	rounds := max(c.rounds, 1)
	var runs []compare.Run
	failed := false
	for i := range rounds {
		for _, side := range compare.Order(i) {
			run := compare.Run{Side: side, Round: i + 1, Load1: compare.LoadAvg()}
			ro := o.Clone()
			ro.Bin = bins[side]
			if o.CPUProfile != "" {
				ro.CPUProfile = fmt.Sprintf("%s-%s-r%d", o.CPUProfile, compare.SideName(side), i+1)
			}
			if c.home == "" {
				// A fresh store per run: no run sees what an earlier one left.
				ro.Home, ro.Workdir = "", ""
				if err := ro.Prepare(); err != nil {
					fmt.Fprintln(stderr, "acp-bench:", err)
					return 2
				}
			}
			fmt.Fprintf(stderr, "acp-bench: round %d/%d, %s (load average %.2f)\n", i+1, rounds, compare.SideName(side), run.Load1)
			for _, name := range names {
				rs, err := runWorkload(ctx, name, ro, c)
				run.Results = append(run.Results, rs...)
				if err != nil {
					fmt.Fprintf(stderr, "acp-bench: %s, %s: %v\n", name, compare.SideName(side), err)
					failed = true
				}
				for _, r := range rs {
					if !r.OK {
						failed = true
						fmt.Fprintf(stderr, "acp-bench: %s %s, %s: %s\n", r.Workload, r.Variant, compare.SideName(side), strings.Join(r.Failures, "; "))
					}
					for _, p := range r.Profiles {
						fmt.Fprintf(stderr, "acp-bench: CPU profile %s\n", p)
					}
				}
			}
			if c.home == "" {
				ro.Cleanup()
			}
			runs = append(runs, run)
			if ctx.Err() != nil {
				return 130
			}
		}
	}
	compare.Print(stdout, beforeLabel, bins[compare.After], rounds, compare.Summarize(runs))
	if c.jsonPath != "" {
		doc := compareDoc{Run: report.Machine("acp-bench "+strings.Join(args, " "), o.Bin),
			Before: before, Ref: ref, After: o.Bin, Rounds: rounds, Runs: runs}
		b, err := json.MarshalIndent(doc, "", "  ")
		if err == nil {
			err = os.WriteFile(c.jsonPath, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, "acp-bench: --json:", err)
			failed = true
		}
	}
	if failed {
		return 1
	}
	return 0
}
