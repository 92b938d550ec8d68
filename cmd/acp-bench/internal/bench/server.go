package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/acpclient"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/proc"
)

// DebugAddrEnv names the loopback address on which a profiling build of the
// server (cmd/acp-bench/internal/profserver) serves /debug/pprof and
// /debug/bench/*. The shipped iac-code ignores it.
const DebugAddrEnv = "ACP_BENCH_DEBUG_ADDR"

// Server is the server under test, running as a child process.
type Server struct {
	Cmd       *exec.Cmd
	Transport string
	// Addr is host:port in HTTP mode.
	Addr string
	// Stdin and Stdout are the protocol pipes in stdio mode.
	Stdin  io.WriteCloser
	Stdout *os.File
	// Debug is the profiling endpoint's address when the binary serves it.
	Debug string

	stderr *tailBuffer
	exited chan struct{}
	// token authenticates the health check (Options.AuthToken).
	token string
	err   error
	// cachegrind is valgrind's output file (Options.Valgrind).
	cachegrind string
	// signalled: Stop or KillAll signalled the process, so a death by
	// signal is ours, not a crash.
	signalled atomic.Bool
}

// serverEnv is the child's environment: ours without IAC_CODE_*/IACCODE_*
// variables (no real key, token or home leaks into a benchmark), plus the
// fake model's settings.
func (o *Options) serverEnv(fakeURL string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "IAC_CODE_") || strings.HasPrefix(kv, "IACCODE_") || strings.HasPrefix(kv, DebugAddrEnv+"=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"IAC_CODE_HOME="+o.Home,
		"IAC_CODE_PROVIDER=openai_compatible",
		"IAC_CODE_BASE_URL="+fakeURL,
		"IAC_CODE_API_KEY=acp-bench",
		"IAC_CODE_MODEL=acp-bench",
		"IAC_CODE_LOG_LEVEL="+o.LogLevel,
	)
	if o.tokensFile != "" {
		env = append(env, "IAC_CODE_AUTH_TOKENS_FILE="+o.tokensFile)
	}
	return append(env, extra...)
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// StartServer starts the binary in the given transport ("stdio" or "http")
// and, in HTTP mode, waits until /health answers.
func StartServer(ctx context.Context, o *Options, transport, fakeURL string) (*Server, error) {
	return startServer(ctx, o, transport, fakeURL, nil)
}

// startServer is StartServer with more environment (cluster pods).
func startServer(ctx context.Context, o *Options, transport, fakeURL string, env []string) (*Server, error) {
	args := []string{"acp", "--transport", transport}
	s := &Server{Transport: transport, stderr: &tailBuffer{max: 64 << 10}, exited: make(chan struct{}), token: o.AuthToken}
	var extra []string
	if o.Debug {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s.Debug = "127.0.0.1:" + strconv.Itoa(port)
		extra = append(extra, DebugAddrEnv+"="+s.Debug)
	}
	if transport == "http" {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s.Addr = "127.0.0.1:" + strconv.Itoa(port)
		args = append(args, "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	}
	cmd := exec.Command(o.Bin, args...)
	if o.Valgrind {
		f, err := os.CreateTemp("", "acp-bench-cachegrind-")
		if err != nil {
			return nil, err
		}
		f.Close()
		s.cachegrind = f.Name()
		// Go's asynchronous preemption signals upset valgrind's tools, and
		// its VEX does not know RDTSCP (runtime.cputicks uses it when the
		// CPU has it: SIGILL at the first contended lock).
		extra = append(extra, "GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off")
		cmd = exec.Command("valgrind", append([]string{"--tool=cachegrind", "--cache-sim=no",
			"--cachegrind-out-file=" + s.cachegrind, "--trace-children=no", o.Bin}, args...)...)
	}
	cmd.Env = o.serverEnv(fakeURL, append(extra, env...)...)
	cmd.Dir = o.Workdir
	cmd.Stderr = s.stderr
	var stderrFile *os.File
	if path := os.Getenv(ServerStderrEnv); path != "" {
		// The whole log, e.g. the runtime's GODEBUG=gctrace=1 lines.
		if f, err := os.Create(path); err == nil {
			stderrFile = f
			cmd.Stderr = io.MultiWriter(s.stderr, stderrFile)
		}
	}
	// Its own process group, so a Ctrl-C of acp-bench reaches it only
	// through Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if transport == "stdio" {
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		// An os.Pipe (not StdoutPipe's) so reads can have deadlines.
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		cmd.Stdout = w
		s.Stdin, s.Stdout = in, r
		defer w.Close()
	}
	s.Cmd = cmd
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Bin, err)
	}
	live.Store(s, struct{}{})
	go func() {
		s.err = cmd.Wait()
		if stderrFile != nil {
			_ = stderrFile.Close()
		}
		live.Delete(s)
		close(s.exited)
	}()
	if transport == "http" {
		if err := s.waitHealthy(ctx, 20*time.Second); err != nil {
			s.Stop()
			return nil, err
		}
	}
	if s.Debug != "" && !s.waitDebug(ctx, 2*time.Second) {
		s.Debug = "" // the binary has no profiling endpoint
	}
	return s, nil
}

// live are the servers running now, for KillAll.
var live sync.Map

// KillAll kills every server still running (for an interrupted run).
func KillAll() {
	live.Range(func(k, _ any) bool {
		s := k.(*Server)
		s.signalled.Store(true)
		_ = s.Cmd.Process.Kill()
		return true
	})
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.Cmd.Process.Pid }

// Usage reads the server's RSS and CPU time.
func (s *Server) Usage() proc.Usage {
	u, _ := proc.Read(s.Pid())
	return u
}

func (s *Server) waitHealthy(ctx context.Context, timeout time.Duration) error {
	hc := acpclient.NewHTTP(s.Addr, 1)
	hc.Token = s.token
	defer hc.Close()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("server exited at start: %v; stderr:\n%s", s.err, s.stderr)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		c, cancel := context.WithTimeout(ctx, time.Second)
		err := hc.Health(c)
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("server not healthy after %v (is --transport http built in?); stderr:\n%s", timeout, s.stderr)
}

func (s *Server) waitDebug(ctx context.Context, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := s.MemStats(ctx); err == nil {
			return true
		}
		select {
		case <-s.exited:
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// MemStats is the part of runtime.MemStats the profiling build reports.
type MemStats struct {
	Mallocs    uint64 `json:"mallocs"`
	TotalAlloc uint64 `json:"totalAlloc"`
	HeapInuse  uint64 `json:"heapInuse"`
	StackInuse uint64 `json:"stackInuse"`
	NumGC      uint32 `json:"numGC"`
	Goroutines int    `json:"goroutines"`
}

var debugClient = &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{Proxy: nil}}

func (s *Server) debugCall(ctx context.Context, path string) ([]byte, error) {
	if s.Debug == "" {
		return nil, errors.New("no debug endpoint")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Debug+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := debugClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP %d %s", path, resp.StatusCode, b)
	}
	return b, nil
}

// MemStats reads the profiling build's runtime statistics.
func (s *Server) MemStats(ctx context.Context) (*MemStats, error) {
	return s.memStats(ctx, "/debug/bench/memstats")
}

// LiveMemStats is MemStats right after a garbage collection: HeapInuse is
// the live heap.
func (s *Server) LiveMemStats(ctx context.Context) (*MemStats, error) {
	return s.memStats(ctx, "/debug/bench/memstats?gc=1")
}

func (s *Server) memStats(ctx context.Context, path string) (*MemStats, error) {
	b, err := s.debugCall(ctx, path)
	if err != nil {
		return nil, err
	}
	var m MemStats
	return &m, json.Unmarshal(b, &m)
}

// StartCPUProfile starts a CPU profile in the profiling build.
func (s *Server) StartCPUProfile(ctx context.Context) error {
	_, err := s.debugCall(ctx, "/debug/bench/cpu/start")
	return err
}

// StopCPUProfile stops it and returns the pprof file.
func (s *Server) StopCPUProfile(ctx context.Context) ([]byte, error) {
	return s.debugCall(ctx, "/debug/bench/cpu/stop")
}

// ServerStderrEnv names a file that receives the server's whole stderr.
const ServerStderrEnv = "ACP_BENCH_SERVER_STDERR"

// KeepCachegrindEnv names a file that receives cachegrind's output of a
// --valgrind run (read it with cg_annotate).
const KeepCachegrindEnv = "ACP_BENCH_CACHEGRIND_OUT"

// Instructions is what cachegrind counted for the whole life of a server
// run under valgrind (after Stop); false when not measured.
func (s *Server) Instructions() (int64, bool) {
	if s.cachegrind == "" {
		return 0, false
	}
	b, err := os.ReadFile(s.cachegrind)
	if keep := os.Getenv(KeepCachegrindEnv); keep != "" {
		// For cg_annotate: instructions per function.
		_ = os.WriteFile(keep, b, 0o644)
	}
	_ = os.Remove(s.cachegrind)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "summary:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// Exited is closed when the process has exited.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// Stderr is the tail of the server's log.
func (s *Server) Stderr() string { return s.stderr.String() }

// Stop ends the server: EOF on stdin (stdio) or SIGTERM (http), then
// SIGKILL after 15 s.
func (s *Server) Stop() error {
	select {
	case <-s.exited:
		return s.exitErr()
	default:
	}
	if s.Stdin != nil {
		_ = s.Stdin.Close()
	} else {
		s.signalled.Store(true)
		_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		s.signalled.Store(true)
		_ = s.Cmd.Process.Kill()
		<-s.exited
	}
	if s.Stdout != nil {
		_ = s.Stdout.Close()
	}
	return s.exitErr()
}

func (s *Server) exitErr() error {
	if s.err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(s.err, &ee) && !ee.Exited() && s.signalled.Load() {
		return nil // killed by our signal
	}
	// A death by another signal is a crash (valgrind's SIGILL, a
	// segfault): the run fails, whatever it measured before.
	return fmt.Errorf("server: %w; stderr:\n%s", s.err, s.stderr)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}

// newHTTP is a client of the server at addr, with the run's token.
func (o *Options) newHTTP(addr string, maxConns int) *acpclient.HTTP {
	h := acpclient.NewHTTP(addr, maxConns)
	h.Token = o.AuthToken
	return h
}
