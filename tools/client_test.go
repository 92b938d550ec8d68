//go:build unix

package tools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
)

// editor is an in-memory tools.Client: reads see its unsaved buffers
// (falling back to the disk), writes go to the buffers only, terminals run
// real commands. Every call is recorded in order.
type editor struct {
	caps tools.ClientCaps

	mu      sync.Mutex
	buffers map[string]string
	calls   []string
	fail    map[string]error // method → error answered
	terms   map[string]*fakeTerm
	nextID  int
	// truncated makes terminal/output say the start was dropped.
	truncated bool
}

type fakeTerm struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan struct{}
	exit tools.TerminalExit
}

func newEditor(caps tools.ClientCaps) *editor {
	return &editor{caps: caps, buffers: map[string]string{}, fail: map[string]error{}, terms: map[string]*fakeTerm{}}
}

func (e *editor) record(method, detail string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, strings.TrimSpace(method+" "+detail))
	return e.fail[method]
}

func (e *editor) log() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.calls...)
}

func (e *editor) Caps() tools.ClientCaps { return e.caps }

func (e *editor) ReadTextFile(_ context.Context, path string, line, limit int) (string, error) {
	if err := e.record("read", fmt.Sprintf("%s %d %d", path, line, limit)); err != nil {
		return "", err
	}
	e.mu.Lock()
	text, ok := e.buffers[path]
	e.mu.Unlock()
	if !ok {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", &tools.ClientError{Method: "fs/read_text_file", Code: -32002, Message: "not found"}
		}
		text = string(data)
	}
	if line > 0 || limit > 0 {
		lines := strings.SplitAfter(text, "\n")
		from := max(line-1, 0)
		if from > len(lines) {
			from = len(lines)
		}
		to := len(lines)
		if limit > 0 && from+limit < to {
			to = from + limit
		}
		text = strings.Join(lines[from:to], "")
	}
	return text, nil
}

func (e *editor) WriteTextFile(_ context.Context, path, content string) error {
	if err := e.record("write", path); err != nil {
		return err
	}
	e.mu.Lock()
	e.buffers[path] = content
	e.mu.Unlock()
	return nil
}

func (e *editor) CreateTerminal(_ context.Context, req tools.TerminalRequest) (string, error) {
	if err := e.record("create", req.Command+" "+strings.Join(req.Args, " ")); err != nil {
		return "", err
	}
	cmd := exec.Command(req.Command, req.Args...)
	cmd.Dir = req.Cwd
	t := &fakeTerm{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &t.out, &t.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.exit.Signal = "SIG" + strings.ToUpper(strings.TrimPrefix(unixSignalName(ws.Signal()), "SIG"))
			} else {
				code := ee.ExitCode()
				t.exit.ExitCode = &code
			}
		} else {
			code := 0
			t.exit.ExitCode = &code
		}
		close(t.done)
	}()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextID++
	id := fmt.Sprintf("term-%d", e.nextID)
	e.terms[id] = t
	return id, nil
}

func unixSignalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	return s.String()
}

func (e *editor) term(id string) *fakeTerm {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.terms[id]
}

func (e *editor) WaitForTerminalExit(ctx context.Context, id string) (tools.TerminalExit, error) {
	_ = e.record("wait", id)
	t := e.term(id)
	select {
	case <-t.done:
		return t.exit, nil
	case <-ctx.Done():
		return tools.TerminalExit{}, ctx.Err()
	}
}

func (e *editor) TerminalOutput(_ context.Context, id string) (tools.TerminalOutput, error) {
	if err := e.record("output", id); err != nil {
		return tools.TerminalOutput{}, err
	}
	t := e.term(id)
	out := tools.TerminalOutput{Output: t.out.String(), Truncated: e.truncated}
	select {
	case <-t.done:
		out.Exit = &t.exit
	default:
	}
	return out, nil
}

func (e *editor) KillTerminal(_ context.Context, id string) error {
	_ = e.record("kill", id)
	_ = syscall.Kill(-e.term(id).cmd.Process.Pid, syscall.SIGTERM)
	return nil
}

func (e *editor) ReleaseTerminal(_ context.Context, id string) error {
	_ = e.record("release", id)
	t := e.term(id)
	_ = syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
	<-t.done
	return nil
}

// via prepares and runs a tool call through the editor.
func via(ctx context.Context, t tools.Tool, env *tools.Env, ed tools.Client, v any) tools.Result {
	b, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	c, err := t.Prepare(env, b)
	Expect(err).NotTo(HaveOccurred())
	cc, ok := c.(tools.ClientCall)
	Expect(ok).To(BeTrue(), "%T is not a ClientCall", c)
	return cc.RunVia(ctx, ed, nil)
}

var _ = Describe("calls through the client", func() {
	var (
		env  *tools.Env
		both tools.ClientCaps
	)
	BeforeEach(func() {
		env = tempEnv()
		writeFiles(env.Cwd, map[string]string{"a.txt": "disk 1\ndisk 2\ndisk 3\n"})
		both = tools.ClientCaps{ReadTextFile: true, WriteTextFile: true}
	})
	path := func(name string) string { return filepath.Join(env.Cwd, name) }

	It("read_file reads the editor's buffer, with line/limit for a range, numbered here", func() {
		ed := newEditor(both)
		ed.buffers[path("a.txt")] = "buf 1\nbuf 2\nbuf 3\nbuf 4\n"
		Expect(via(ctx(), tools.ReadFile{}, env, ed, map[string]any{"path": "a.txt"}).Output).
			To(Equal("     1\tbuf 1\n     2\tbuf 2\n     3\tbuf 3\n     4\tbuf 4\n"))
		Expect(via(ctx(), tools.ReadFile{}, env, ed, map[string]any{"path": "a.txt", "start_line": 2, "end_line": 3}).Output).
			To(Equal("     2\tbuf 2\n     3\tbuf 3\n"))
		Expect(via(ctx(), tools.ReadFile{}, env, ed, map[string]any{"path": "a.txt", "start_line": 9}).Output).
			To(Equal("start_line 9 is past the end of a.txt"))
		Expect(ed.log()).To(Equal([]string{"read " + path("a.txt") + " 0 0", "read " + path("a.txt") + " 2 2",
			"read " + path("a.txt") + " 9 0"}))
	})

	It("read_file asks the client for the resolved path, not the spelling of the input", func() {
		Expect(os.Mkdir(path("real"), 0o755)).To(Succeed())
		writeFiles(env.Cwd, map[string]string{"real/f.txt": "x\n"})
		Expect(os.Symlink("real", path("link"))).To(Succeed())
		ed := newEditor(both)
		via(ctx(), tools.ReadFile{}, env, ed, map[string]any{"path": "./link/../link/f.txt"})
		Expect(ed.log()).To(Equal([]string{"read " + path("real/f.txt") + " 0 0"}))
	})

	It("a client error fails the call naming the path; nothing is read locally", func() {
		ed := newEditor(both)
		ed.fail["read"] = &tools.ClientError{Method: "fs/read_text_file", Code: -32603, Message: "editor refused"}
		res := via(ctx(), tools.ReadFile{}, env, ed, map[string]any{"path": "a.txt"})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(And(ContainSubstring("a.txt"), ContainSubstring("editor refused")))
		Expect(res.Output).NotTo(ContainSubstring("disk"))

		ed.fail = map[string]error{"write": errors.New("the editor did not answer")}
		res = via(ctx(), tools.WriteFile{}, env, ed, map[string]any{"path": "a.txt", "content": "new\n"})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(And(ContainSubstring("Cannot write a.txt"), ContainSubstring("did not answer")))
		Expect(os.ReadFile(path("a.txt"))).To(Equal([]byte("disk 1\ndisk 2\ndisk 3\n")))
	})

	It("write_file writes to the editor with the buffer as the diff's old text; the disk is untouched", func() {
		ed := newEditor(both)
		ed.buffers[path("a.txt")] = "unsaved\n"
		res := via(ctx(), tools.WriteFile{}, env, ed, map[string]any{"path": "a.txt", "content": "new\n"})
		Expect(res.IsError).To(BeFalse(), res.Output)
		Expect(*res.Diff.OldText).To(Equal("unsaved\n"))
		Expect(ed.buffers[path("a.txt")]).To(Equal("new\n"))
		Expect(os.ReadFile(path("a.txt"))).To(Equal([]byte("disk 1\ndisk 2\ndisk 3\n")))

		res = via(ctx(), tools.WriteFile{}, env, ed, map[string]any{"path": "fresh.txt", "content": "hi\n"})
		Expect(res.Output).To(HavePrefix("Created fresh.txt"))
		Expect(res.Diff.OldText).To(BeNil())
		Expect(path("fresh.txt")).NotTo(BeAnExistingFile())
	})

	It("edit_file edits the editor's buffer when it can read and write", func() {
		ed := newEditor(both)
		ed.buffers[path("a.txt")] = "one\ntwo\n"
		res := via(ctx(), tools.EditFile{}, env, ed, map[string]any{"path": "a.txt", "old_string": "two", "new_string": "2"})
		Expect(res.IsError).To(BeFalse(), res.Output)
		Expect(ed.buffers[path("a.txt")]).To(Equal("one\n2\n"))
		Expect(*res.Diff.OldText).To(Equal("one\ntwo\n"))
		Expect(os.ReadFile(path("a.txt"))).To(Equal([]byte("disk 1\ndisk 2\ndisk 3\n")))
	})

	It("with read only: reads go to the editor, writes and edits stay local (old text from the disk)", func() {
		ed := newEditor(tools.ClientCaps{ReadTextFile: true})
		ed.buffers[path("a.txt")] = "unsaved\n"
		res := via(ctx(), tools.WriteFile{}, env, ed, map[string]any{"path": "a.txt", "content": "new\n"})
		Expect(*res.Diff.OldText).To(Equal("disk 1\ndisk 2\ndisk 3\n"))
		Expect(os.ReadFile(path("a.txt"))).To(Equal([]byte("new\n")))
		res = via(ctx(), tools.EditFile{}, env, ed, map[string]any{"path": "a.txt", "old_string": "new", "new_string": "newer"})
		Expect(res.IsError).To(BeFalse(), res.Output)
		Expect(os.ReadFile(path("a.txt"))).To(Equal([]byte("newer\n")))
		Expect(ed.log()).To(BeEmpty())
	})

	It("with write only: reads and edits stay local, writes go to the editor (old text from the disk)", func() {
		ed := newEditor(tools.ClientCaps{WriteTextFile: true})
		ed.buffers[path("a.txt")] = "unsaved\n"
		Expect(via(ctx(), tools.ReadFile{}, env, ed, map[string]any{"path": "a.txt"}).Output).To(ContainSubstring("disk 1"))
		res := via(ctx(), tools.WriteFile{}, env, ed, map[string]any{"path": "a.txt", "content": "new\n"})
		Expect(*res.Diff.OldText).To(Equal("disk 1\ndisk 2\ndisk 3\n"))
		Expect(ed.buffers[path("a.txt")]).To(Equal("new\n"))
		res = via(ctx(), tools.EditFile{}, env, ed, map[string]any{"path": "a.txt", "old_string": "disk 2", "new_string": "two"})
		Expect(res.IsError).To(BeFalse(), res.Output)
		Expect(os.ReadFile(path("a.txt"))).To(Equal([]byte("disk 1\ntwo\ndisk 3\n")))
		Expect(ed.log()).To(Equal([]string{"write " + path("a.txt")}))
	})

	It("without terminal capability bash runs locally", func() {
		ed := newEditor(both)
		res := via(ctx(), tools.Bash{}, env, ed, map[string]any{"command": "echo local"})
		Expect(res.Output).To(ContainSubstring("[stdout]\nlocal"))
		Expect(ed.log()).To(BeEmpty())
	})

	Describe("bash in a client terminal", func() {
		var ed *editor
		BeforeEach(func() { ed = newEditor(tools.ClientCaps{Terminal: true}) })

		It("runs bash -c in the cwd: create, wait, output, release; the result reads like a local run", func() {
			res := via(ctx(), tools.Bash{}, env, ed, map[string]any{"command": "pwd; echo oops >&2; exit 3"})
			Expect(res.IsError).To(BeTrue())
			Expect(res.Output).To(Equal("[output]\n" + env.Cwd + "\noops\n[exit code: 3]"))
			Expect(res.Raw).To(And(HaveKeyWithValue("exitCode", 3), HaveKeyWithValue("terminalId", "term-1")))
			Expect(ed.log()).To(Equal([]string{"create bash -c pwd; echo oops >&2; exit 3", "wait term-1", "output term-1", "release term-1"}))
		})

		It("kills on timeout, then reads the output and releases once", func() {
			res := via(ctx(), tools.Bash{}, env, ed, map[string]any{"command": "echo started; sleep 30", "timeout": 0.3})
			Expect(res.IsError).To(BeTrue())
			Expect(res.Output).To(ContainSubstring("[output]\nstarted\n"))
			Expect(res.Output).To(ContainSubstring("[timed out after 300ms: the command was killed (terminal/kill)]"))
			Expect(res.Output).To(HaveSuffix("[exit code: 143 (killed by SIGTERM)]"))
			Expect(ed.log()).To(Equal([]string{"create bash -c echo started; sleep 30", "wait term-1", "kill term-1", "output term-1", "release term-1"}))
		})

		It("kills and releases once on cancel, without reading the output", func() {
			c, cancel := context.WithCancel(ctx())
			done := make(chan tools.Result, 1)
			go func() { done <- via(c, tools.Bash{}, env, ed, map[string]any{"command": "sleep 30"}) }()
			Eventually(ed.log).Should(ContainElement("wait term-1"))
			cancel()
			var res tools.Result
			Eventually(done, 5*time.Second).Should(Receive(&res))
			Expect(res.Raw).To(HaveKeyWithValue("cancelled", true))
			Expect(ed.log()).To(Equal([]string{"create bash -c sleep 30", "wait term-1", "kill term-1", "release term-1"}))
		})

		It("notes the client's truncation", func() {
			ed.truncated = true
			res := via(ctx(), tools.Bash{}, env, ed, map[string]any{"command": "echo tail"})
			Expect(res.Output).To(Equal("[output]\ntail\n[output truncated: the editor kept the last 10485760 bytes]\n[exit code: 0]"))
			Expect(res.Raw).To(HaveKeyWithValue("truncated", true))
		})

		It("reports a failed create without releasing anything", func() {
			ed.fail["create"] = &tools.ClientError{Method: "terminal/create", Code: -32603, Message: "no shell"}
			res := via(ctx(), tools.Bash{}, env, ed, map[string]any{"command": "true"})
			Expect(res.IsError).To(BeTrue())
			Expect(res.Output).To(ContainSubstring("no shell"))
			Expect(ed.log()).To(Equal([]string{"create bash -c true"}))
		})

		It("releases when reading the output fails", func() {
			ed.fail["output"] = errors.New("gone")
			res := via(ctx(), tools.Bash{}, env, ed, map[string]any{"command": "true"})
			Expect(res.IsError).To(BeTrue())
			Expect(ed.log()).To(Equal([]string{"create bash -c true", "wait term-1", "output term-1", "release term-1"}))
		})
	})
})
