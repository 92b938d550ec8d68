// Command profserver is iac-code built for profiling: the same wiring as
// cmd/iac-code (same flags, same environment), plus a debug listener on the
// loopback address in ACP_BENCH_DEBUG_ADDR serving net/http/pprof,
// /debug/bench/memstats (allocation counters, for allocations per chunk in
// stdio mode, where the server has no /metrics) and
// /debug/bench/cpu/start|stop (a CPU profile of exactly the measured phase).
//
//	go build -o bin/iac-code-prof ./cmd/acp-bench/internal/profserver
//	acp-bench stdio-stream --server bin/iac-code-prof --cpuprofile /tmp/cpu
//
// Keep run() in step with cmd/iac-code/main.go.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	rpprof "runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/transport/httpsse"
	"github.com/iac-code/iac-code/transport/stdio"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "iac-code-prof:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 || args[0] != "acp" {
		return fmt.Errorf("usage: iac-code-prof acp [--transport stdio|http] [--host 127.0.0.1] [--port 8765]")
	}
	fs := flag.NewFlagSet("acp", flag.ContinueOnError)
	transport := fs.String("transport", "stdio", "stdio or http")
	host := fs.String("host", "127.0.0.1", "HTTP bind address")
	port := fs.Int("port", 8765, "HTTP port")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if addr := os.Getenv("ACP_BENCH_DEBUG_ADDR"); addr != "" {
		if err := serveDebug(addr); err != nil {
			return err
		}
	}
	lvl, err := zerolog.ParseLevel(strings.ToLower(os.Getenv("IAC_CODE_LOG_LEVEL")))
	if err != nil || lvl == zerolog.NoLevel {
		lvl = zerolog.InfoLevel
	}
	log := zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Str("svc", "iac-code").Logger()
	home := os.Getenv("IAC_CODE_HOME")
	if home == "" {
		dir, err := os.UserHomeDir()
		if err != nil {
			return err
		}
		home = filepath.Join(dir, ".iac-code")
	}
	cfg := actors.Config{Version: "prof", Home: home, LLM: llm.ConfigFromEnv(), SessionIdle: time.Hour}
	provider, err := llm.New(cfg.LLM)
	if err != nil {
		return err
	}
	// IAC_CODE_STORE_URL picks the store: files under the home (default) or
	// PostgreSQL shared by several processes. Closed after the actor system
	// stops: the shared store then releases this process's leases at once.
	sessions, err := store.OpenFromEnv(cfg.Home, os.Getenv, store.WithLogger(log))
	if err != nil {
		return fmt.Errorf("session store: %w", err)
	}
	defer func() {
		if err := sessions.Close(); err != nil {
			log.Warn().Err(err).Msg("close session store")
		}
	}()
	srv := actors.NewServer(actors.Deps{Config: cfg, Provider: provider, Tools: tools.Default(), Store: sessions, Log: log})
	defer srv.Shutdown()
	switch *transport {
	case "stdio":
		return stdio.Serve(context.Background(), srv, os.Stdin, os.Stdout, log)
	case "http":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return httpsse.Serve(ctx, srv, httpsse.Config{Host: *host, Port: *port, Token: os.Getenv("IACCODE_ACP_HTTP_TOKEN")}, log)
	default:
		return fmt.Errorf("unknown transport %q", *transport)
	}
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
	mux.HandleFunc("/debug/bench/memstats", func(w http.ResponseWriter, _ *http.Request) {
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
