package e2e

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// logLevels counts the log lines of stderr by level.
func logLevels(stderr string) map[string]int {
	n := map[string]int{}
	for _, line := range strings.Split(stderr, "\n") {
		var l struct {
			Level string `json:"level"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Level != "" {
			n[l.Level]++
		}
	}
	return n
}

var _ = Describe("logs", Label("e2e"), func() {
	var fake *llmtest.Server
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
	})

	DescribeTable("stdio mode logs warnings and errors only, unless IAC_CODE_LOG_LEVEL says otherwise",
		func(level string, wantInfo bool) {
			a := startAgent(agentEnv(fake, "IAC_CODE_LOG_LEVEL="+level))
			a.initialize()
			sid := a.newSession(GinkgoT().TempDir())
			Expect(a.result(a.prompt(sid, "hi"))["stopReason"]).To(Equal("end_turn"))
			a.finish()
			if wantInfo {
				Expect(logLevels(a.stderr.String())["info"]).To(BeNumerically(">", 0))
			} else {
				Expect(logLevels(a.stderr.String())).NotTo(HaveKey("info"))
				Expect(logLevels(a.stderr.String())).NotTo(HaveKey("debug"))
			}
		},
		Entry("default", "", false),
		Entry("IAC_CODE_LOG_LEVEL=info", "info", true),
	)

	It("HTTP --port 0 listens on a free port and logs it (HTTP logs info by default)", func() {
		cmd := exec.Command(binPath, "acp", "--transport", "http", "--port", "0")
		cmd.Env = agentEnv(fake, "IAC_CODE_LOG_LEVEL=")
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		Expect(cmd.Start()).To(Succeed())
		DeferCleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		var addr string
		Eventually(func() string {
			for _, line := range strings.Split(stderr.String(), "\n") {
				var l struct{ Message, Addr string }
				if json.Unmarshal([]byte(line), &l) == nil && l.Message == "listening" {
					addr = l.Addr
				}
			}
			return addr
		}, 20*time.Second, 20*time.Millisecond).ShouldNot(BeEmpty())
		Expect(addr).To(HavePrefix("127.0.0.1:"))
		Expect(addr).NotTo(Equal("127.0.0.1:0"))
		Expect(addr).NotTo(Equal("127.0.0.1:8765"))
		resp, err := http.Get("http://" + addr + "/health")
		Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
	})
})
