package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fasthttp/websocket"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

var _ = Describe("a turn prompted over a WebSocket on a pod that drains", Label("e2e", "cluster", "postgres"), func() {
	It("goes on at another pod when the socket closes 1001: a new connection's load there shows it running and streams the rest", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd := GinkgoT().TempDir()
		steps := filepath.Join(cwd, "steps")
		script := []llmtest.Reply{}
		var want []string
		for i := 1; i <= 5; i++ {
			line := "s" + strconv.Itoa(i)
			want = append(want, line)
			script = append(script, toolCallReply(line, "bash", map[string]any{"command": "echo " + line + " >> " + steps + "; sleep 0.5"}))
		}
		fake.Script(append(script, llmtest.Reply{Text: "All five steps done."})...)
		cl := newCluster(fake, 2, "IAC_CODE_DRAIN_TIMEOUT=5s")

		ws := openWS(cl.pods[0].base, nil, nil)
		sid := ws.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})["sessionId"].(string)
		ws.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"})
		ws.prompt(sid, "run the five steps")
		ws.until("the second step running", func(m map[string]any) bool {
			p, _ := m["params"].(map[string]any)
			u, _ := p["update"].(map[string]any)
			return m["method"] == "session/update" && u["toolCallId"] == "s2" && u["status"] == "in_progress"
		})

		Expect(cl.pods[0].cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
		Eventually(ws.closed, 20*time.Second).Should(BeClosed())
		Expect(websocket.IsCloseError(ws.err, websocket.CloseGoingAway)).To(BeTrue(), "closed 1001: %v", ws.err)
		Eventually(cl.pods[0].exited, 15*time.Second).Should(Receive())

		By("a new connection loads the session on the pod that adopted it")
		c := openConn(cl.pods[1])
		res := c.result("session/load", loadParams(sid, cwd))
		from := len(c.events)
		if activeTurnOf(res) != nil {
			c.until("the turn's end", isTurnEnd)
		} else {
			GinkgoWriter.Println("the turn ended before the load")
		}
		ups := c.updatesOf(sid, 0)
		Expect(chatText(ups, "agent_message_chunk")).To(HaveSuffix("All five steps done."), "the rest of the turn, live or replayed")
		data, err := os.ReadFile(steps)
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.Fields(string(data))).To(Equal(want), "every step once: the turn was not cancelled with the socket")
		Expect(activeTurnOf(res)).NotTo(BeNil(), "the load came while the turn ran (steps left: %d events after it)", len(c.events)-from)
		Expect(cl.pods[1].check.Violations()).To(BeEmpty())
	})
})
