package mcp_test

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/tools/mcp"
	"github.com/iac-code/iac-code/tools/mcp/mcptest"
	"github.com/iac-code/iac-code/tools/procgroup"
)

func TestMCP(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "MCP Suite")
}

// serverBin is the test MCP server, built once for the suite.
var serverBin string

var _ = SynchronizedBeforeSuite(func() []byte {
	bin, err := mcptest.Build(os.TempDir())
	Expect(err).NotTo(HaveOccurred())
	return []byte(bin)
}, func(b []byte) { serverBin = string(b) })

// logBuffer collects the log lines of a server (its stderr among them).
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// events records a server's events in order.
type events struct {
	mu  sync.Mutex
	all []mcp.Event
}

func (e *events) add(ev mcp.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) list() []mcp.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]mcp.Event(nil), e.all...)
}

func (e *events) last() mcp.Event {
	l := e.list()
	if len(l) == 0 {
		return mcp.Event{}
	}
	return l[len(l)-1]
}

// started is a server under test with what it reported.
type started struct {
	srv  *mcp.Server
	ev   *events
	logs *logBuffer
	cwd  string
}

func startServer(cfg mcp.Config, childEnv ...string) *started {
	st := &started{ev: &events{}, logs: &logBuffer{}, cwd: GinkgoT().TempDir()}
	if cfg.Name == "" {
		cfg.Name = "test"
	}
	opts := mcp.Options{Cwd: st.cwd, Version: "test", Log: zerolog.New(st.logs), OnEvent: st.ev.add, Grace: 500 * time.Millisecond}
	if childEnv != nil {
		opts.ChildEnv = func() []string { return childEnv }
	}
	st.srv = mcp.Start(cfg, opts)
	DeferCleanup(st.srv.Close)
	return st
}

func (st *started) connected() mcp.Event {
	EventuallyWithOffset(1, func() mcp.State { return st.ev.last().State }, 20*time.Second, 10*time.Millisecond).
		Should(Equal(mcp.Connected), func() string { return "logs:\n" + st.logs.String() })
	return st.ev.last()
}

func (st *started) failed() mcp.Event {
	EventuallyWithOffset(1, func() mcp.State { return st.ev.last().State }, 20*time.Second, 10*time.Millisecond).
		Should(Equal(mcp.Failed), func() string { return "logs:\n" + st.logs.String() })
	return st.ev.last()
}

func toolNames(ev mcp.Event) []string {
	var out []string
	for _, t := range ev.Tools {
		out = append(out, t.Name)
	}
	return out
}

// readPGID waits for the pid file of the test server and returns its group.
func readPGID(pidfile string) int {
	var pgid int
	EventuallyWithOffset(1, func() error {
		b, err := os.ReadFile(pidfile)
		if err != nil {
			return err
		}
		f := strings.Fields(string(b))
		if len(f) != 2 {
			return os.ErrNotExist
		}
		pgid, err = strconv.Atoi(f[1])
		return err
	}, 10*time.Second, 10*time.Millisecond).Should(Succeed())
	DeferCleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	return pgid
}

// expectGroupGone asserts no process of group pgid is left running:
// kill(-pgid, 0) fails with ESRCH, or only zombies are left (an orphan killed
// here is reparented to PID 1, which in some sandboxes never reaps it; a
// zombie runs nothing). procgroup.Alive is that test.
func expectGroupGone(pgid int, within time.Duration) {
	EventuallyWithOffset(1, func() bool { return procgroup.Alive(pgid) }, within, 5*time.Millisecond).
		Should(BeFalse(), func() string {
			out, _ := exec.Command("ps", "-eo", "pid,ppid,pgid,stat,comm").Output()
			var keep []string
			for _, l := range strings.Split(string(out), "\n") {
				if f := strings.Fields(l); len(f) > 2 && f[2] == strconv.Itoa(pgid) {
					keep = append(keep, l)
				}
			}
			return "process group " + strconv.Itoa(pgid) + " outlived its server\n" + strings.Join(keep, "\n")
		})
	EventuallyWithOffset(1, procgroup.Registered, time.Second, 5*time.Millisecond).ShouldNot(ContainElement(pgid),
		"the group stays registered with the watchdog")
}

// startHTTPServer runs the test server over http or sse on loopback and
// returns its URL.
func startHTTPServer(transport string) string {
	cmd := exec.Command(serverBin, "-transport", transport, "-addr", "127.0.0.1:0")
	cmd.Stderr = GinkgoWriter
	DeferCleanup(func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	url, err := mcptest.Listen(cmd)
	Expect(err).NotTo(HaveOccurred())
	return url
}

func itoa(n int) string { return strconv.Itoa(n) }
