// Command profserver is iac-code built for profiling: the same server
// (cmd/internal/acpserver: same flags, same environment, same wiring), plus
// a debug listener on the loopback address in ACP_BENCH_DEBUG_ADDR serving
// net/http/pprof, /debug/bench/memstats (allocation counters, for
// allocations per chunk in stdio mode, where the server has no /metrics;
// with ?gc=1 after a garbage collection, for the live heap)
// and /debug/bench/cpu/start|stop (a CPU profile of exactly the measured
// phase).
//
//	go build -o bin/iac-code-prof ./cmd/acp-bench/internal/profserver
//	acp-bench stdio-stream --server bin/iac-code-prof --cpuprofile /tmp/cpu
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	rpprof "runtime/pprof"
	"sync"

	"github.com/iac-code/iac-code/cmd/internal/acpserver"
)

func main() {
	// The server's watchdog process (the same executable) gets no
	// ACP_BENCH_DEBUG_ADDR: only the server listens.
	if addr := os.Getenv("ACP_BENCH_DEBUG_ADDR"); addr != "" {
		if err := serveDebug(addr); err != nil {
			fmt.Fprintln(os.Stderr, "iac-code-prof:", err)
			os.Exit(1)
		}
	}
	acpserver.Main("iac-code-prof", "prof")
}

// serveDebug serves the profiling endpoints on a loopback address only.
func serveDebug(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("ACP_BENCH_DEBUG_ADDR: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("ACP_BENCH_DEBUG_ADDR must be a loopback address, got %q", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/bench/memstats", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("gc") == "1" {
			runtime.GC() // heapInuse is then the live heap
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"mallocs": ms.Mallocs, "totalAlloc": ms.TotalAlloc, "heapInuse": ms.HeapInuse,
			"stackInuse": ms.StackInuse, "numGC": ms.NumGC, "goroutines": runtime.NumGoroutine(),
		})
	})
	var mu sync.Mutex
	var buf *bytes.Buffer
	mux.HandleFunc("/debug/bench/cpu/start", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if buf != nil {
			http.Error(w, "a CPU profile is running", http.StatusConflict)
			return
		}
		b := &bytes.Buffer{}
		if err := rpprof.StartCPUProfile(b); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		buf = b
	})
	mux.HandleFunc("/debug/bench/cpu/stop", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if buf == nil {
			http.Error(w, "no CPU profile is running", http.StatusConflict)
			return
		}
		rpprof.StopCPUProfile()
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(buf.Bytes())
		buf = nil
	})
	go func() { _ = http.Serve(ln, mux) }()
	return nil
}
