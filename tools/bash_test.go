//go:build linux

package tools_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
)

// procState is the state letter of pid ("" when it does not exist).
func procState(pid int) (state string, pgrp int) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	pgrp, _ = strconv.Atoi(f[2])
	return f[0], pgrp
}

func pidAlive(pid int) bool {
	st, _ := procState(pid)
	return st != "" && st != "Z" && st != "X"
}

// groupMembers lists the live (non-zombie) processes of group pgid.
func groupMembers(pgid int) []int {
	if err := syscall.Kill(-pgid, 0); err == syscall.ESRCH {
		return nil
	}
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, pg := procState(pid); pg == pgid && st != "Z" && st != "X" && st != "" {
			out = append(out, pid)
		}
	}
	return out
}

func readPid(path string) int {
	var pid int
	Eventually(func() error {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err
	}).Should(Succeed())
	return pid
}

// pidIn is the pid written in path, 0 when there is none (yet).
func pidIn(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

func rawPid(res tools.Result) int {
	m, ok := res.Raw.(map[string]any)
	Expect(ok).To(BeTrue())
	return m["pid"].(int)
}

// progressLog records Progress calls.
type progressLog struct {
	mu    sync.Mutex
	texts []string
	times []time.Time
}

func (p *progressLog) fn(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.texts = append(p.texts, s)
	p.times = append(p.times, time.Now())
}

func (p *progressLog) joined() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.texts, "")
}

var _ = Describe("bash", func() {
	var env *tools.Env
	fast := tools.Bash{Limits: tools.Limits{BashKillGrace: 300 * time.Millisecond}}
	BeforeEach(func() { env = tempEnv() })

	It("returns stdout, stderr and the exit code in sections", func() {
		res := run(tools.Bash{}, env, map[string]any{"command": "echo out; echo err >&2; exit 3"})
		Expect(res.Output).To(Equal("[stdout]\nout\n[stderr]\nerr\n[exit code: 3]"))
		Expect(res.IsError).To(BeTrue())
		Expect(res.Raw).To(HaveKeyWithValue("exitCode", 3))
		Expect(res.Raw).To(HaveKeyWithValue("timedOut", false))
	})

	It("runs in Env.Cwd with stdin from /dev/null", func() {
		res := run(tools.Bash{}, env, map[string]any{"command": `pwd; read x; echo "read=$?"`})
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).To(Equal("[stdout]\n" + env.Cwd + "\nread=1\n[exit code: 0]"))
		res = run(tools.Bash{}, env, map[string]any{"command": "true"})
		Expect(res.Output).To(Equal("[no output]\n[exit code: 0]"))
	})

	It("reports death by signal", func() {
		res := run(tools.Bash{}, env, map[string]any{"command": "kill -KILL $$"})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(ContainSubstring("[exit code: 137 (killed by SIGKILL)]"))
	})

	It("kills the whole process group on timeout", func() {
		// The timeout must fire after the command has built its tree (a
		// background job, and a grandchild under a second bash), and how
		// long that takes depends on the machine's load, not on the tool: a
		// run killed before the grandchild wrote its pid proves less (under
		// three busy loops and a build, 1 run in 30 at 0.5 s), so it is run
		// again with twice the timeout. Every run checks the group is gone.
		for timeout := 0.5; ; timeout *= 2 {
			for _, f := range []string{"bg.pid", "gc.pid"} {
				Expect(os.RemoveAll(filepath.Join(env.Cwd, f))).To(Succeed())
			}
			budget := time.Duration(timeout * float64(time.Second))
			start := time.Now()
			res := run(fast, env, map[string]any{
				"command": `sleep 60 & echo $! > bg.pid; bash -c 'sleep 60 & echo $! > gc.pid; wait' & sleep 60`,
				"timeout": timeout,
			})
			Expect(time.Since(start)).To(BeNumerically("<", budget+4500*time.Millisecond))
			Expect(res.IsError).To(BeTrue())
			Expect(res.Output).To(ContainSubstring("timed out after " + budget.String()))
			Expect(res.Raw).To(HaveKeyWithValue("timedOut", true))
			pid := rawPid(res)
			Expect(groupMembers(pid)).To(BeEmpty())
			Expect(pidAlive(pid)).To(BeFalse())
			// Nothing of the group is left to write a pid file now.
			bg, gc := pidIn(filepath.Join(env.Cwd, "bg.pid")), pidIn(filepath.Join(env.Cwd, "gc.pid"))
			for _, p := range []int{bg, gc} {
				if p != 0 {
					Expect(pidAlive(p)).To(BeFalse())
				}
			}
			if bg != 0 && gc != 0 {
				return
			}
			Expect(timeout).To(BeNumerically("<", 8), "the command's tree was not built within %v", budget)
			GinkgoWriter.Printf("the grandchild had not started within %v: again with twice the timeout\n", budget)
		}
	})

	It("escalates to SIGKILL when SIGTERM is ignored", func() {
		start := time.Now()
		res := run(fast, env, map[string]any{
			"command": `trap '' TERM; echo $$ > main.pid; while true; do sleep 0.05; done`,
			"timeout": 0.3,
		})
		Expect(time.Since(start)).To(BeNumerically("<", 4*time.Second))
		Expect(res.Raw).To(HaveKeyWithValue("timedOut", true))
		Expect(res.Output).To(ContainSubstring("killed by SIGKILL"))
		Expect(groupMembers(rawPid(res))).To(BeEmpty())
	})

	It("kills the whole process group when ctx is cancelled", func() {
		c, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		start := time.Now()
		res := runCtx(c, fast, env, map[string]any{"command": `sleep 60 & echo $! > bg.pid; sleep 60`})
		Expect(time.Since(start)).To(BeNumerically("<", 4*time.Second))
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(ContainSubstring("cancelled"))
		Expect(res.Raw).To(HaveKeyWithValue("cancelled", true))
		Expect(groupMembers(rawPid(res))).To(BeEmpty())
		Expect(pidAlive(readPid(filepath.Join(env.Cwd, "bg.pid")))).To(BeFalse())
	})

	It("ends background jobs left behind by a command that exits normally", func() {
		start := time.Now()
		res := run(fast, env, map[string]any{"command": `sleep 60 & echo $! > bg.pid; echo done`})
		Expect(time.Since(start)).To(BeNumerically("<", 4*time.Second))
		Expect(res.Output).To(Equal("[stdout]\ndone\n[exit code: 0]"))
		Expect(groupMembers(rawPid(res))).To(BeEmpty())
		Expect(pidAlive(readPid(filepath.Join(env.Cwd, "bg.pid")))).To(BeFalse())
	})

	It("streams only new output through Progress, at most ~10 calls per second", func() {
		var log progressLog
		start := time.Now()
		res := runProgress(ctx(), tools.Bash{}, env, map[string]any{
			"command": `for i in $(seq 1 150); do echo "line $i"; sleep 0.01; done`,
		}, log.fn)
		elapsed := time.Since(start)
		Expect(res.IsError).To(BeFalse())
		var want strings.Builder
		for i := 1; i <= 150; i++ {
			want.WriteString("line " + strconv.Itoa(i) + "\n")
		}
		Expect(elapsed).To(BeNumerically(">", 1400*time.Millisecond))
		Expect(log.joined()).To(Equal(want.String()))
		Expect(len(log.texts)).To(BeNumerically(">=", 5))
		Expect(float64(len(log.texts))).To(BeNumerically("<=", elapsed.Seconds()*10+1))
		for i := 1; i < len(log.times); i++ {
			Expect(log.times[i].Sub(log.times[i-1])).To(BeNumerically(">=", 90*time.Millisecond))
		}
	})

	It("delivers 200,000 lines through Progress without resending", func() {
		var log progressLog
		res := runProgress(ctx(), tools.Bash{}, env, map[string]any{"command": "seq 1 200000"}, log.fn)
		Expect(res.IsError).To(BeFalse())
		var want strings.Builder
		for i := 1; i <= 200000; i++ {
			want.WriteString(strconv.Itoa(i))
			want.WriteByte('\n')
		}
		got := log.joined()
		Expect(len(got)).To(BeNumerically("<", 3*want.Len()))
		Expect(got == want.String()).To(BeTrue(), "progress text differs from the output")
		Expect(res.Output).To(HavePrefix("[stdout]\n1\n2\n"))
		Expect(res.Output).To(HaveSuffix("199999\n200000\n[exit code: 0]"))
	})

	It("never splits a UTF-8 sequence across Progress calls", func() {
		var log progressLog
		res := runProgress(ctx(), tools.Bash{}, env, map[string]any{"command": `printf 'caf\xc3'; sleep 0.3; printf '\xa9!\n'`}, log.fn)
		Expect(res.Output).To(ContainSubstring("café!"))
		Expect(log.joined()).To(Equal("café!\n"))
		for _, t := range log.texts {
			Expect(utf8.ValidString(t)).To(BeTrue())
		}
	})

	It("keeps the head and tail of huge output", func() {
		b := tools.Bash{Limits: tools.Limits{BashOutputBytes: 1000}}
		res := run(b, env, map[string]any{"command": "seq 1 100000"})
		Expect(res.Output).To(HavePrefix("[stdout]\n1\n2\n"))
		Expect(res.Output).To(ContainSubstring("bytes omitted"))
		Expect(res.Output).To(HaveSuffix("100000\n[exit code: 0]"))
		Expect(len(res.Output)).To(BeNumerically("<", 1200))
	})
})
