package actors

import (
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
)

var _ = Describe("tool calls through the client (fs/*, terminal/*)", func() {
	var (
		h   *harness
		p   *scriptedProvider
		sid string
		cwd string
	)
	BeforeEach(func() {
		p = &scriptedProvider{}
		var err error
		cwd, err = filepath.EvalSymlinks(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
	})
	AfterEach(func() { h.close() })

	// start opens a session in bypass mode for a client advertising caps.
	start := func(cfg Config, caps map[string]any) {
		h = newHarnessWith(cfg, p, tools.Builtin()...)
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": caps}))
		sid = h.result(h.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))["sessionId"].(string)
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))
	}
	prompt := func() float64 {
		return h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "go"}}})
	}
	// request waits for the n-th client request of method (0-based).
	request := func(method string, n int) map[string]any {
		var reqs []map[string]any
		Eventually(func() int { reqs = h.out.requests(method); return len(reqs) }, 5*time.Second, time.Millisecond).
			Should(BeNumerically(">", n), "no %s #%d", method, n)
		return reqs[n]
	}
	params := func(r map[string]any) map[string]any { return r["params"].(map[string]any) }
	fsCaps := map[string]any{"fs": map[string]any{"readTextFile": true, "writeTextFile": true}}
	lastUpdate := func(id string) map[string]any {
		var last map[string]any
		for _, u := range h.out.allUpdates() {
			if u["toolCallId"] == id {
				last = u
			}
		}
		return last
	}
	// methodsBefore lists the client requests sent before the answer to id.
	methodsBefore := func(id float64) (before, after []string) {
		answered := false
		for _, f := range h.out.all() {
			switch {
			case f["id"] == id && f["method"] == nil:
				answered = true
			case f["method"] != nil && f["id"] != nil:
				if answered {
					after = append(after, f["method"].(string))
				} else {
					before = append(before, f["method"].(string))
				}
			}
		}
		return
	}

	It("runs locally when the client advertises nothing", func() {
		p.then(callTool("w1", "write_file", `{"path":"a.txt","content":"local\n"}`)).then(say("done"))
		start(Config{}, map[string]any{})
		Expect(h.result(prompt())["stopReason"]).To(Equal("end_turn"))
		Expect(os.ReadFile(filepath.Join(cwd, "a.txt"))).To(Equal([]byte("local\n")))
		before, _ := methodsBefore(0)
		Expect(before).To(BeEmpty())
	})

	It("writes through the client: old text read there, the disk untouched, the diff shown", func() {
		p.then(callTool("w1", "write_file", `{"path":"a.txt","content":"new\n"}`)).then(say("done"))
		start(Config{}, fsCaps)
		id := prompt()
		read := request("fs/read_text_file", 0)
		Expect(params(read)).To(Equal(map[string]any{"sessionId": sid, "path": filepath.Join(cwd, "a.txt")}))
		h.answer(read["id"], map[string]any{"content": "unsaved\n"})
		write := request("fs/write_text_file", 0)
		Expect(params(write)).To(Equal(map[string]any{"sessionId": sid, "path": filepath.Join(cwd, "a.txt"), "content": "new\n"}))
		h.answer(write["id"], nil)
		Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(filepath.Join(cwd, "a.txt")).NotTo(BeAnExistingFile())
		Expect(lastUpdate("w1")["content"]).To(ContainElement(And(HaveKeyWithValue("type", "diff"),
			HaveKeyWithValue("oldText", "unsaved\n"), HaveKeyWithValue("newText", "new\n"))))
	})

	It("turns a client error into a tool error naming the path", func() {
		p.then(callTool("r1", "read_file", `{"path":"a.txt"}`)).then(say("done"))
		start(Config{}, fsCaps)
		id := prompt()
		h.answerError(request("fs/read_text_file", 0)["id"], -32603, "buffer locked")
		Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(lastUpdate("r1")).To(HaveKeyWithValue("status", "failed"))
		Expect(p.requests()[1].Messages[2].Content[0].Text).To(
			Equal("Cannot read a.txt through the editor: the editor answered fs/read_text_file with error -32603: buffer locked"))
	})

	It("gives up on a client that does not answer, after the client timeout", func() {
		p.then(callTool("r1", "read_file", `{"path":"a.txt"}`)).then(say("done"))
		start(Config{ClientTimeout: 200 * time.Millisecond}, fsCaps)
		id := prompt()
		request("fs/read_text_file", 0)
		Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(p.requests()[1].Messages[2].Content[0].Text).To(ContainSubstring("did not answer fs/read_text_file in time"))
	})

	It("uses the capabilities of the connection that owns the session now", func() {
		p.then(callTool("w1", "write_file", `{"path":"a.txt","content":"x"}`)).then(say("done"))
		start(Config{}, fsCaps)
		// Another client, without fs, takes the session over.
		other := &recorder{}
		conn2 := h.srv.Connect(other)
		DeferCleanup(func() { conn2.Close(time.Second) })
		h2 := &harness{srv: h.srv, conn: conn2, out: other, provider: p}
		h2.result(h2.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}}))
		h2.result(h2.call("session/resume", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
		id := h2.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "go"}}})
		Expect(h2.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(os.ReadFile(filepath.Join(cwd, "a.txt"))).To(Equal([]byte("x")))
		Expect(h.out.requests("fs/read_text_file")).To(BeEmpty())
		Expect(other.requests("fs/read_text_file")).To(BeEmpty())
	})

	Describe("bash in a client terminal", func() {
		termCaps := map[string]any{"terminal": true}

		It("shows the terminal right after create, then waits, reads the output and releases", func() {
			p.then(callTool("b1", "bash", `{"command":"make test"}`)).then(say("done"))
			start(Config{}, termCaps)
			id := prompt()
			create := request("terminal/create", 0)
			Expect(params(create)).To(Equal(map[string]any{"sessionId": sid, "command": "bash", "args": []any{"-c", "make test"},
				"cwd": cwd, "outputByteLimit": float64(10 << 20), "env": []any{
					map[string]any{"name": "GIT_TERMINAL_PROMPT", "value": "0"}, map[string]any{"name": "GIT_PAGER", "value": "cat"},
					map[string]any{"name": "PAGER", "value": "cat"}}}))
			h.answer(create["id"], map[string]any{"terminalId": "t7"})
			wait := request("terminal/wait_for_exit", 0)
			Expect(lastUpdate("b1")).To(HaveKeyWithValue("content", []any{map[string]any{"type": "terminal", "terminalId": "t7"}}))
			h.answer(wait["id"], map[string]any{"exitCode": 2})
			out := request("terminal/output", 0)
			h.answer(out["id"], map[string]any{"output": "FAIL\n", "truncated": false, "exitStatus": map[string]any{"exitCode": 2}})
			rel := request("terminal/release", 0)
			Expect(params(rel)).To(Equal(map[string]any{"sessionId": sid, "terminalId": "t7"}))
			h.answer(rel["id"], map[string]any{})
			Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
			final := lastUpdate("b1")
			Expect(final).To(HaveKeyWithValue("status", "failed"))
			Expect(final["content"]).To(HaveLen(2))
			Expect(final["content"].([]any)[0]).To(Equal(map[string]any{"type": "terminal", "terminalId": "t7"}))
			Expect(p.requests()[1].Messages[2].Content[0].Text).To(Equal("[output]\nFAIL\n[exit code: 2]"))
			Expect(h.out.requests("terminal/kill")).To(BeEmpty())

			// A replay shows the text, not a terminal released long ago.
			before := len(h.out.allUpdates())
			h.result(h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
			var replayed map[string]any
			for _, u := range h.out.allUpdates()[before:] {
				if u["toolCallId"] == "b1" {
					replayed = u
				}
			}
			Expect(replayed["content"]).To(Equal([]any{map[string]any{"type": "content",
				"content": map[string]any{"type": "text", "text": "[output]\nFAIL\n[exit code: 2]"}}}))
		})

		It("on cancel kills and releases before the prompt's answer, and asks nothing after it", func() {
			p.then(callTool("b1", "bash", `{"command":"sleep 100"}`))
			start(Config{}, termCaps)
			id := prompt()
			h.answer(request("terminal/create", 0)["id"], map[string]any{"terminalId": "t1"})
			request("terminal/wait_for_exit", 0) // left pending, as a running command's
			h.notify("session/cancel", map[string]any{"sessionId": sid})
			h.answer(request("terminal/kill", 0)["id"], map[string]any{})
			Consistently(func() map[string]any { return h.out.response(id) }, 100*time.Millisecond).Should(BeNil())
			h.answer(request("terminal/release", 0)["id"], map[string]any{})
			Expect(h.result(id)["stopReason"]).To(Equal("cancelled"))
			time.Sleep(50 * time.Millisecond)
			before, after := methodsBefore(id)
			Expect(before).To(Equal([]string{"terminal/create", "terminal/wait_for_exit", "terminal/kill", "terminal/release"}))
			Expect(after).To(BeEmpty())
		})

		It("releases a terminal whose create was answered after the cancel", func() {
			p.then(callTool("b1", "bash", `{"command":"sleep 100"}`))
			start(Config{}, termCaps)
			id := prompt()
			create := request("terminal/create", 0)
			h.notify("session/cancel", map[string]any{"sessionId": sid})
			Consistently(func() map[string]any { return h.out.response(id) }, 100*time.Millisecond).Should(BeNil())
			h.answer(create["id"], map[string]any{"terminalId": "late"})
			h.answer(request("terminal/kill", 0)["id"], map[string]any{})
			rel := request("terminal/release", 0)
			Expect(params(rel)["terminalId"]).To(Equal("late"))
			h.answer(rel["id"], map[string]any{})
			Expect(h.result(id)["stopReason"]).To(Equal("cancelled"))
		})

		It("a sub-agent's bash uses the terminal too", func() {
			p.then(callTool("a1", "agent", `{"prompt":"run it","description":"runner","subagent_type":"general-purpose"}`)).
				then(callTool("b1", "bash", `{"command":"echo hi"}`)).then(say("sub done")).then(say("all done"))
			start(Config{}, termCaps)
			id := prompt()
			h.answer(request("terminal/create", 0)["id"], map[string]any{"terminalId": "s1"})
			h.answer(request("terminal/wait_for_exit", 0)["id"], map[string]any{"exitCode": 0})
			h.answer(request("terminal/output", 0)["id"], map[string]any{"output": "hi\n", "truncated": false})
			h.answer(request("terminal/release", 0)["id"], map[string]any{})
			Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
			Expect(lastUpdate("a1")).To(HaveKeyWithValue("status", "completed"))
		})
	})
})
