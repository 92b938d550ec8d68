package stdio

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"testing"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/store"
)

// allocsPerStdioChunk pins what one streamed model chunk costs in
// allocations on the whole stdio path (issue 30): the fake model's write,
// the provider's decode, the turn, session and connection actors, the stdio
// writer and the test's reader. A change that adds an allocation per chunk
// fails here with the number; one that removes one must lower the pin.
const allocsPerStdioChunk = 6

// TestAllocsPerStdioChunk streams in lockstep — the fake model writes chunk
// i only once chunk i-1 is on stdout — so no two chunks are ever joined and
// the count is the same from run to run; the difference between a prompt of
// 2n chunks and one of n cancels the per-turn cost.
func TestAllocsPerStdioChunk(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation guard")
	}
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	fake := llmtest.Start(t)
	provider, err := llm.New(llm.Config{Provider: "openai_compatible", BaseURL: fake.URL(), APIKey: "k", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := store.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := actors.NewServer(actors.Deps{
		Store:    sessions,
		Config:   actors.Config{LLM: llm.Config{APIKey: "k", Model: "m"}},
		Provider: provider,
		Log:      zerolog.New(io.Discard),
	})
	defer srv.Shutdown()

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Serve(context.Background(), srv, inR, outW, zerolog.New(io.Discard)); outW.Close() }()
	defer func() { inW.Close(); <-done }()
	lines := bufio.NewScanner(outR)
	lines.Buffer(make([]byte, 1<<20), 4<<20)
	// seen is signalled for each chunk read off stdout; ChunkFunc waits on
	// it before writing the next one.
	seen := make(chan struct{}, 1)
	await := func(id string) int {
		n := 0
		for lines.Scan() {
			if bytes.HasPrefix(lines.Bytes(), []byte(`{"jsonrpc":"2.0","id":`+id+`,`)) {
				return n
			}
			if c := bytes.Count(lines.Bytes(), []byte("tok ")); c > 0 {
				n += c
				seen <- struct{}{}
			}
		}
		t.Fatal("stdout ended")
		return n
	}
	fmt.Fprintln(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	await("1")
	fmt.Fprintf(inW, `{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`+"\n", os.TempDir())
	await("2")
	sid := lastSessionID(lines.Bytes())

	lockstep := func(i int) string {
		if i > 0 {
			<-seen
		}
		return "tok "
	}
	id := 2
	prompt := func(chunks int) float64 {
		fake.Script(llmtest.Reply{Chunks: chunks, ChunkFunc: lockstep})
		id++
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		fmt.Fprintf(inW, `{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"go"}]}}`+"\n", id, sid)
		got := await(fmt.Sprint(id))
		runtime.ReadMemStats(&after)
		<-seen // the last chunk's signal, which no ChunkFunc took
		if got != chunks {
			t.Fatalf("got %d chunks of %d", got, chunks)
		}
		return float64(after.Mallocs - before.Mallocs)
	}
	const n = 1000
	prompt(n / 10) // warm: pools, buffers, the first turn's one-offs
	one := prompt(n)
	two := prompt(2 * n)
	per := (two - one) / n
	if got := int(math.Round(per)); got != allocsPerStdioChunk {
		t.Errorf("%s: %.2f allocations, pinned at %d: a change moved the cost per event; if it is meant to, set the pin to %d (a rise wants its profile, docs/performance.md)", "one stdio chunk", per, allocsPerStdioChunk, got)
	}
	t.Logf("%s: %.2f allocations (pinned at %d)", "one stdio chunk", per, allocsPerStdioChunk)
}
