package llm_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
)

// BenchmarkAnthropicStream measures the Anthropic provider's cost per
// streamed text chunk over real HTTP from the fake server (the server's own
// work is included), like BenchmarkOpenAIStream.
func BenchmarkAnthropicStream(b *testing.B) {
	const chunks = 10_000
	srv := llmtest.Start(b)
	srv.SetDefault(llmtest.Reply{Chunks: chunks, ChunkText: "token "})
	p, err := llm.New(llm.Config{Provider: "anthropic_compatible", BaseURL: srv.URL(), APIKey: "k", Model: "m", Retry: noRetry})
	if err != nil {
		b.Fatal(err)
	}
	req := userRequest("go")
	ctx := context.Background()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mallocs := ms.Mallocs
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		n := 0
		err := p.Stream(ctx, req, func(e llm.Event) {
			if e.Type == llm.EventTextDelta {
				n++
			}
		})
		if err != nil || n != chunks {
			b.Fatalf("err %v, %d chunks", err, n)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms)
	total := float64(b.N * chunks)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/total, "ns/chunk")
	b.ReportMetric(float64(ms.Mallocs-mallocs)/total, "allocs/chunk")
}

// anthropicStreamBytes records what the fake streams for chunks text deltas.
func anthropicStreamBytes(b *testing.B, chunks int) []byte {
	srv := llmtest.Start(b)
	srv.SetDefault(llmtest.Reply{Chunks: chunks, ChunkText: "token "})
	res, err := http.Post(srv.URL()+"/messages", "application/json",
		bytes.NewReader([]byte(`{"model":"m","max_tokens":10,"stream":true,"messages":[]}`)))
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkAnthropicSDKDecode decodes the same bytes with the SDK's
// ssestream + MessageStreamEventUnion path, for the SDK decision recorded in
// anthropic.go (compare BenchmarkAnthropicDecode).
func BenchmarkAnthropicSDKDecode(b *testing.B) {
	const chunks = 10_000
	body := anthropicStreamBytes(b, chunks)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(bytes.NewReader(body))}
		s := ssestream.NewStream[anthropic.MessageStreamEventUnion](ssestream.NewDecoder(res), nil)
		n := 0
		for s.Next() {
			ev := s.Current()
			if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
				n++
			}
		}
		if s.Err() != nil || n != chunks {
			b.Fatalf("err %v, %d chunks", s.Err(), n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chunks), "ns/chunk")
}
