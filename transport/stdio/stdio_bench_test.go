package stdio

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/store"
)

// BenchmarkStdioStream measures one session over the stdio edge: the fake
// OpenAI-compatible server streams b.N chunks over real HTTP, the real
// provider parses them, the actor tree turns each into a session/update and
// the stdio writer puts it on a pipe that a reader drains. Allocations are
// those of the whole process (fake server and reader included).
func BenchmarkStdioStream(b *testing.B) {
	fake := llmtest.NewServer()
	defer fake.Close()
	provider, err := llm.New(llm.Config{Provider: "openai_compatible", BaseURL: fake.URL(), APIKey: "k", Model: "m"})
	if err != nil {
		b.Fatal(err)
	}
	sessions, err := store.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
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
	lines := bufio.NewScanner(outR)
	lines.Buffer(make([]byte, 1<<20), 4<<20)
	// await reads until the response to id and counts the chunks seen on
	// the way: the "tok " pieces, as the server joins deltas that wait.
	await := func(id string) int {
		n := 0
		for lines.Scan() {
			if bytes.HasPrefix(lines.Bytes(), []byte(`{"jsonrpc":"2.0","id":`+id+`,`)) {
				return n
			}
			n += bytes.Count(lines.Bytes(), []byte("tok "))
		}
		b.Fatal("stdout ended")
		return n
	}
	fmt.Fprintln(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	await("1")
	fmt.Fprintf(inW, `{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`+"\n", os.TempDir())
	await("2")
	var sid string
	if _, err := fmt.Sscanf(lastSessionID(lines.Bytes()), "%s", &sid); err != nil {
		b.Fatal(err)
	}

	fake.Script(llmtest.Reply{Chunks: b.N, ChunkText: "tok "})
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	fmt.Fprintf(inW, `{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"go"}]}}`+"\n", sid)
	chunks := await("3")
	elapsed := time.Since(start)
	b.StopTimer()
	if chunks != b.N {
		b.Fatalf("got %d chunks of %d", chunks, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "chunks/s")
	inW.Close()
	<-done
}

func lastSessionID(line []byte) string {
	const key = `"sessionId":"`
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return ""
	}
	rest := line[i+len(key):]
	return string(rest[:bytes.IndexByte(rest, '"')])
}
