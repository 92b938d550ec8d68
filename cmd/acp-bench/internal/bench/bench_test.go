package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/acpclient"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/proc"
)

func TestRSSSlope(t *testing.T) {
	var samples []proc.Sample
	for i := range 11 {
		// 1 MiB per minute after a 2-minute warm-up spike.
		rss := int64(100<<20) + int64(i)*(1<<20)
		if i < 2 {
			rss = 500 << 20
		}
		samples = append(samples, proc.Sample{T: time.Duration(i) * time.Minute, Usage: proc.Usage{RSS: rss}})
	}
	slope, r2, mean := rssSlope(samples, 2*time.Minute)
	if math.Abs(slope-1024) > 1e-6 || math.Abs(r2-1) > 1e-9 || math.Abs(mean-(100<<10)-6*1024) > 1e-6 {
		t.Fatalf("slope %v KiB/min r2 %v mean %v", slope, r2, mean)
	}
	if s, _, _ := rssSlope(nil, 0); s != 0 {
		t.Fatal("no samples")
	}
}

func TestErrKey(t *testing.T) {
	cases := map[error]string{
		&acpclient.StatusError{Op: "POST", Status: 503}:     "x: HTTP 503",
		&acpclient.RPCError{Code: -32602}:                   "x: JSON-RPC -32602",
		fmt.Errorf("wrapped: %w", acpclient.ErrStreamError): "x: error event",
		context.DeadlineExceeded:                            "x: timeout",
		io.ErrUnexpectedEOF:                                 "x: stream ended",
		fmt.Errorf("dial: %w", syscall.ECONNREFUSED):        "x: connection refused",
	}
	long := errKey("x", fmt.Errorf("a very long error message %0100d", 1))
	if len(long) != len("x: ")+80 {
		t.Errorf("long error not cut: %q", long)
	}
	for err, want := range cases {
		if got := errKey("x", err); got != want {
			t.Errorf("errKey(%v) = %q, want %q", err, got, want)
		}
	}
}

func TestLatencyEdges(t *testing.T) {
	if latencyEdges[0] != 50_000 || latencyEdges[len(latencyEdges)-1] != 20_000_000_000 {
		t.Fatalf("%v", latencyEdges)
	}
	for i := 1; i < len(latencyEdges); i++ {
		if latencyEdges[i] <= latencyEdges[i-1] {
			t.Fatalf("not increasing: %v", latencyEdges)
		}
	}
}
