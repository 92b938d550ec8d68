package e2e

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// floodSockets is the size of the silent-socket flood.
const floodSockets = 20_000

// raiseFileLimit lets this process hold the flood's sockets when it may
// raise its limit; it returns how many sockets it can hold at once. Past
// that the flood closes its oldest ones, which the server (oldest silent
// first) has closed already.
func raiseFileLimit(want uint64) int {
	var lim syscall.Rlimit
	Expect(syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)).To(Succeed())
	if lim.Cur < want {
		next := syscall.Rlimit{Cur: want, Max: max(want, lim.Max)}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next) == nil {
			DeferCleanup(syscall.Setrlimit, syscall.RLIMIT_NOFILE, &lim)
			lim = next
		}
	}
	return int(min(uint64(floodSockets), lim.Cur-512))
}

var _ = Describe("silent-socket flood", Label("e2e", "chaos", "http"), func() {
	It("serves an authenticated initialize and prompt while 20,000 sockets that never speak hold the connection cap", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		fake.SetDefault(llmtest.Reply{Text: "Served during the flood."})
		hold := raiseFileLimit(floodSockets + 1024)
		// 1,024 descriptors: a connection cap of 768, far below the flood.
		a := startHTTPAgentLimited(agentEnv(fake), sharedToken, 1024)
		addr := strings.TrimPrefix(a.base, "http://")

		var (
			mu      sync.Mutex
			silent  []net.Conn
			dialed  atomic.Int64
			refused atomic.Int64
			wg      sync.WaitGroup
		)
		DeferCleanup(func() {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range silent {
				_ = c.Close()
			}
		})
		halfway := make(chan struct{})
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			for i := range floodSockets {
				if i == floodSockets/4 {
					close(halfway)
				}
				c, err := net.DialTimeout("tcp", addr, 3*time.Second)
				if err != nil {
					refused.Add(1)
					continue
				}
				dialed.Add(1)
				mu.Lock()
				if len(silent) >= hold {
					_ = silent[0].Close()
					silent = silent[1:]
				}
				silent = append(silent, c)
				mu.Unlock()
			}
		}()

		<-halfway
		By("during the flood, an authenticated client initializes, opens a session and prompts")
		start := time.Now()
		c := openConn(a)
		sid := c.newSession(GinkgoT().TempDir())
		answer := c.wait(c.prompt(sid, "hello"))
		Expect(answer["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		GinkgoWriter.Printf("served in %v with %d silent sockets dialed\n", time.Since(start), dialed.Load())
		Expect(dialed.Load()).To(BeNumerically(">", 800), "the flood was past the cap while the client was served")
		wg.Wait()
		GinkgoWriter.Printf("flood: %d dialed, %d refused or timed out\n", dialed.Load(), refused.Load())
		Expect(dialed.Load()).To(BeNumerically(">=", floodSockets*9/10))

		By("after the flood, still serving; the log tells the evictions")
		Expect(a.post(c.id, jrpc(90, "session/list", map[string]any{})).status).To(Equal(http.StatusAccepted))
		c.wait(90)
		Expect(a.stderr.String()).To(ContainSubstring("connection cap reached"))
		Expect(a.check.Violations()).To(BeEmpty())
	})
})
