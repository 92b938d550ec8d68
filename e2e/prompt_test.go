package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// promptRun is `iac-code prompt` run to its end.
type promptRun struct {
	code           int
	stdout, stderr string
}

// exitCode waits for cmd and returns its exit status.
func exitCode(cmd *exec.Cmd) int {
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	Expect(err).NotTo(HaveOccurred())
	return 0
}

// runPrompt runs the terminal client without a terminal: its own session
// (no controlling terminal, so /dev/tty cannot be opened), stdin as given.
func runPrompt(env []string, cwd, stdin string, args ...string) promptRun {
	cmd := exec.Command(binPath, append([]string{"prompt"}, args...)...)
	cmd.Env, cmd.Dir = env, cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	Expect(cmd.Start()).To(Succeed())
	done := make(chan int, 1)
	go func() { done <- exitCode(cmd) }()
	var code int
	Eventually(done, 60*time.Second).Should(Receive(&code))
	return promptRun{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// ttyPrompt is `iac-code prompt` on a pseudo-terminal: stdin, stdout and
// stderr are the terminal, and so is its controlling terminal.
type ttyPrompt struct {
	cmd    *exec.Cmd
	master *os.File
	screen *syncBuffer
	done   chan int
}

func startTTYPrompt(env []string, cwd string, args ...string) *ttyPrompt {
	return startTTY(env, cwd, append([]string{"prompt"}, args...)...)
}

// startTTY runs the server binary with args in a pseudo-terminal.
func startTTY(env []string, cwd string, args ...string) *ttyPrompt {
	cmd := exec.Command(binPath, args...)
	cmd.Env, cmd.Dir = env, cwd
	master, err := pty.Start(cmd)
	Expect(err).NotTo(HaveOccurred())
	t := &ttyPrompt{cmd: cmd, master: master, screen: &syncBuffer{}, done: make(chan int, 1)}
	go func() { _, _ = io.Copy(t.screen, master) }()
	go func() { t.done <- exitCode(cmd) }()
	DeferCleanup(func() {
		_ = cmd.Process.Kill()
		_ = master.Close()
	})
	return t
}

func (t *ttyPrompt) waitFor(text string) {
	Eventually(t.screen.String, 30*time.Second, 10*time.Millisecond).Should(ContainSubstring(text))
}

func (t *ttyPrompt) exit() int {
	var code int
	Eventually(t.done, 60*time.Second).Should(Receive(&code))
	GinkgoWriter.Printf("screen:\n%s\n", t.screen.String())
	return code
}

var _ = Describe("iac-code prompt, the terminal client", Label("e2e", "editor"), func() {
	var (
		fake *llmtest.Server
		cwd  string
		env  []string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
		env = agentEnv(fake, "IAC_CODE_LOG_LEVEL=") // the command's own default: warnings only
	})
	write := func(id string) llmtest.Reply {
		return toolCallReply(id, "write_file", map[string]any{"path": "hello.txt", "content": "hi\n"})
	}

	It("on a terminal: streams the answer and tool calls, asks permission, the answer o allows once", func() {
		fake.Script(write("w1"), llmtest.Reply{Text: "Wrote hello.txt for you."})
		t := startTTYPrompt(env, cwd, "write hello")
		t.waitFor("Allow Write hello.txt?")
		t.waitFor("[o]nce, [a]lways, [r]eject: ")
		_, err := t.master.Write([]byte("o\n"))
		Expect(err).NotTo(HaveOccurred())
		Expect(t.exit()).To(Equal(0))
		Expect(os.ReadFile(filepath.Join(cwd, "hello.txt"))).To(Equal([]byte("hi\n")))
		screen := t.screen.String()
		Expect(screen).To(ContainSubstring("● Write hello.txt"))
		Expect(screen).To(ContainSubstring("✓ Write hello.txt"))
		Expect(screen).To(ContainSubstring("Wrote hello.txt for you."))
		Expect(screen).To(MatchRegexp(`session [0-9a-f-]{36} \(continue it with --session`))
		Expect(screen).NotTo(ContainSubstring(`"level"`)) // no JSON log lines in the user's terminal
	})

	It("on a terminal: Ctrl-C cancels the turn (exit 130), and --session continues it", func() {
		fake.Script(llmtest.Reply{Text: "counting one two three four", Hang: true, AfterChunks: 2}, llmtest.Reply{Text: "resumed"})
		t := startTTYPrompt(env, cwd, "count slowly")
		t.waitFor("counting")
		_, err := t.master.Write([]byte{3}) // the terminal's interrupt character: SIGINT to the foreground group
		Expect(err).NotTo(HaveOccurred())
		Expect(t.exit()).To(Equal(130))
		Expect(t.screen.String()).To(ContainSubstring("cancelling"))
		Expect(t.screen.String()).To(ContainSubstring("[stopped: cancelled]"))
		sid := regexpSession(t.screen.String())

		run := runPrompt(env, GinkgoT().TempDir(), "", "--session", sid, "go on")
		Expect(run.code).To(Equal(0), run.stderr)
		Expect(run.stdout).To(Equal("resumed\n"))
		msgs := fake.Requests()[1].Chat.Messages
		Expect(msgs[len(msgs)-3].Text()).To(Equal("count slowly"))
		Expect(msgs[len(msgs)-2].Text()).To(HavePrefix("counting"))
		Expect(msgs[len(msgs)-1].Text()).To(Equal("go on"))
	})

	It("without a terminal: reads the prompt on stdin, rejects permission requests, keeps stdout for the answer", func() {
		fake.Script(write("w1"), llmtest.Reply{Text: "Could not write."})
		run := runPrompt(env, cwd, "write hello\n")
		Expect(run.code).To(Equal(0), run.stderr)
		Expect(filepath.Join(cwd, "hello.txt")).NotTo(BeAnExistingFile())
		Expect(run.stdout).To(Equal("Could not write.\n"))
		Expect(run.stderr).To(ContainSubstring("rejected: Write hello.txt (no terminal to ask on; --yes approves)"))
		Expect(toolResultFor(fake, "w1")).To(Equal("Permission denied."))
		Expect(fake.Requests()[0].Chat.Messages[1].Text()).To(Equal("write hello\n"))
	})

	It("--yes approves; --json prints the raw updates, then the answer; the stop reason sets the exit code", func() {
		fake.Script(write("w1"), llmtest.Reply{Text: "done", FinishReason: "length"})
		run := runPrompt(env, cwd, "", "--yes", "--json", "write hello")
		Expect(run.code).To(Equal(3), run.stderr) // max_tokens
		Expect(os.ReadFile(filepath.Join(cwd, "hello.txt"))).To(Equal([]byte("hi\n")))
		var kinds []string
		sc := bufio.NewScanner(strings.NewReader(run.stdout))
		var last map[string]any
		for sc.Scan() {
			var m map[string]any
			Expect(json.Unmarshal(sc.Bytes(), &m)).To(Succeed(), sc.Text())
			if m["method"] == "session/update" {
				kinds = append(kinds, m["params"].(map[string]any)["update"].(map[string]any)["sessionUpdate"].(string))
			}
			last = m
		}
		Expect(kinds).To(ContainElements("tool_call", "tool_call_update", "agent_message_chunk"))
		Expect(last).To(HaveKeyWithValue("stopReason", "max_tokens"))
	})

	It("--mode sets the session mode", func() {
		fake.Script(write("w1"), llmtest.Reply{Text: "not in plan mode"})
		run := runPrompt(env, cwd, "", "--yes", "--mode", "plan", "write hello")
		Expect(run.code).To(Equal(0), run.stderr)
		Expect(filepath.Join(cwd, "hello.txt")).NotTo(BeAnExistingFile())
		var offered []string
		for _, t := range fake.Requests()[0].Chat.Tools {
			offered = append(offered, t.Function.Name)
		}
		Expect(offered).To(ContainElement("read_file"))
		Expect(offered).NotTo(ContainElement("write_file")) // plan mode: read-only tools only
	})

	It("says what is wrong with bad input and exits 2", func() {
		run := runPrompt(env, cwd, "")
		Expect(run.code).To(Equal(2))
		Expect(run.stderr).To(ContainSubstring("no prompt text"))
	})
})

func regexpSession(screen string) string {
	i := strings.Index(screen, "continue it with --session ")
	Expect(i).To(BeNumerically(">=", 0), screen)
	rest := screen[i+len("continue it with --session "):]
	return rest[:36]
}
