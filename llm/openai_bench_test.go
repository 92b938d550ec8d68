package llm_test

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
)

// BenchmarkOpenAIStream measures the provider's cost per streamed chunk over
// real HTTP from the fake server (the server's own work is included).
func BenchmarkOpenAIStream(b *testing.B) {
	const chunks = 10_000
	srv := llmtest.Start(b)
	srv.SetDefault(llmtest.Reply{Chunks: chunks, ChunkText: "token "})
	p, err := llm.New(llm.Config{Provider: "openai_compatible", BaseURL: srv.URL(), APIKey: "k", Model: "m", Retry: noRetry})
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

// BenchmarkOpenAIStreamLatency measures send-to-emit latency of chunks
// flushed one by one and paced (unpaced, it would measure queueing).
func BenchmarkOpenAIStreamLatency(b *testing.B) {
	const chunks = 500
	srv := llmtest.Start(b)
	srv.SetDefault(llmtest.Reply{Chunks: chunks, Delay: 200 * time.Microsecond, ChunkFunc: func(int) string {
		return strconv.FormatInt(time.Now().UnixNano(), 10)
	}})
	p, err := llm.New(llm.Config{Provider: "openai_compatible", BaseURL: srv.URL(), APIKey: "k", Model: "m", Retry: noRetry})
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, chunks)
	for b.Loop() {
		err := p.Stream(context.Background(), userRequest("go"), func(e llm.Event) {
			if e.Type == llm.EventTextDelta {
				sent, _ := strconv.ParseInt(e.Text, 10, 64)
				lat = append(lat, time.Duration(time.Now().UnixNano()-sent))
			}
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// benchTools are twelve tool definitions shaped like the built-in ones.
func benchTools() []llm.ToolSpec {
	var out []llm.ToolSpec
	for i := range 12 {
		out = append(out, llm.ToolSpec{
			Name:        "tool_" + strconv.Itoa(i),
			Description: "Reads, writes or runs something in the working directory; paths are relative to it unless absolute.",
			InputSchema: []byte(`{"type":"object","properties":{"path":{"type":"string","description":"File path"},` +
				`"offset":{"type":"integer","minimum":0},"limit":{"type":"integer","minimum":1,"maximum":2000},` +
				`"pattern":{"type":"string"},"flags":{"type":"array","items":{"type":"string"}}},"required":["path"]}`),
		})
	}
	return out
}

// BenchmarkOpenAIShortCall is one short model call carrying twelve tool
// definitions, as every turn of an agent makes: building and encoding the
// request dominates, not the 5-chunk answer.
func BenchmarkOpenAIShortCall(b *testing.B) {
	srv := llmtest.Start(b)
	srv.SetDefault(llmtest.Reply{Chunks: 5, ChunkText: "token "})
	p, err := llm.New(llm.Config{Provider: "openai_compatible", BaseURL: srv.URL(), APIKey: "k", Model: "m", Retry: noRetry})
	if err != nil {
		b.Fatal(err)
	}
	req := userRequest("go")
	req.Tools = benchTools()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Stream(ctx, req, func(llm.Event) {}); err != nil {
			b.Fatal(err)
		}
		srv.Reset()
	}
}
