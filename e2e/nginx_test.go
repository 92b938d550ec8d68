package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// nginxBinary is Debian's nginx (.ci/run installs nginx-light), or "".
func nginxBinary() string {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	return ""
}

var (
	shippedUpstream = regexp.MustCompile(`(?m)^(\s*server\s+)10\.0\.0\.\d+:8765;`)
	shippedListen   = regexp.MustCompile(`(?m)^(\s*)listen 443 ssl;`)
)

// nginxFor rewrites deploy/nginx.conf for this machine and nothing else:
// the three upstream addresses become the pods' loopback ports and
// `listen 443 ssl` a free loopback port without TLS (the file ships no
// certificate). Every location, header, buffer and timeout is the
// shipped one.
func nginxFor(shipped string, pods []*httpAgent, port string) string {
	Expect(shippedUpstream.FindAllString(shipped, -1)).To(HaveLen(len(pods)), "deploy/nginx.conf names one server per pod")
	i := 0
	conf := shippedUpstream.ReplaceAllStringFunc(shipped, func(m string) string {
		addr := strings.TrimPrefix(pods[i].base, "http://")
		i++
		return shippedUpstream.ReplaceAllString(m, "${1}"+addr+";")
	})
	Expect(shippedListen.MatchString(conf)).To(BeTrue(), "deploy/nginx.conf listens on 443")
	return shippedListen.ReplaceAllString(conf, "${1}listen 127.0.0.1:"+port+";")
}

// startNginx runs nginx in the foreground with the rewritten file included
// in a minimal main configuration whose every path is under a temp dir.
func startNginx(bin string, pods []*httpAgent) *httpAgent {
	dir := GinkgoT().TempDir()
	port := freePort()
	Expect(os.WriteFile(filepath.Join(dir, "iac-code.conf"), []byte(nginxFor(repoFile("deploy/nginx.conf"), pods, port)), 0o644)).To(Succeed())
	main := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 512; }
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/iac-code.conf;
}
`, dir)
	Expect(os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(main), 0o644)).To(Succeed())
	cmd := exec.Command(bin, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", filepath.Join(dir, "error.log"))
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// nginx goes with the test process, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	Expect(cmd.Start()).To(Succeed())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	DeferCleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if CurrentSpecReport().Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			GinkgoWriter.Printf("nginx error.log:\n%s\n", log)
		}
	})
	ng := &httpAgent{base: "http://127.0.0.1:" + port, check: newWireChecker(schemaV1),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: true}}}
	Eventually(func() error {
		select {
		case <-exited:
			return StopTrying("nginx exited: " + out.String())
		default:
		}
		resp, err := ng.client.Get(ng.base + "/nginx-is-up")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}, 10*time.Second, 20*time.Millisecond).Should(Succeed())
	return ng
}

// rawGet sends GET path exactly as given (no client-side cleaning) and
// returns the status and body.
func rawGet(base, path string) (int, string) {
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path)
	Expect(err).NotTo(HaveOccurred())
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// streamStarts counts the streams each pod has started serving (GET /acp
// answered 200), wherever their connection lives.
func streamStarts(pods []*httpAgent) []float64 {
	out := make([]float64, len(pods))
	for i, p := range pods {
		if p.cmd.ProcessState == nil {
			out[i] = p.metric(`iaccode_http_request_duration_seconds_count{code="200",route="get_acp"}`)
		}
	}
	return out
}

// newStreamOn is the one pod that started a stream since before (-1 while
// none or several did).
func newStreamOn(pods []*httpAgent, before []float64) int {
	pod := -1
	for i, n := range streamStarts(pods) {
		if n > before[i] {
			if pod >= 0 {
				return -1
			}
			pod = i
		}
	}
	return pod
}

// reopen opens c's stream through via, resuming after the last event seen,
// and returns the pod that serves it.
func (c *acpConn) reopen(via *httpAgent, pods []*httpAgent) int {
	before := streamStarts(pods)
	c.s = via.stream(c.id, "Last-Event-ID", c.events[len(c.events)-1].id)
	var pod int
	Eventually(func() int { pod = newStreamOn(pods, before); return pod }, 5*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 0))
	return pod
}

var _ = Describe("deploy/nginx.conf under a real nginx", Label("e2e", "nginx", "cluster", "postgres", "http"), func() {
	It("fronts three pods: health, hidden metrics, body limit, unbuffered streams, Last-Event-ID on another pod, failover", func() {
		bin := nginxBinary()
		if bin == "" {
			Skip("nginx is not installed (.ci/run installs Debian's nginx-light)")
		}
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		fake.Script(
			llmtest.Reply{TextChunks: []string{"one ", "two ", "three ", "four"}, Hang: true, AfterChunks: 3},
			llmtest.Reply{Text: "Replayed after the reconnect."},
			llmtest.Reply{Text: "Still served."},
		)
		cwd := GinkgoT().TempDir()
		cl := newCluster(fake, 3)
		ng := startNginx(bin, cl.pods)

		By("/health is answered by a pod through nginx (the pods accept loopback Host names only)")
		resp, err := ng.client.Get(ng.base + "/health")
		Expect(err).NotTo(HaveOccurred())
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusOK), string(body))
		Expect(string(body)).To(ContainSubstring(`"healthy"`))

		By("/metrics is not reachable through nginx, only on each pod")
		resp, err = ng.client.Get(ng.base + "/metrics")
		Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusNotFound))
		Expect(cl.pods[0].metric("iaccode_http_streams")).To(BeZero())
		for _, path := range []string{"/metrics/", "//metrics", "/metrics?x=1", "/acp/../metrics", "/acp/%2e%2e/metrics",
			"/acp/..%2fmetrics", "/acp%2f..%2fmetrics", "/acp/..\\metrics", "/health/../metrics"} {
			status, body := rawGet(ng.base, path)
			Expect(body).NotTo(ContainSubstring("iaccode_"), "GET %s through nginx: %d", path, status)
		}

		By("bodies up to the pods' 4 MiB pass (nginx's own default is 1 MiB); larger ones are refused by nginx")
		padding := strings.Repeat("x", 3<<20)
		r := ng.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{},
			"_meta": map[string]any{"padding": padding}}))
		Expect(r.status).To(Equal(http.StatusOK), string(r.body))
		big := ng.do(http.MethodPost, bytes.Repeat([]byte(" "), 4<<20+1))
		Expect(big.status).To(Equal(http.StatusRequestEntityTooLarge))
		Expect(string(big.body)).To(ContainSubstring("nginx"), "refused by nginx, before any pod")

		By("a connection through nginx: its stream carries chunks while the model is still answering")
		before := streamStarts(cl.pods)
		c := openConn(ng)
		var streamPod int
		Eventually(func() int { streamPod = newStreamOn(cl.pods, before); return streamPod }, 5*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 0))
		owner := -1
		for i, p := range cl.pods {
			if strings.HasPrefix(c.id, p.incarnation()+".") {
				owner = i
			}
		}
		Expect(owner).To(BeNumerically(">=", 0))
		sid := c.newSession(cwd)
		prompt := c.prompt(sid, "count")
		chunks := c.s.until("first chunk", isAgentChunk)
		c.events = append(c.events, chunks...)
		Expect(fake.Pending()).To(Equal(2), "the model is still on its first answer (it hangs after three chunks)")
		c.via.accepted(c.id, jrpc(nil, "session/cancel", map[string]any{"sessionId": sid}))
		Expect(c.wait(prompt)["result"]).To(HaveKeyWithValue("stopReason", "cancelled"))

		By("an idle stream stays open through nginx")
		time.Sleep(2 * time.Second)
		Expect(c.s.eof).NotTo(BeClosed())
		// nginx keeps it far longer: its read timeout is above the pods' 15 s pings.
		timeout := regexp.MustCompile(`proxy_read_timeout (\d+)([smh]);`).FindStringSubmatch(repoFile("deploy/nginx.conf"))
		Expect(timeout).To(HaveLen(3))
		n, _ := strconv.Atoi(timeout[1])
		Expect(time.Duration(n) * map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[timeout[2]]).To(BeNumerically(">", 15*time.Second))

		By("the stream dropped; a prompt's events wait; the reconnect with Last-Event-ID lands on another pod and replays them")
		c.s.cancel()
		c.s.waitEOF()
		prompt = c.prompt(sid, "again")
		Eventually(fake.Pending, 10*time.Second, 20*time.Millisecond).Should(Equal(1))
		// Round robin sends the next requests to the other pods in turn, so
		// one of two reconnects is served by another pod than the first.
		first := streamPod
		for try := 0; streamPod == first && try < 3; try++ {
			if try > 0 {
				c.events = append(c.events, c.s.until("replay", func(map[string]any) bool { return true })...)
				c.s.cancel()
				c.s.waitEOF()
			}
			streamPod = c.reopen(ng, cl.pods)
		}
		Expect(streamPod).NotTo(Equal(first), "no reconnect reached another pod")
		Expect(c.wait(prompt)["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		for i, ev := range c.events {
			Expect(ev.id).To(Equal(strconv.Itoa(i+1)), "event %d: ids continue across the reconnects, none lost or repeated", i)
		}

		By("a dead pod is skipped: new connections and the live connection's requests go on")
		dead := (owner + 1) % len(cl.pods)
		Expect(cl.pods[dead].cmd.Process.Kill()).To(Succeed())
		<-cl.pods[dead].exited
		for i := range 2 * len(cl.pods) {
			r := ng.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}}))
			Expect(r.status).To(Equal(http.StatusOK), "initialize %d: %s", i, r.body)
		}
		if streamPod == dead {
			c.s.waitEOF()
			Expect(c.reopen(ng, cl.pods)).NotTo(Equal(dead))
		}
		Expect(c.wait(c.prompt(sid, "still there?"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(ng.check.Violations()).To(BeEmpty(), "schema violations")
	})
})
