package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/tools/sandbox"
)

// makeGrepTree writes 100,000 searchable files (1,000 directories of 100
// files, ~600 bytes each; 1 in 100 holds "NEEDLE"), plus a .gitignore'd
// directory and some binary files.
func makeGrepTree(b *testing.B, root string) {
	b.Helper()
	var body strings.Builder
	for i := range 20 {
		fmt.Fprintf(&body, "func f%d(x int) int { return x * %d } // filler text\n", i, i)
	}
	filler := body.String()
	if err := os.WriteFile(filepath.Join(root, ".gitignore"), []byte("ignored/\n*.tmp\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	n := 0
	for a := range 10 {
		for c := range 10 {
			for d := range 10 {
				dir := filepath.Join(root, fmt.Sprintf("a%d", a), fmt.Sprintf("b%d", c), fmt.Sprintf("c%d", d))
				if err := os.MkdirAll(dir, 0o755); err != nil {
					b.Fatal(err)
				}
				for f := range 100 {
					content := filler
					if n%100 == 7 {
						content = filler + fmt.Sprintf("// NEEDLE %d here\n", n)
					}
					if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.go", f)), []byte(content), 0o644); err != nil {
						b.Fatal(err)
					}
					n++
				}
			}
		}
	}
	ign := filepath.Join(root, "ignored")
	if err := os.MkdirAll(ign, 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range 1000 {
		os.WriteFile(filepath.Join(ign, fmt.Sprintf("x%d.go", i)), []byte("NEEDLE ignored\n"), 0o644)
		os.WriteFile(filepath.Join(root, "a0", fmt.Sprintf("bin%d.dat", i)), []byte("NEEDLE\x00binary"), 0o644)
	}
}

// BenchmarkGrep100k searches a 100,000-file tree (generated once, outside
// the timer; ~60 MB, warm page cache). Run with:
//
//	go test ./tools -run '^$' -bench Grep100k -benchtime 10x
func BenchmarkGrep100k(b *testing.B) {
	root := b.TempDir()
	start := time.Now()
	makeGrepTree(b, root)
	b.Logf("generated 100k files in %s", time.Since(start).Round(time.Millisecond))
	env := &tools.Env{Cwd: root}
	cases := []struct {
		name  string
		input map[string]any
		want  int // output lines
	}{
		{"files_with_matches", map[string]any{"pattern": `NEEDLE \d+`}, 1000},
		{"content", map[string]any{"pattern": `NEEDLE \d+`, "output_mode": "content", "max_results": 5000}, 1000},
		{"case_insensitive", map[string]any{"pattern": `needle \d+`, "case_insensitive": true}, 1000},
		{"no_match", map[string]any{"pattern": `ZZZ_NOT_THERE`}, 0},
	}
	for _, c := range cases {
		in, _ := json.Marshal(c.input)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				res := tools.Execute(context.Background(), tools.Grep{}, env, in, nil)
				if res.IsError {
					b.Fatal(res.Output)
				}
				if got := strings.Count(res.Output, "\n"); got != c.want {
					b.Fatalf("got %d lines, want %d: %.200s", got, c.want, res.Output)
				}
			}
		})
	}
}

// BenchmarkBashOutputStreaming measures bash output throughput through
// Progress (seq 1 1000000: ~6.9 MB, 1M lines).
func BenchmarkBashOutputStreaming(b *testing.B) {
	var got atomic.Int64
	env := &tools.Env{Cwd: b.TempDir()}
	progress := func(s string) { got.Add(int64(len(s))) }
	in := json.RawMessage(`{"command":"seq 1 1000000"}`)
	const size = 6888896
	b.SetBytes(size)
	for b.Loop() {
		got.Store(0)
		res := tools.Execute(context.Background(), tools.Bash{}, env, in, progress)
		if res.IsError {
			b.Fatal(res.Output)
		}
		if got.Load() != size {
			b.Fatalf("progress got %d bytes, want %d", got.Load(), size)
		}
	}
}

// BenchmarkBashSandbox is the cost the Landlock sandbox adds to one bash
// call (`true`): off is a call without a jail, on the same call in a
// session's jail (its ruleset built once, as for every call after a
// session's first); on-first-call is a session's first call.
func BenchmarkBashSandbox(b *testing.B) {
	st := sandbox.Probe(sandbox.Settings{Mode: sandbox.On, Network: true})
	if !st.Active() {
		b.Skip("no Landlock: " + st.Reason)
	}
	dir := b.TempDir()
	jail := st.NewJail([]string{dir})
	defer jail.Close()
	input := json.RawMessage(`{"command":"true"}`)
	for _, c := range []struct {
		name string
		env  *tools.Env
	}{{"off", &tools.Env{Cwd: dir}}, {"on", &tools.Env{Cwd: dir, Jail: jail}}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if res := tools.Execute(context.Background(), tools.Bash{}, c.env, input, nil); res.IsError {
					b.Fatal(res.Output)
				}
			}
		})
	}
	// A session's first call also makes its TMPDIR and builds the ruleset
	// (the policy walks /etc and PATH); Close removes the TMPDIR.
	b.Run("on-first-call", func(b *testing.B) {
		for b.Loop() {
			j := st.NewJail([]string{dir})
			res := tools.Execute(context.Background(), tools.Bash{}, &tools.Env{Cwd: dir, Jail: j}, input, nil)
			j.Close()
			if res.IsError {
				b.Fatal(res.Output)
			}
		}
	})
}
