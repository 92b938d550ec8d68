package mcp

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

type lastRequest struct{ req *http.Request }

func (l *lastRequest) RoundTrip(req *http.Request) (*http.Response, error) {
	l.req = req
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

// An MCP HTTP request made under a traced tool call carries its W3C
// traceparent; one made without a span is passed on untouched.
func TestHeaderTransportCarriesTheTrace(t *testing.T) {
	next := &lastRequest{}
	tr := &headerTransport{next: next}

	plain, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/mcp", nil)
	if _, err := tr.RoundTrip(plain); err != nil {
		t.Fatal(err)
	}
	if next.req != plain || next.req.Header.Get("traceparent") != "" {
		t.Fatalf("untraced request changed: %v", next.req.Header)
	}

	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	traced, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:1/mcp", nil)
	if _, err := tr.RoundTrip(traced); err != nil {
		t.Fatal(err)
	}
	if got, want := next.req.Header.Get("traceparent"), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; got != want {
		t.Fatalf("traceparent = %q, want %q", got, want)
	}
	if traced.Header.Get("traceparent") != "" {
		t.Fatal("the caller's request was changed")
	}
}
