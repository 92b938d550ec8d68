package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// testAPIKey is the key the server is given; no output may ever contain it.
const testAPIKey = "sk-test-SECRET-5f1c2a"

// agentEnv is the environment every spawned server gets: a private state
// root and the fake model.
func agentEnv(fake *llmtest.Server, extra ...string) []string {
	env := append(os.Environ(),
		"IAC_CODE_HOME="+GinkgoT().TempDir(),
		"IAC_CODE_PROVIDER=chaos_openai",
		"IAC_CODE_BASE_URL="+fake.URL(),
		"IAC_CODE_API_KEY="+testAPIKey,
		"IAC_CODE_MODEL=test-model",
		"IAC_CODE_LOG_LEVEL=debug",
		"IAC_CODE_RETRY_BASE_DELAY=10ms",
		// The binary is built with -race, whose runtime pauses 1 s at every
		// exit (atexit_sleep_ms) so other threads can finish a report; races
		// found still fail the exit (status 66).
		"GORACE=atexit_sleep_ms=50",
	)
	return append(env, extra...)
}

// agent is the server under test over stdio, with a raw JSON-RPC client:
// every line it writes is kept, parsed and schema-checked.
type agent struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	check  *wireChecker
	stderr *syncBuffer

	mu      sync.Mutex
	raw     [][]byte
	msgs    []map[string]any
	arrived chan struct{}
	nextID  int
	eof     chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	GinkgoWriter.Write(p)
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startAgent(env []string) *agent {
	return startAgentCmd(exec.Command(binPath, "acp"), env)
}

// serverCmd runs the server with args; nofile > 0 lowers its descriptor
// limit (soft and hard) first, as a small machine or a container would.
func serverCmd(nofile int, args ...string) *exec.Cmd {
	if nofile <= 0 {
		return exec.Command(binPath, args...)
	}
	return exec.Command("sh", append([]string{"-c", `ulimit -n "$0" && exec "$@"`, strconv.Itoa(nofile), binPath}, args...)...)
}

func startAgentCmd(cmd *exec.Cmd, env []string) *agent {
	cmd.Env = env
	cmd.Dir = GinkgoT().TempDir()
	stdin, err := cmd.StdinPipe()
	Expect(err).NotTo(HaveOccurred())
	stdout, err := cmd.StdoutPipe()
	Expect(err).NotTo(HaveOccurred())
	a := &agent{cmd: cmd, stdin: stdin, check: newWireChecker(schemaV1), stderr: &syncBuffer{},
		arrived: make(chan struct{}, 1), eof: make(chan struct{})}
	cmd.Stderr = a.stderr
	Expect(cmd.Start()).To(Succeed())
	go a.readLoop(stdout)
	DeferCleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return a
}

func (a *agent) readLoop(stdout io.Reader) {
	defer close(a.eof)
	r := bufio.NewReaderSize(stdout, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimRight(line, "\n")
			a.check.ServerSent(line)
			var m map[string]any
			_ = json.Unmarshal(line, &m) // non-JSON is a schema violation already
			a.mu.Lock()
			a.raw = append(a.raw, line)
			a.msgs = append(a.msgs, m)
			a.mu.Unlock()
			select {
			case a.arrived <- struct{}{}:
			default:
			}
		}
		if err != nil {
			return
		}
	}
}

// sendLine writes one raw line (which may be malformed on purpose).
func (a *agent) sendLine(line string) {
	a.check.ClientSent([]byte(line))
	_, err := io.WriteString(a.stdin, line+"\n")
	Expect(err).NotTo(HaveOccurred())
}

func (a *agent) send(v any) {
	b, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	a.sendLine(string(b))
}

// request sends a request and returns its id.
func (a *agent) request(method string, params any) float64 {
	a.mu.Lock()
	a.nextID++
	id := a.nextID
	a.mu.Unlock()
	a.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	return float64(id)
}

func (a *agent) notify(method string, params any) {
	a.send(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

// answer replies to a server request.
func (a *agent) answer(id any, result any) {
	a.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (a *agent) messages() []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]map[string]any(nil), a.msgs...)
}

// waitFor returns the index and value of the first message matching pred.
func (a *agent) waitFor(what string, pred func(map[string]any) bool) (int, map[string]any) {
	deadline := time.After(20 * time.Second)
	for {
		for i, m := range a.messages() {
			if m != nil && pred(m) {
				return i, m
			}
		}
		select {
		case <-a.arrived:
		case <-a.eof:
			for i, m := range a.messages() {
				if m != nil && pred(m) {
					return i, m
				}
			}
			Fail("server stdout closed while waiting for " + what + "\nstderr:\n" + a.stderr.String())
		case <-deadline:
			Fail("timed out waiting for " + what)
		}
	}
}

// response waits for the answer to request id.
func (a *agent) response(id float64) map[string]any {
	_, m := a.waitFor("response "+strconv.Itoa(int(id)), func(m map[string]any) bool {
		return m["id"] == id && m["method"] == nil
	})
	return m
}

func (a *agent) result(id float64) map[string]any {
	m := a.response(id)
	ExpectWithOffset(1, m).To(HaveKey("result"), "response: %v", m)
	r, _ := m["result"].(map[string]any)
	return r
}

func (a *agent) errorOf(id float64) map[string]any {
	m := a.response(id)
	ExpectWithOffset(1, m).To(HaveKey("error"), "response: %v", m)
	return m["error"].(map[string]any)
}

// updatesBefore returns the content and tool updates written before the
// answer to request id (bookkeeping updates — commands, session info, usage —
// are left out; allUpdatesBefore has them).
func (a *agent) updatesBefore(id float64) []map[string]any {
	var out []map[string]any
	for _, u := range a.allUpdatesBefore(id) {
		switch u["sessionUpdate"] {
		case "available_commands_update", "session_info_update", "usage_update":
		default:
			out = append(out, u)
		}
	}
	return out
}

func (a *agent) allUpdatesBefore(id float64) []map[string]any {
	idx, _ := a.waitFor("response", func(m map[string]any) bool { return m["id"] == id && m["method"] == nil })
	var out []map[string]any
	for _, m := range a.messages()[:idx] {
		if m["method"] == "session/update" {
			out = append(out, m["params"].(map[string]any)["update"].(map[string]any))
		}
	}
	return out
}

// isChunk matches an agent_message_chunk notification.
func isChunk(m map[string]any) bool {
	if m["method"] != "session/update" {
		return false
	}
	u, _ := m["params"].(map[string]any)["update"].(map[string]any)
	return u["sessionUpdate"] == "agent_message_chunk"
}

// serverRequest waits for the n-th (0-based) server request of a method.
func (a *agent) serverRequest(method string, n int) map[string]any {
	// waitFor scans all messages again after each arrival: number the
	// requests by id, so a request keeps its place across scans.
	order := map[any]int{}
	_, m := a.waitFor(method, func(m map[string]any) bool {
		if m["method"] != method || m["id"] == nil {
			return false
		}
		i, ok := order[m["id"]]
		if !ok {
			i = len(order)
			order[m["id"]] = i
		}
		return i == n
	})
	return m
}

func (a *agent) initialize() map[string]any { return a.initializeWith(map[string]any{}) }

// initializeWith initializes advertising the client capabilities caps.
func (a *agent) initializeWith(caps map[string]any) map[string]any {
	return a.result(a.request("initialize", map[string]any{
		"protocolVersion": 1, "clientCapabilities": caps,
		"clientInfo": map[string]any{"name": "raw-e2e", "version": "0"}}))
}

func (a *agent) newSession(cwd string) string {
	res := a.result(a.request("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))
	return res["sessionId"].(string)
}

func (a *agent) prompt(sid, text string) float64 {
	return a.request("session/prompt", map[string]any{"sessionId": sid,
		"prompt": []any{map[string]any{"type": "text", "text": text}}})
}

// finish closes stdin and expects a clean exit with a protocol-only stdout
// and no secrets anywhere.
func (a *agent) finish() {
	Expect(a.stdin.Close()).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case err := <-done:
		Expect(err).NotTo(HaveOccurred(), "exit status; stderr:\n%s", a.stderr.String())
	case <-time.After(15 * time.Second):
		_ = a.cmd.Process.Signal(syscall.SIGQUIT)
		Fail("server did not exit after stdin EOF")
	}
	<-a.eof
	a.expectCleanWire()
}

func (a *agent) expectCleanWire() {
	Expect(a.check.Violations()).To(BeEmpty(), "schema violations")
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, line := range a.raw {
		Expect(json.Valid(line)).To(BeTrue(), "stdout line is not JSON: %q", line)
		Expect(string(line)).NotTo(ContainSubstring(testAPIKey))
	}
	Expect(a.stderr.String()).NotTo(ContainSubstring(testAPIKey))
}
