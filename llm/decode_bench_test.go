package llm

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// recorded returns what the fake streams for chunks text deltas.
func recorded(b *testing.B, path, body string, chunks int) []byte {
	srv := llmtest.Start(b)
	srv.SetDefault(llmtest.Reply{Chunks: chunks, ChunkText: "token "})
	res, err := http.Post(srv.URL()+path, "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func benchDecode(b *testing.B, data []byte, chunks int, decode func(io.Reader, func(Event)) error) {
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		n := 0
		if err := decode(bytes.NewReader(data), func(e Event) {
			if e.Type == EventTextDelta {
				n++
			}
		}); err != nil || n != chunks {
			b.Fatalf("err %v, %d chunks", err, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chunks), "ns/chunk")
}

// BenchmarkAnthropicDecode and BenchmarkOpenAIDecode measure the stream
// decoders alone (no HTTP, no server): parsing cost per text chunk.
func BenchmarkAnthropicDecode(b *testing.B) {
	const chunks = 10_000
	data := recorded(b, "/messages", `{"model":"m","max_tokens":10,"stream":true,"messages":[]}`, chunks)
	benchDecode(b, data, chunks, decodeAnthropicStream)
}

func BenchmarkOpenAIDecode(b *testing.B) {
	const chunks = 10_000
	data := recorded(b, "/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`, chunks)
	benchDecode(b, data, chunks, decodeOpenAIStream)
}
