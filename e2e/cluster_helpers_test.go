package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/store/pgtest"
)

// clusterSecret is the pods' shared secret in the specs; no output may
// contain it.
const clusterSecret = "cluster-secret-e2e-7d41"

// cluster is a set of pods sharing one fresh PostgreSQL schema.
type cluster struct {
	fake  *llmtest.Server
	dbURL string
	pods  []*httpAgent
	extra []string
}

// newCluster starts n pods on loopback (HTTP and cluster ports free).
func newCluster(fake *llmtest.Server, n int, extra ...string) *cluster {
	srv, err := pgtest.SharedOrSkip(Skip)
	Expect(err).NotTo(HaveOccurred())
	schema, dbURL, err := srv.NewSchema()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(srv.DropSchema, schema)
	c := &cluster{fake: fake, dbURL: dbURL, extra: extra}
	var wg sync.WaitGroup
	c.pods = make([]*httpAgent, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			c.pods[i] = c.start(clusterSecret)
		}()
	}
	wg.Wait()
	return c
}

// start starts one more pod with secret.
func (c *cluster) start(secret string, extra ...string) *httpAgent {
	env := agentEnv(c.fake, append([]string{"IAC_CODE_STORE_URL=" + c.dbURL, "IAC_CODE_CLUSTER_SECRET=" + secret,
		"IAC_CODE_CLUSTER_LISTEN=127.0.0.1:0"}, append(c.extra, extra...)...)...)
	// A pod with a shared token needs it for its health check too.
	token := ""
	for _, kv := range append(c.extra, extra...) {
		if v, ok := strings.CutPrefix(kv, "IACCODE_ACP_HTTP_TOKEN="); ok {
			token = v
		}
	}
	a := startHTTPAgent(env, token)
	Eventually(a.stderr.String, 10*time.Second, 20*time.Millisecond).Should(ContainSubstring("cluster: pod started"))
	return a
}

// incarnation is the pod's incarnation id, from its log.
func (a *httpAgent) incarnation() string {
	for _, line := range strings.Split(a.stderr.String(), "\n") {
		var rec struct{ Message, Incarnation string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "cluster: pod started" {
			return rec.Incarnation
		}
	}
	Fail("no incarnation in the log")
	return ""
}

// freeze stops the pod with SIGSTOP and returns once every thread of it is
// stopped. kill(2) only queues the signal: the group stop begins when one
// thread of the pod takes it, and on a busy machine the thread the kernel
// picked may wait for a CPU while the others run on for milliseconds,
// enough to serve a request sent after kill returned.
func (a *httpAgent) freeze() {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		Skip("needs /proc to see when a stopped pod's threads have all stopped")
	}
	Expect(a.cmd.Process.Signal(syscall.SIGSTOP)).To(Succeed())
	Eventually(a.unstoppedThreads, 10*time.Second, time.Millisecond).Should(BeZero(), "threads of the pod not stopped yet")
}

// unstoppedThreads counts the pod's threads that may still run: not stopped
// (T, t) nor exited (Z, X) by the state in /proc/<pid>/task/<tid>/stat.
func (a *httpAgent) unstoppedThreads() int {
	dir := fmt.Sprintf("/proc/%d/task", a.cmd.Process.Pid)
	tasks, err := os.ReadDir(dir)
	Expect(err).NotTo(HaveOccurred())
	n := 0
	for _, t := range tasks {
		stat, err := os.ReadFile(filepath.Join(dir, t.Name(), "stat"))
		if err != nil {
			continue // the thread exited meanwhile
		}
		// "tid (comm) S ...": comm may hold anything, the state follows the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || !bytes.ContainsRune([]byte("TtZX"), rune(stat[i+2])) {
			n++
		}
	}
	return n
}

// metric reads one sample of the pod's /metrics ("name" or `name{label="v"}`).
func (a *httpAgent) metric(name string) float64 {
	resp, err := a.client.Get(a.base + "/metrics")
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			Expect(json.Unmarshal([]byte(v), &f)).To(Succeed())
			return f
		}
	}
	return 0
}

// roundRobin is a reverse proxy that sends each request to the next pod, as
// a plain load balancer does; a pod that refuses the connection is skipped
// (nginx: proxy_next_upstream error). served lists the pod of each request.
type roundRobin struct {
	*httpAgent
	backends []string
	next     atomic.Uint64
	mu       sync.Mutex
	served   []int
}

func newRoundRobin(pods []*httpAgent) *roundRobin {
	rr := &roundRobin{}
	for _, p := range pods {
		rr.backends = append(rr.backends, p.base)
	}
	base := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}
	proxy := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.Out.Host = "127.0.0.1" },
		FlushInterval: -1,
		Transport:     rr.transport(base),
	}
	srv := httptest.NewServer(proxy)
	DeferCleanup(srv.Close)
	DeferCleanup(base.CloseIdleConnections)
	rr.httpAgent = &httpAgent{base: srv.URL, check: newWireChecker(schemaV1),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: true}}}
	return rr
}

type rrTransport struct {
	rr   *roundRobin
	base http.RoundTripper
}

func (rr *roundRobin) transport(base http.RoundTripper) http.RoundTripper {
	return &rrTransport{rr: rr, base: base}
}

// replace points backend i at base: the pod's replacement (a rolling
// restart).
func (rr *roundRobin) replace(i int, base string) {
	rr.mu.Lock()
	rr.backends[i] = base
	rr.mu.Unlock()
}

// backend is the next backend in turn and its index.
func (rr *roundRobin) backend() (int, string) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	i := int(rr.next.Add(1)-1) % len(rr.backends)
	return i, rr.backends[i]
}

func (t *rrTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
	}
	var lastErr error
	for range len(t.rr.backends) {
		i, backend := t.rr.backend()
		u, _ := url.Parse(backend)
		out := req.Clone(req.Context())
		out.URL.Scheme, out.URL.Host = u.Scheme, u.Host
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		resp, err := t.base.RoundTrip(out)
		if err != nil && isRefused(err) {
			lastErr = err
			continue
		}
		if err == nil {
			t.rr.mu.Lock()
			t.rr.served = append(t.rr.served, i)
			t.rr.mu.Unlock()
		}
		return resp, err
	}
	return nil, lastErr
}

func isRefused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &op) && op.Op == "dial"
}

// lastServed is the pod that served the latest request.
func (rr *roundRobin) lastServed() int {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return rr.served[len(rr.served)-1]
}

// acpConn is one ACP connection over HTTP: requests POSTed through via
// (a pod or the proxy), answers read from its stream.
type acpConn struct {
	via    *httpAgent
	id     string
	s      *sseStream
	nextID int
	events []sseEvent
}

// openConn initializes a connection through via; its stream is opened
// through streamVia when given (another pod), else via.
func openConn(via *httpAgent, streamVia ...*httpAgent) *acpConn {
	r := via.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1,
		"clientCapabilities": map[string]any{}}))
	ExpectWithOffset(1, r.status).To(Equal(http.StatusOK), string(r.body))
	via.check.ServerSent(r.body)
	c := &acpConn{via: via, id: r.header.Get("Acp-Connection-Id"), nextID: 1}
	sv := via
	if len(streamVia) > 0 {
		sv = streamVia[0]
	}
	c.s = sv.stream(c.id)
	return c
}

// send POSTs a request and returns its id.
func (c *acpConn) send(method string, params any) float64 {
	c.nextID++
	c.via.accepted(c.id, jrpc(c.nextID, method, params))
	return float64(c.nextID)
}

// wait reads the stream up to the answer to id.
func (c *acpConn) wait(id float64) map[string]any {
	evs := c.s.until("answer "+jsonText(id), respTo(id))
	c.events = append(c.events, evs...)
	return evs[len(evs)-1].msg
}

func (c *acpConn) call(method string, params any) map[string]any {
	return c.wait(c.send(method, params))
}

func (c *acpConn) result(method string, params any) map[string]any {
	m := c.call(method, params)
	ExpectWithOffset(1, m).To(HaveKey("result"), "answer to %s: %v", method, m)
	r, _ := m["result"].(map[string]any)
	return r
}

func (c *acpConn) newSession(cwd string) string {
	return c.result("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})["sessionId"].(string)
}

func (c *acpConn) prompt(sid, text string) float64 {
	return c.send("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": text}}})
}

// updatesOf are the session/update payloads of session sid read so far,
// from event index from on.
func (c *acpConn) updatesOf(sid string, from int) []map[string]any {
	var out []map[string]any
	for _, ev := range c.events[from:] {
		if ev.msg["method"] == "session/update" {
			p := ev.msg["params"].(map[string]any)
			if p["sessionId"] == sid {
				out = append(out, p["update"].(map[string]any))
			}
		}
	}
	return out
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// isAgentChunk matches a session/update with an agent message chunk.
func isAgentChunk(m map[string]any) bool {
	if m["method"] != "session/update" {
		return false
	}
	return m["params"].(map[string]any)["update"].(map[string]any)["sessionUpdate"] == "agent_message_chunk"
}
