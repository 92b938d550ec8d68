package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// wsCloseReport is the last line of e2e/node/ws-close.mjs: what the ws
// package (under the TypeScript SDK's WebSocket stream in Node) read.
type wsCloseReport struct {
	OK            bool   `json:"ok"`
	CloseCode     int    `json:"closeCode"`
	CloseReason   string `json:"closeReason"`
	SocketError   string `json:"socketError"`
	ClosedAfterMs *int   `json:"closedAfterMs"`
	Error         string `json:"error"`
	Schema        struct {
		Passed int `json:"passed"`
		Failed int `json:"failed"`
	} `json:"schema"`
}

// wsCloseClient runs ws-close.mjs; ready is closed once it printed
// {"ready":true} (case wait), report gets its last line.
type wsCloseClient struct {
	ready  chan struct{}
	report chan wsCloseReport
}

func startWSCloseClient(env []string, url, kase, cwd string) *wsCloseClient {
	cmd := exec.Command("node", filepath.Join(nodeDir, "ws-close.mjs"), "--ws-url", url, "--case", kase, "--cwd", cwd)
	cmd.Env = env
	cmd.Stderr = GinkgoWriter
	out, err := cmd.StdoutPipe()
	Expect(err).NotTo(HaveOccurred())
	Expect(cmd.Start()).To(Succeed())
	c := &wsCloseClient{ready: make(chan struct{}), report: make(chan wsCloseReport, 1)}
	go func() {
		defer GinkgoRecover()
		sc := bufio.NewScanner(out)
		var last []byte
		for sc.Scan() {
			if bytes.Equal(sc.Bytes(), []byte(`{"ready":true}`)) {
				close(c.ready)
				continue
			}
			last = append(last[:0], sc.Bytes()...)
		}
		_ = cmd.Wait()
		var r wsCloseReport
		Expect(json.Unmarshal(last, &r)).To(Succeed(), "ws-close.mjs output: %q", last)
		c.report <- r
	}()
	DeferCleanup(func() { _ = cmd.Process.Kill() })
	return c
}

func (c *wsCloseClient) result() wsCloseReport {
	var r wsCloseReport
	EventuallyWithOffset(1, c.report, 30*time.Second).Should(Receive(&r))
	ExpectWithOffset(1, r.OK).To(BeTrue(), "ws-close.mjs: %s", r.Error)
	ExpectWithOffset(1, r.Schema.Failed).To(BeZero())
	ExpectWithOffset(1, r.Schema.Passed).To(BeNumerically(">=", 2))
	return r
}

var _ = Describe("WebSocket close codes as Node's ws reads them", Label("e2e", "remote", "node"), func() {
	var (
		fake *llmtest.Server
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
	})

	It("an oversized frame closes with 1009, not a reset (1006), every time", func() {
		a := startHTTPAgent(agentEnv(fake), "tok-close")
		env := agentEnv(fake, "IACCODE_ACP_HTTP_TOKEN=tok-close")
		for i := range 5 {
			r := startWSCloseClient(env, wsURL(a.base), "oversize", cwd).result()
			Expect(r.CloseCode).To(Equal(1009), "attempt %d: %+v", i+1, r)
			Expect(r.SocketError).To(BeEmpty())
			Expect(*r.ClosedAfterMs).To(BeNumerically("<", 2000), "the close waited for the linger deadline")
		}
		Expect(a.stderr.String()).To(ContainSubstring("websocket message too large: closed with 1009"))
		a.sigterm(10 * time.Second)
	})

	It("clients busy sending when the server shuts down read 1001", func() {
		a := startHTTPAgent(agentEnv(fake), "")
		clients := make([]*wsCloseClient, 4)
		for i := range clients {
			clients[i] = startWSCloseClient(agentEnv(fake), wsURL(a.base), "wait", cwd)
		}
		for _, c := range clients {
			Eventually(c.ready, 20*time.Second).Should(BeClosed())
		}
		a.sigterm(15 * time.Second)
		for i, c := range clients {
			r := c.result()
			Expect(r.CloseCode).To(Equal(1001), "client %d: %+v", i+1, r)
			Expect(r.CloseReason).To(Equal("server shutting down"))
		}
	})
})
