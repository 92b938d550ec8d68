package store

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

// A usage line appended by hand reads back as the usageLine it stands for,
// one line: names that need escaping, HTML characters, U+2028, invalid
// UTF-8 (read back as protocol.Marshal's line reads, U+FFFD); counts 0
// (left out), negative and large.
func TestUsageLineReadsBack(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 30))
	counts := []int64{0, 1, -1, 42, 1 << 40, -1 << 62}
	for i := 0; i < 500; i++ {
		principal, model := longText(r, r.IntN(40)), longText(r, r.IntN(20))
		if i == 0 {
			principal, model = "", ""
		}
		u := llm.Usage{InputTokens: counts[r.IntN(len(counts))], OutputTokens: counts[r.IntN(len(counts))],
			ThoughtTokens: counts[r.IntN(len(counts))], CachedReadTokens: counts[r.IntN(len(counts))],
			CachedWriteTokens: counts[r.IntN(len(counts))]}
		marshalled, err := protocol.Marshal(usageLine{Principal: principal, Model: model, Input: u.InputTokens, Output: u.OutputTokens,
			Thought: u.ThoughtTokens, CacheRead: u.CachedReadTokens, CacheWrt: u.CachedWriteTokens})
		if err != nil {
			t.Fatal(err)
		}
		var want, got usageLine
		if err := protocol.Unmarshal(marshalled, &want); err != nil {
			t.Fatal(err)
		}
		line := appendUsageLine(nil, principal, model, u)
		if bytes.IndexByte(line, '\n') != len(line)-1 {
			t.Fatalf("not one line: %q", line)
		}
		if err := protocol.Unmarshal(line, &got); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if got != want {
			t.Fatalf("principal %q, model %q, %+v:\n read %+v\n from %s\nwant %+v", principal, model, u, got, line, want)
		}
	}
}

// A count allocates its line, the day file's name (its date, then with
// the suffix) and the path given to the stat(2) that checks the kept file
// is still the day's (removed or moved away: opened anew): 4, no encoder
// (5 allocations before, without the check).
func TestUsageAddAllocations(t *testing.T) {
	f := newFileUsage(t.TempDir())
	defer f.close()
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	u := llm.Usage{InputTokens: 8500, OutputTokens: 12, CachedReadTokens: 4096}
	if err := f.add("alice", "gpt-5", at, u); err != nil { // opens the day file
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := f.add("alice", "gpt-5", at, u); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 4 {
		t.Fatalf("%v allocations per count, want at most 4", allocs)
	}
}
