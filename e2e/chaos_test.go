package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"golang.org/x/sys/unix"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/tools/procgroup"
)

// Chaos: the server killed, starved of descriptors, flooded, sharing its
// home with another server, signalled mid-tool, abandoned by its client.
// IAC_CODE_LABEL_FILTER=chaos runs these alone.

// groupCommand is a bash command that writes its process group id to
// pidFile and keeps a foreground and a background process running.
func groupCommand(pidFile string) map[string]any {
	return map[string]any{"command": "echo $$ > " + pidFile + "; sleep 60 & sleep 60"}
}

// waitPGID reads the group id the command wrote.
func waitPGID(pidFile string) int {
	var pgid int
	Eventually(func() error {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return err
		}
		pgid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	}, 20*time.Second, 20*time.Millisecond).Should(Succeed())
	Expect(procgroup.Alive(pgid)).To(BeTrue(), "the bash group runs")
	DeferCleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	return pgid
}

// groupGoneWithin waits until no live member of pgid is left and returns
// how long that took.
func groupGoneWithin(pgid int, limit time.Duration) time.Duration {
	start := time.Now()
	EventuallyWithOffset(1, func() bool { return procgroup.Alive(pgid) }, limit, 5*time.Millisecond).
		Should(BeFalse(), "process group %d outlived the server", pgid)
	return time.Since(start)
}

// historySeqs reads a history file: the sequence numbers of its lines,
// failing on any line that is not a whole JSON entry.
func historySeqs(path string) []int64 {
	f, err := os.Open(path)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	defer f.Close()
	var seqs []int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e struct {
			Seq int64 `json:"seq"`
		}
		ExpectWithOffset(1, json.Unmarshal(sc.Bytes(), &e)).To(Succeed(), "history line %q", sc.Text())
		seqs = append(seqs, e.Seq)
	}
	return seqs
}

func expectConsecutive(seqs []int64) {
	for i, s := range seqs {
		ExpectWithOffset(1, s).To(Equal(int64(i+1)), "history seqs %v", seqs)
	}
}

// replayTexts is the user and agent text of a load's replay, merged.
func replayTexts(a *agent, sid string, from int, load float64) []string {
	var out []string
	for _, u := range mergeUpdates(a.sessionUpdates(sid, from, load)) {
		if t, ok := u["text"].(string); ok {
			out = append(out, u["sessionUpdate"].(string)[:5]+": "+t)
		}
	}
	return out
}

// exitWithin waits for the process to exit and returns its error.
func (a *agent) exitWithin(limit time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case err := <-done:
		<-a.eof
		return err
	case <-time.After(limit):
		_ = a.cmd.Process.Signal(syscall.SIGQUIT)
		Fail("server did not exit within " + limit.String())
	}
	return nil
}

var _ = Describe("chaos", Label("e2e", "chaos"), func() {
	var (
		fake *llmtest.Server
		cwd  string
		home string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
		home = GinkgoT().TempDir()
	})
	env := func(extra ...string) []string {
		return agentEnv(fake, append([]string{"IAC_CODE_HOME=" + home}, extra...)...)
	}

	It("survives kill -9 mid-tool, trial after trial: no completed message lost, no bash group left", func() {
		const trials = 3
		var sid string
		var worst time.Duration
		for trial := 1; trial <= trials; trial++ {
			pidFile := filepath.Join(cwd, fmt.Sprintf("bash-%d.pid", trial))
			fake.Script(llmtest.Reply{Text: fmt.Sprintf("answer %d", trial)},
				sessToolReply(fmt.Sprintf("b%d", trial), "bash", groupCommand(pidFile)))
			a := startAgent(env())
			a.initialize()
			if sid == "" {
				sid = a.newSession(cwd)
			} else {
				from := a.mark()
				load := a.request("session/load", loadParams(sid, cwd))
				a.result(load)
				var want []string
				for i := 1; i < trial; i++ {
					// each killed turn is recorded interrupted by the next process
					want = append(want, fmt.Sprintf("user_: question %d", i), fmt.Sprintf("agent: answer %d", i),
						fmt.Sprintf("user_: run %d", i), "agent: [Turn interrupted: the agent process stopped before it ended]")
				}
				Expect(replayTexts(a, sid, from, load)).To(Equal(want), "trial %d replay", trial)
			}
			Expect(a.result(a.prompt(sid, fmt.Sprintf("question %d", trial)))["stopReason"]).To(Equal("end_turn"))
			a.prompt(sid, fmt.Sprintf("run %d", trial))
			a.answer(a.serverRequest("session/request_permission", 0)["id"], sessAllow("allow_once"))
			pgid := waitPGID(pidFile)

			Expect(a.cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
			// measured before Wait, which also waits for the watchdog (it
			// shares stderr) and its exit (the race runtime's exit pause)
			took := groupGoneWithin(pgid, 5*time.Second)
			worst = max(worst, took)
			_ = a.cmd.Wait()
			<-a.eof
			GinkgoWriter.Printf("trial %d: kill -9 → bash group %d gone in %v\n", trial, pgid, took)
			Expect(a.check.Violations()).To(BeEmpty())
			expectConsecutive(historySeqs(historyPath(home, sid)))
		}
		AddReportEntry("kill -9 to no bash group left (worst of 3)", worst.String())
	})

	It("keeps a session answered by session/new through kill -9: listed, loaded, and it takes prompts", func() {
		// What must be durable when session/new answers: the session
		// directory with meta.json, history.jsonl and its lock file (see
		// store.FileStore.Create). kill -9 right after the answer.
		a := startAgent(env())
		a.initialize()
		sid := a.newSession(cwd)
		Expect(a.cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
		_ = a.cmd.Wait()
		<-a.eof
		Expect(a.check.Violations()).To(BeEmpty())

		fake.Script(llmtest.Reply{Text: "still here"})
		b := startAgent(env())
		b.initialize()
		list := b.result(b.request("session/list", map[string]any{"cwd": cwd}))["sessions"].([]any)
		Expect(list).To(HaveLen(1))
		Expect(list[0]).To(HaveKeyWithValue("sessionId", sid))
		from := b.mark()
		load := b.request("session/load", loadParams(sid, cwd))
		Expect(b.result(load)["modes"]).To(HaveKeyWithValue("currentModeId", "default"))
		Expect(replayTexts(b, sid, from, load)).To(BeEmpty(), "nothing to replay")
		Expect(b.result(b.prompt(sid, "are you there?"))["stopReason"]).To(Equal("end_turn"))
		b.finish()
		expectConsecutive(historySeqs(historyPath(home, sid)))
		Expect(historySeqs(historyPath(home, sid))).To(HaveLen(2), "the prompt and the answer")
	})

	It("keeps serving over HTTP when descriptors run out, then serves normally", func() {
		// 128 descriptors; the connection cap forced above them, so accept
		// itself runs out (EMFILE), as ~20,000 silent connections did.
		a := startHTTPAgentLimited(env("IAC_CODE_HTTP_MAX_CONNECTIONS=5000"), "", 128)
		var silent []net.Conn
		DeferCleanup(func() {
			for _, c := range silent {
				c.Close()
			}
		})
		var shed, served int
		for range 300 {
			c, err := net.Dial("tcp", strings.TrimPrefix(a.base, "http://"))
			Expect(err).NotTo(HaveOccurred())
			silent = append(silent, c)
		}
		// new clients get an answer (503 while starved), never a hang or a dead server
		for range 5 {
			c, err := net.DialTimeout("tcp", strings.TrimPrefix(a.base, "http://"), 5*time.Second)
			Expect(err).NotTo(HaveOccurred())
			_, _ = c.Write([]byte("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			c.Close()
			Expect(err).NotTo(HaveOccurred(), "a client got no answer while descriptors ran out")
			switch resp.StatusCode {
			case http.StatusServiceUnavailable:
				shed++
			case http.StatusOK:
				served++
			default:
				Fail(fmt.Sprintf("status %d", resp.StatusCode))
			}
		}
		Expect(shed).To(BeNumerically(">", 0), "the flood did exhaust the descriptors")
		Eventually(a.stderr.String, 10*time.Second).Should(ContainSubstring("accept failed for lack of resources"))
		for _, c := range silent {
			c.Close()
		}
		silent = nil
		Consistently(a.exited, 200*time.Millisecond).ShouldNot(Receive(), "the server is alive")

		Eventually(func() int {
			r, err := a.client.Get(a.base + "/health")
			if err != nil {
				return 0
			}
			r.Body.Close()
			return r.StatusCode
		}, 10*time.Second, 50*time.Millisecond).Should(Equal(http.StatusOK))
		fake.Script(llmtest.Reply{Text: "still here"})
		conn := a.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1})).header.Get("Acp-Connection-Id")
		s := a.stream(conn)
		a.accepted(conn, jrpc(2, "session/new", map[string]any{"cwd": cwd}))
		sid := s.until("session", respTo(2))
		a.accepted(conn, jrpc(3, "session/prompt", map[string]any{"sessionId": sid[len(sid)-1].msg["result"].(map[string]any)["sessionId"],
			"prompt": []any{map[string]any{"type": "text", "text": "hi"}}}))
		evs := s.until("prompt answer", respTo(3))
		Expect(evs[len(evs)-1].msg["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(a.check.Violations()).To(BeEmpty())
		a.sigterm(10 * time.Second)
	})

	It("answers a session/new flood on a starved stdio server, and idle sessions give their descriptors back", func() {
		a := startAgentCmd(serverCmd(96, "acp"), env("IAC_CODE_SESSION_RELEASE=300ms"))
		a.initialize()
		fds := func() int {
			ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", a.cmd.Process.Pid))
			Expect(err).NotTo(HaveOccurred())
			return len(ents)
		}
		// File-store sessions let go of their lock (and descriptors) between
		// turns, so a flood of session/new alone may never exhaust 96
		// descriptors. The second half of the flood therefore runs starved
		// for sure: the server's soft limit is lowered to its lowest free
		// descriptor number, so no file can be opened until it is raised back.
		const n = 120
		ids := make([]float64, n)
		for i := range n / 2 {
			ids[i] = a.request("session/new", map[string]any{"cwd": cwd})
		}
		for _, id := range ids[:n/2] {
			a.response(id)
		}
		Eventually(fds, 10*time.Second, 50*time.Millisecond).Should(BeNumerically("<", 30))
		restore := starveDescriptors(a.cmd.Process.Pid)
		for i := n / 2; i < n; i++ {
			ids[i] = a.request("session/new", map[string]any{"cwd": cwd})
		}
		for _, id := range ids[n/2:] {
			a.response(id)
		}
		restore()
		var opened []string
		limited := 0
		for _, id := range ids {
			m := a.response(id)
			if e, ok := m["error"].(map[string]any); ok {
				Expect(e["code"]).To(Equal(-32011.0), "error %v", e)
				limited++
				continue
			}
			opened = append(opened, m["result"].(map[string]any)["sessionId"].(string))
		}
		GinkgoWriter.Printf("%d of %d session/new opened, %d refused for lack of descriptors\n", len(opened), n, limited)
		Expect(len(opened) + limited).To(Equal(n))
		Expect(limited).To(BeNumerically(">", 0), "a starved stdio server refuses for lack of descriptors")
		Expect(opened).NotTo(BeEmpty())
		// idle sessions release theirs: new sessions open again, and the old
		// ones take theirs back for a prompt
		Eventually(fds, 10*time.Second, 50*time.Millisecond).Should(BeNumerically("<", 30),
			"%d live sessions hold no descriptor once idle", len(opened))
		Expect(a.response(a.request("session/new", map[string]any{"cwd": cwd}))).To(HaveKey("result"))
		fake.Script(llmtest.Reply{Text: "fine"})
		Expect(a.result(a.prompt(opened[0], "still there?"))["stopReason"]).To(Equal("end_turn"))
		a.finish()
	})

	It("bounds a flood of initializes that never open a stream", func() {
		a := startHTTPAgent(env("IAC_CODE_HTTP_UNUSED_TIMEOUT=1s", "IAC_CODE_HTTP_MAX_UNUSED=500"), "")
		const n = 3000
		var next, failed atomic.Int64
		var wg sync.WaitGroup
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, MaxConnsPerHost: 16}}
		defer hc.CloseIdleConnections()
		for range 16 {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for next.Add(1) <= n {
					r, err := hc.Post(a.base+"/acp", "application/json",
						strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`))
					if err != nil || r.StatusCode != http.StatusOK {
						failed.Add(1)
					}
					if err == nil {
						r.Body.Close()
					}
				}
			}()
		}
		wg.Wait()
		Expect(failed.Load()).To(BeZero())
		gauge := func() int {
			r, err := a.client.Get(a.base + "/metrics")
			Expect(err).NotTo(HaveOccurred())
			defer r.Body.Close()
			sc := bufio.NewScanner(r.Body)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "iaccode_http_connections "); ok {
					n, _ := strconv.Atoi(v)
					return n
				}
			}
			return -1
		}
		Eventually(gauge, 2*time.Second, 20*time.Millisecond).Should(BeNumerically("<=", 500),
			"at most MaxUnused unused connections live")
		Eventually(gauge, 10*time.Second, 100*time.Millisecond).Should(BeZero(), "reaped after UnusedTimeout")
		a.sigterm(10 * time.Second)
	})

	It("keeps one writer per session across two servers on one home: handed over between turns, nothing interleaved, nothing lost", func() {
		fake.Script(llmtest.Reply{Text: "A one"}, llmtest.Reply{Text: "B one"}, llmtest.Reply{Text: "A two"})
		a := startAgent(env())
		b := startAgent(env())
		a.initialize()
		b.initialize()
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "a1"))["stopReason"]).To(Equal("end_turn"))

		By("B loads the session A holds between turns: at once, with what A wrote")
		from := b.mark()
		began := time.Now()
		load := b.request("session/load", loadParams(sid, cwd))
		Expect(b.result(load)).To(HaveKey("modes"))
		Expect(time.Since(began)).To(BeNumerically("<", time.Second))
		Expect(replayTexts(b, sid, from, load)).To(Equal([]string{"user_: a1", "agent: A one"}))
		Expect(b.result(b.prompt(sid, "b1"))["stopReason"]).To(Equal("end_turn"))

		By("A's next prompt takes the session back and goes on after B's messages")
		Expect(a.result(a.prompt(sid, "a2"))["stopReason"]).To(Equal("end_turn"))
		Expect(chatTexts(lastRequest(fake))).To(Equal([]string{"a1", "A one", "b1", "B one", "a2"}))
		a.finish()
		b.finish()
		seqs := historySeqs(historyPath(home, sid))
		Expect(seqs).To(HaveLen(6))
		expectConsecutive(seqs)
	})

	DescribeTable("stdio: a signal mid-tool cancels the turn, answers the prompt, kills the bash group and exits 0",
		func(sig syscall.Signal) {
			pidFile := filepath.Join(cwd, "bash.pid")
			fake.Script(sessToolReply("b1", "bash", groupCommand(pidFile)))
			a := startAgent(env())
			a.initialize()
			sid := a.newSession(cwd)
			p := a.prompt(sid, "run")
			a.answer(a.serverRequest("session/request_permission", 0)["id"], sessAllow("allow_once"))
			pgid := waitPGID(pidFile)
			start := time.Now()
			Expect(a.cmd.Process.Signal(sig)).To(Succeed())
			Expect(a.exitWithin(5*time.Second)).To(Succeed(), "exit status; stderr:\n%s", a.stderr)
			GinkgoWriter.Printf("%v → exit 0 in %v\n", sig, time.Since(start))
			Expect(procgroup.Alive(pgid)).To(BeFalse(), "the bash group outlived the server")
			Expect(a.result(p)["stopReason"]).To(Equal("cancelled"))
			a.expectCleanWire()
		},
		Entry("SIGINT", syscall.SIGINT),
		Entry("SIGTERM", syscall.SIGTERM),
		Entry("SIGHUP", syscall.SIGHUP),
	)

	It("stdio: SIGINT keeps the partial answer of the interrupted turn", func() {
		fake.Script(llmtest.Reply{Text: "the partial answer is kept", Hang: true, AfterChunks: 4})
		a := startAgent(env())
		a.initialize()
		sid := a.newSession(cwd)
		p := a.prompt(sid, "talk")
		a.waitFor("first chunk", isChunk)
		Expect(a.cmd.Process.Signal(syscall.SIGINT)).To(Succeed())
		Expect(a.exitWithin(5 * time.Second)).To(Succeed())
		Expect(a.result(p)["stopReason"]).To(Equal("cancelled"))
		var seen strings.Builder
		for _, u := range a.updatesBefore(p) {
			if u["sessionUpdate"] == "agent_message_chunk" {
				seen.WriteString(u["content"].(map[string]any)["text"].(string))
			}
		}
		Expect(seen.Len()).To(BeNumerically(">", 0))

		b := startAgent(env())
		b.initialize()
		from := b.mark()
		load := b.request("session/load", loadParams(sid, cwd))
		b.result(load)
		Expect(replayTexts(b, sid, from, load)).To(Equal([]string{"user_: talk", "agent: " + seen.String()}))
		b.finish()
	})

	It("HTTP: a client that vanishes mid-tool has its turn and its bash ended (IAC_CODE_DETACHED_TURN_MAX=0)", func() {
		pidFile := filepath.Join(cwd, "bash.pid")
		fake.Script(sessToolReply("b1", "bash", map[string]any{
			"command": "echo $$ > " + pidFile + "; while :; do echo tick; sleep 0.1; done"}))
		a := startHTTPAgent(env("IAC_CODE_HTTP_REPLAY_MAX_AGE=1s", "IAC_CODE_DETACHED_TURN_MAX=0"), "")
		conn := a.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1})).header.Get("Acp-Connection-Id")
		s := a.stream(conn)
		a.accepted(conn, jrpc(2, "session/new", map[string]any{"cwd": cwd}))
		evs := s.until("session", respTo(2))
		sid := evs[len(evs)-1].msg["result"].(map[string]any)["sessionId"]
		a.accepted(conn, jrpc(3, "session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))
		a.accepted(conn, jrpc(4, "session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": "run"}}}))
		pgid := waitPGID(pidFile)
		s.until("bash output", func(m map[string]any) bool {
			u := updateOf(m)
			return u != nil && u["sessionUpdate"] == "tool_call_update" && u["status"] == "in_progress"
		})

		By("the client goes away without DELETE")
		s.cancel()
		s.resp.Body.Close()
		took := groupGoneWithin(pgid, 15*time.Second)
		GinkgoWriter.Printf("client gone → bash group gone in %v (replay window 1 s)\n", took)
		Eventually(func() string {
			r, err := a.client.Get(a.base + "/metrics")
			if err != nil {
				return ""
			}
			defer r.Body.Close()
			b, _ := io.ReadAll(r.Body)
			return string(b)
		}, 5*time.Second).Should(ContainSubstring("iaccode_running_turns 0"))
		Expect(a.check.Violations()).To(BeEmpty())
		a.sigterm(10 * time.Second)
	})
})

// starveDescriptors lowers pid's soft descriptor limit to its lowest free
// descriptor number, so every open, socket or pipe there fails with EMFILE
// until the returned func puts the limit back.
func starveDescriptors(pid int) (restore func()) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	Expect(err).NotTo(HaveOccurred())
	open := map[uint64]bool{}
	for _, e := range ents {
		fd, err := strconv.ParseUint(e.Name(), 10, 64)
		Expect(err).NotTo(HaveOccurred())
		open[fd] = true
	}
	var free uint64
	for open[free] {
		free++
	}
	var old unix.Rlimit
	Expect(unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old)).To(Succeed())
	Expect(unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: free, Max: old.Max}, nil)).To(Succeed())
	return func() {
		Expect(unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil)).To(Succeed())
	}
}
