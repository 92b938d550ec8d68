package store_test

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// benchMessages makes n messages shaped like real turns: a user prompt, an
// assistant message with signed thinking, text and a tool call, and its
// tool result (~1 KB of output).
func benchMessages(n int) []llm.Message {
	output := strings.Repeat("func main() { fmt.Println(\"hello\") }\n", 28)
	msgs := make([]llm.Message, 0, n)
	for i := 0; len(msgs) < n; i++ {
		id := fmt.Sprintf("call_%d", i)
		for _, m := range []llm.Message{
			{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "Please look at main.go and explain what the program prints, step by step."}}},
			{Role: llm.RoleAssistant, Content: []llm.Block{
				{Type: llm.BlockThinking, Text: "The user wants an explanation. I should read main.go first.", Signature: strings.Repeat("EqQBCkYIARgCKkA", 8)},
				{Type: llm.BlockText, Text: "Let me read the file."},
				{Type: llm.BlockToolUse, ToolCallID: id, Name: "read_file", Input: protocol.RawMessage(`{"path":"main.go","offset":0,"limit":200}`)},
			}},
			{Role: llm.RoleTool, Content: []llm.Block{{Type: llm.BlockToolResult, ToolCallID: id, Name: "read_file", Text: output}}},
		} {
			if len(msgs) < n {
				msgs = append(msgs, m)
			}
		}
	}
	return msgs
}

// createBig makes the session "big" with 5,000 messages, appended by 100.
func createBig(b *testing.B, st store.Store) {
	s, err := st.Create(store.Meta{ID: "big", Cwd: "/p"})
	if err != nil {
		b.Fatal(err)
	}
	msgs := benchMessages(5000)
	for i := 0; i < len(msgs); i += 100 {
		batch := make([]store.Entry, 0, 100)
		for _, m := range msgs[i:min(i+100, len(msgs))] {
			batch = append(batch, store.MessageEntry(m))
		}
		if err := s.Append(batch...); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkOpen5000(b *testing.B) {
	st, err := store.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	createBig(b, st)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s, es, err := st.Open("big")
		if err != nil || len(es) != 5000 {
			b.Fatal(err, len(es))
		}
		_ = store.Context(es)
		_ = s.Close()
	}
}

func BenchmarkAppend(b *testing.B) {
	msgs := benchMessages(3)
	run := func(b *testing.B, sync bool) {
		st, err := store.New(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		s, err := st.Create(store.Meta{ID: "s", Cwd: "/p"})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := s.Append(store.MessageEntry(msgs[i%3])); err != nil {
				b.Fatal(err)
			}
			if sync {
				if err := s.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			i++
		}
	}
	b.Run("nosync", func(b *testing.B) { run(b, false) })
	b.Run("sync", func(b *testing.B) { run(b, true) })
}

func BenchmarkList1000(b *testing.B) {
	st, err := store.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	benchList1000(b, st)
}

// benchList1000 times the first page of 50 of 1,000 sessions in one cwd.
func benchList1000(b *testing.B, st store.Store) {
	for i := range 1000 {
		s, err := st.Create(store.Meta{ID: fmt.Sprintf("s%04d", i), Cwd: "/p", Title: "a session title"})
		if err != nil {
			b.Fatal(err)
		}
		_ = s.Close()
	}
	b.ReportAllocs()
	for b.Loop() {
		ms, _, err := st.List("/p", "", 50)
		if err != nil || len(ms) != 50 {
			b.Fatal(err, len(ms))
		}
	}
}

// BenchmarkSessionLifecycle is one churn cycle's store work: create, the
// first prompt and answer appended, the turn's sync and metadata write,
// close. On /dev/shm (as acp-bench churn runs) it counts the system calls'
// CPU; on a disk, the fsyncs.
func BenchmarkSessionLifecycle(b *testing.B) {
	dir := b.TempDir()
	if d, err := os.MkdirTemp("/dev/shm", "store-bench-"); err == nil {
		dir = d
		b.Cleanup(func() { _ = os.RemoveAll(d) })
	}
	st, err := store.New(dir)
	if err != nil {
		b.Fatal(err)
	}
	msgs := benchMessages(2)
	b.ReportAllocs()
	cpu0 := cpuTime()
	i := 0
	for b.Loop() {
		i++
		s, err := st.Create(store.Meta{ID: fmt.Sprintf("s%08d", i), Cwd: "/p", Mode: "default"})
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range msgs {
			if err := s.Append(store.MessageEntry(m)); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Sync(); err != nil {
			b.Fatal(err)
		}
		meta := s.Meta()
		meta.Title = "Please look at main.go"
		if err := s.SaveMeta(meta); err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	// CPU time (user and system) is what a loaded machine does not inflate.
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(i), "cpu-ns/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
