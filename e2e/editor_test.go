package e2e

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// editorReport is the "editor" part of the Node harness report.
type editorReport struct {
	Capabilities map[string]any `json:"capabilities"`
	Requests     []struct {
		Method string         `json:"method"`
		Params map[string]any `json:"params"`
		Active bool           `json:"active"`
	} `json:"requests"`
	Buffers   map[string]string `json:"buffers"`
	Terminals []struct {
		ID        string `json:"id"`
		Creates   int    `json:"creates"`
		Releases  int    `json:"releases"`
		Kills     int    `json:"kills"`
		Outputs   int    `json:"outputs"`
		Waits     int    `json:"waits"`
		Truncated bool   `json:"truncated"`
	} `json:"terminals"`
}

// runEditor runs the harness's editor scenario over stdio and decodes its
// editor report.
func runEditor(env []string, cwd string, extra ...string) (tsRun, editorReport) {
	return runEditorArgs(env, stdioArgs("editor", cwd, extra...))
}

func runEditorArgs(env []string, args []string) (tsRun, editorReport) {
	var raw struct {
		Editor editorReport `json:"editor"`
	}
	run := runTSClient(env, args...)
	b, err := json.Marshal(run.Raw)
	Expect(err).NotTo(HaveOccurred())
	Expect(json.Unmarshal(b, &raw)).To(Succeed())
	return run, raw.Editor
}

func (r editorReport) methods() []string {
	var out []string
	for _, q := range r.Requests {
		out = append(out, q.Method)
	}
	return out
}

var _ = Describe("an editor client's files and terminal (TypeScript SDK)", Label("e2e", "node", "editor"), func() {
	var (
		fake *llmtest.Server
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		var err error
		cwd, err = filepath.EvalSymlinks(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(cwd, "a.txt"), []byte("disk 1\ndisk 2\ndisk 3\n"), 0o644)).To(Succeed())
	})
	disk := func(name string) string {
		b, err := os.ReadFile(filepath.Join(cwd, name))
		if err != nil {
			return "<absent>"
		}
		return string(b)
	}
	overlay := `{"a.txt":"buf 1\nbuf 2\nbuf 3\nbuf 4\n"}`
	// The model reads a.txt whole and in part, writes b.txt, edits a.txt.
	scriptFiles := func() {
		fake.Script(
			toolCallReply("r1", "read_file", map[string]any{"path": "a.txt"}),
			toolCallReply("r2", "read_file", map[string]any{"path": "a.txt", "start_line": 2, "end_line": 3}),
			toolCallReply("w1", "write_file", map[string]any{"path": "b.txt", "content": "new b\n"}),
			toolCallReply("e1", "edit_file", map[string]any{"path": "a.txt", "old_string": "2\n", "new_string": "two\n"}),
			llmtest.Reply{Text: "done"})
	}

	It("reads the unsaved buffers (line/limit for a range) and writes and edits them, never the disk", func() {
		scriptFiles()
		run, ed := runEditor(agentEnv(fake), cwd, "--client-fs", "read,write", "--overlay", overlay)
		Expect(run.Result["prompts"]).To(ConsistOf(HaveKeyWithValue("stopReason", "end_turn")))

		Expect(toolResultFor(fake, "r1")).To(Equal("     1\tbuf 1\n     2\tbuf 2\n     3\tbuf 3\n     4\tbuf 4\n"))
		Expect(toolResultFor(fake, "r2")).To(Equal("     2\tbuf 2\n     3\tbuf 3\n"))
		a, b := filepath.Join(cwd, "a.txt"), filepath.Join(cwd, "b.txt")
		// The write and the edit each read the buffer twice: for the diff of
		// their permission request (what the user approves is the buffer's
		// change), then to run.
		Expect(ed.methods()).To(Equal([]string{"fs/read_text_file", "fs/read_text_file",
			"fs/read_text_file", "fs/read_text_file", "fs/write_text_file",
			"fs/read_text_file", "fs/read_text_file", "fs/write_text_file"}))
		Expect(ed.Requests[0].Params).To(Equal(map[string]any{"sessionId": run.Result["sessionId"], "path": a}))
		Expect(ed.Requests[1].Params).To(HaveKeyWithValue("line", 2.0))
		Expect(ed.Requests[1].Params).To(HaveKeyWithValue("limit", 2.0))
		Expect(ed.Requests[2].Params).To(Equal(map[string]any{"sessionId": run.Result["sessionId"], "path": b}))
		Expect(ed.Requests[4].Params).To(Equal(map[string]any{"sessionId": run.Result["sessionId"], "path": b, "content": "new b\n"}))
		Expect(ed.Requests[5].Params).To(Equal(map[string]any{"sessionId": run.Result["sessionId"], "path": a}))

		Expect(ed.Buffers).To(Equal(map[string]string{"a.txt": "buf 1\nbuf two\nbuf 3\nbuf 4\n", "b.txt": "new b\n"}))
		Expect(disk("a.txt")).To(Equal("disk 1\ndisk 2\ndisk 3\n"))
		Expect(disk("b.txt")).To(Equal("<absent>"))

		// The diffs the user reviews are of the buffers.
		edit := lastOf(toolUpdates(run.Updates, "e1"))
		Expect(edit["content"]).To(ContainElement(And(HaveKeyWithValue("type", "diff"), HaveKeyWithValue("path", a),
			HaveKeyWithValue("oldText", "buf 1\nbuf 2\nbuf 3\nbuf 4\n"), HaveKeyWithValue("newText", "buf 1\nbuf two\nbuf 3\nbuf 4\n"))))
		// And so are the diffs of the permission requests, before the runs.
		asked := map[string]any{}
		for _, p := range run.PermissionRequests {
			tc := p["params"].(map[string]any)["toolCall"].(map[string]any)
			asked[tc["toolCallId"].(string)] = tc["content"]
		}
		Expect(asked["e1"]).To(ContainElement(And(HaveKeyWithValue("type", "diff"), HaveKeyWithValue("path", a),
			HaveKeyWithValue("oldText", "buf 1\nbuf 2\nbuf 3\nbuf 4\n"), HaveKeyWithValue("newText", "buf 1\nbuf two\nbuf 3\nbuf 4\n"))))
		Expect(asked["w1"]).To(ContainElement(And(HaveKeyWithValue("type", "diff"), HaveKeyWithValue("path", b),
			Not(HaveKey("oldText")), HaveKeyWithValue("newText", "new b\n"))))
		write := lastOf(toolUpdates(run.Updates, "w1"))
		Expect(write["content"]).To(ContainElement(And(HaveKeyWithValue("type", "diff"), HaveKeyWithValue("path", b),
			Not(HaveKey("oldText")), HaveKeyWithValue("newText", "new b\n"))))
	})

	It("sends no fs/* or terminal/* request to a client that advertises neither", func() {
		scriptFiles()
		run, ed := runEditor(agentEnv(fake), cwd, "--overlay", overlay)
		Expect(run.Result["prompts"]).To(ConsistOf(HaveKeyWithValue("stopReason", "end_turn")))
		Expect(ed.Requests).To(BeEmpty())
		Expect(toolResultFor(fake, "r1")).To(ContainSubstring("disk 1"))
		Expect(disk("a.txt")).To(Equal("disk 1\ndisk two\ndisk 3\n"))
		Expect(disk("b.txt")).To(Equal("new b\n"))
	})

	It("with readTextFile only: reads go to the editor; writes and edits stay local", func() {
		scriptFiles()
		run, ed := runEditor(agentEnv(fake), cwd, "--client-fs", "read", "--overlay", overlay)
		Expect(run.Result["prompts"]).To(ConsistOf(HaveKeyWithValue("stopReason", "end_turn")))
		Expect(ed.methods()).To(Equal([]string{"fs/read_text_file", "fs/read_text_file"}))
		Expect(toolResultFor(fake, "r1")).To(ContainSubstring("buf 1"))
		Expect(ed.Buffers).To(Equal(map[string]string{"a.txt": "buf 1\nbuf 2\nbuf 3\nbuf 4\n"}))
		Expect(disk("b.txt")).To(Equal("new b\n"))
		Expect(disk("a.txt")).To(Equal("disk 1\ndisk two\ndisk 3\n"))
	})

	It("turns a client error into a tool error naming the path, with no local read", func() {
		fake.Script(toolCallReply("r1", "read_file", map[string]any{"path": "a.txt"}), llmtest.Reply{Text: "ok"})
		run, _ := runEditor(agentEnv(fake), cwd, "--client-fs", "read,write", "--client-fail", "fs/read_text_file")
		Expect(lastOf(toolUpdates(run.Updates, "r1"))).To(HaveKeyWithValue("status", "failed"))
		Expect(toolResultFor(fake, "r1")).To(Equal("Cannot read a.txt through the editor: " +
			"the editor answered fs/read_text_file with error -32603: editor refused fs/read_text_file"))
	})

	Describe("bash in the editor's terminal", func() {
		terminalOrder := func(ed editorReport) []string {
			var out []string
			for _, m := range ed.methods() {
				if strings.HasPrefix(m, "terminal/") {
					out = append(out, m)
				}
			}
			return out
		}
		expectReleasedOnce := func(ed editorReport) {
			Expect(ed.Terminals).NotTo(BeEmpty())
			for _, t := range ed.Terminals {
				Expect(t.Releases).To(Equal(t.Creates), "terminal %s", t.ID)
			}
			for _, r := range ed.Requests {
				Expect(r.Active).To(BeTrue(), "%s after the prompt's answer", r.Method)
			}
		}

		It("creates, shows, waits, reads and releases; the model reads what a local run gives", func() {
			fake.Script(toolCallReply("b1", "bash", map[string]any{"command": "pwd; echo oops >&2; exit 3"}), llmtest.Reply{Text: "ok"})
			run, ed := runEditor(agentEnv(fake), cwd, "--client-terminal")
			Expect(run.Result["prompts"]).To(ConsistOf(HaveKeyWithValue("stopReason", "end_turn")))
			Expect(terminalOrder(ed)).To(Equal([]string{"terminal/create", "terminal/wait_for_exit", "terminal/output", "terminal/release"}))
			Expect(ed.Requests[0].Params).To(And(HaveKeyWithValue("command", "bash"),
				HaveKeyWithValue("args", []any{"-c", "pwd; echo oops >&2; exit 3"}), HaveKeyWithValue("cwd", cwd),
				HaveKeyWithValue("outputByteLimit", float64(10<<20))))
			expectReleasedOnce(ed)
			ups := toolUpdates(run.Updates, "b1")
			Expect(ups[2]).To(HaveKeyWithValue("content", []any{map[string]any{"type": "terminal", "terminalId": "term-1"}}))
			Expect(lastOf(ups)).To(HaveKeyWithValue("status", "failed"))
			result := toolResultFor(fake, "b1")
			Expect(result).To(HavePrefix("[output]\n"))
			Expect(result).To(ContainSubstring(cwd + "\n"))
			Expect(result).To(ContainSubstring("oops\n"))
			Expect(result).To(HaveSuffix("[exit code: 3]"))
		})

		It("kills on timeout, then reads the output and releases once", func() {
			fake.Script(toolCallReply("b1", "bash", map[string]any{"command": "echo started; sleep 30", "timeout": 1}), llmtest.Reply{Text: "ok"})
			run, ed := runEditor(agentEnv(fake), cwd, "--client-terminal")
			Expect(run.Result["prompts"]).To(ConsistOf(HaveKeyWithValue("stopReason", "end_turn")))
			Expect(terminalOrder(ed)).To(Equal([]string{"terminal/create", "terminal/wait_for_exit", "terminal/kill",
				"terminal/output", "terminal/release"}))
			expectReleasedOnce(ed)
			Expect(toolResultFor(fake, "b1")).To(And(ContainSubstring("started\n"),
				ContainSubstring("[timed out after 1s: the command was killed (terminal/kill)]"),
				HaveSuffix("[exit code: 143 (killed by SIGTERM)]")))
		})

		It("on cancel kills and releases before the prompt answers cancelled", func() {
			fake.Script(toolCallReply("b1", "bash", map[string]any{"command": "sleep 30"}), llmtest.Reply{Text: "after"})
			run, ed := runEditor(agentEnv(fake), cwd, "--client-terminal", "--cancel-on-terminal", "--prompts", "2")
			prompts := run.Result["prompts"].([]any)
			Expect(prompts[0]).To(HaveKeyWithValue("stopReason", "cancelled"))
			Expect(prompts[1]).To(HaveKeyWithValue("stopReason", "end_turn"))
			Expect(terminalOrder(ed)).To(Equal([]string{"terminal/create", "terminal/wait_for_exit", "terminal/kill", "terminal/release"}))
			expectReleasedOnce(ed)
		})
	})

	DescribeTable("images reach the model in its provider's format and come back on load",
		func(provider string) {
			png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n tiny"))
			prompt, _ := json.Marshal([]any{map[string]any{"type": "text", "text": "what is this?"},
				map[string]any{"type": "image", "mimeType": "image/png", "data": png}})
			env := agentEnv(fake, "IAC_CODE_PROVIDER=chaos_"+provider)
			run, _ := runEditor(env, cwd, "--prompt-json", string(prompt))
			Expect(run.Result["prompts"]).To(ConsistOf(HaveKeyWithValue("stopReason", "end_turn")))
			req := fake.Requests()[0]
			Expect(req.Format).To(Equal(provider))
			Expect(req.Images()).To(ConsistOf(And(HaveField("Role", "user"), HaveField("MediaType", "image/png"), HaveField("Data", png))))
			if provider == llmtest.FormatOpenAI {
				Expect(req.Images()[0].URL).To(Equal("data:image/png;base64," + png))
			}

			load := runTSClient(env, stdioArgs("load", cwd, "--session-id", run.Result["sessionId"].(string))...)
			Expect(load.Result["replayed"]).To(ContainElement(And(HaveKeyWithValue("sessionUpdate", "user_message_chunk"),
				HaveKeyWithValue("content", map[string]any{"type": "image", "mimeType": "image/png", "data": png}),
				HaveKeyWithValue("messageId", Not(BeEmpty())))))
		},
		Entry("OpenAI: a data URL content part", llmtest.FormatOpenAI),
		Entry("Anthropic: a base64 image block", llmtest.FormatAnthropic),
	)

	It("over HTTP+SSE too: the requests reach the client on the session's stream", Label("http"), func() {
		fake.Script(toolCallReply("r1", "read_file", map[string]any{"path": "a.txt", "end_line": 1}),
			toolCallReply("b1", "bash", map[string]any{"command": "echo via http"}), llmtest.Reply{Text: "done"})
		a := startHTTPAgent(agentEnv(fake), "")
		run, ed := runEditorArgs(agentEnv(fake), []string{"--transport", "http", "--http-url", a.base + "/acp",
			"--scenario", "editor", "--cwd", cwd, "--client-fs", "read,write", "--client-terminal", "--overlay", overlay})
		Expect(run.Result["prompts"]).To(ConsistOf(HaveKeyWithValue("stopReason", "end_turn")))
		Expect(toolResultFor(fake, "r1")).To(Equal("     1\tbuf 1\n"))
		Expect(toolResultFor(fake, "b1")).To(Equal("[output]\nvia http\n[exit code: 0]"))
		Expect(ed.methods()).To(Equal([]string{"fs/read_text_file", "terminal/create", "terminal/wait_for_exit",
			"terminal/output", "terminal/release"}))
		a.sigterm(10 * time.Second)
	})

	It("over a WebSocket too: fs/* and terminal/* requests and their answers travel as text frames", Label("remote"), func() {
		fake.Script(toolCallReply("r1", "read_file", map[string]any{"path": "a.txt", "end_line": 1}),
			toolCallReply("b1", "bash", map[string]any{"command": "echo via ws"}), llmtest.Reply{Text: "done"})
		a := startHTTPAgent(agentEnv(fake), "")
		run, ed := runEditorArgs(agentEnv(fake), []string{"--transport", "ws", "--ws-url", wsURL(a.base),
			"--scenario", "editor", "--cwd", cwd, "--client-fs", "read,write", "--client-terminal", "--overlay", overlay})
		Expect(run.Result["prompts"]).To(ConsistOf(HaveKeyWithValue("stopReason", "end_turn")))
		Expect(toolResultFor(fake, "r1")).To(Equal("     1\tbuf 1\n"))
		Expect(toolResultFor(fake, "b1")).To(Equal("[output]\nvia ws\n[exit code: 0]"))
		Expect(ed.methods()).To(Equal([]string{"fs/read_text_file", "terminal/create", "terminal/wait_for_exit",
			"terminal/output", "terminal/release"}))
		a.sigterm(10 * time.Second)
	})

	It("sends the plan as schema-valid plan updates and replays it on load", func() {
		fake.Script(toolCallReply("t1", "todo_write", map[string]any{"todos": []any{
			map[string]any{"content": "Read the code", "status": "completed", "priority": "high"},
			map[string]any{"content": "Fix the bug", "status": "in_progress"},
		}}), llmtest.Reply{Text: "planned"})
		env := agentEnv(fake)
		run, _ := runEditor(env, cwd)
		plan := map[string]any{"sessionUpdate": "plan", "entries": []any{
			map[string]any{"content": "Read the code", "priority": "high", "status": "completed"},
			map[string]any{"content": "Fix the bug", "priority": "medium", "status": "in_progress"},
		}}
		Expect(run.Updates).To(ContainElement(Equal(plan)))
		Expect(run.PermissionRequests).To(BeEmpty())
		load := runTSClient(env, stdioArgs("load", cwd, "--session-id", run.Result["sessionId"].(string))...)
		Expect(load.Result["replayed"]).To(ContainElement(Equal(plan)))
	})
})
