package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

func toolCallReply(id, name string, args any) llmtest.Reply {
	b, _ := json.Marshal(args)
	return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: id, Name: name, Arguments: string(b)}}}
}

// toolUpdates returns the updates of one tool call, in order.
func toolUpdates(ups []map[string]any, id string) []map[string]any {
	var out []map[string]any
	for _, u := range ups {
		if u["toolCallId"] == id {
			out = append(out, u)
		}
	}
	return out
}

func lastOf(ups []map[string]any) map[string]any { return ups[len(ups)-1] }

// toolResultFor finds what the model was told about a tool call.
func toolResultFor(fake *llmtest.Server, callID string) string {
	for _, r := range fake.Requests() {
		for _, m := range r.Chat.Messages {
			if m.Role == "tool" && m.ToolCallID == callID {
				return m.Text()
			}
		}
	}
	return ""
}

func allow(option string) map[string]any {
	return map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": option}}
}

var _ = Describe("tools and permissions over stdio", Label("e2e"), func() {
	var (
		fake *llmtest.Server
		a    *agent
		cwd  string
		sid  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
	})
	start := func(extraEnv ...string) {
		a = startAgent(agentEnv(fake, extraEnv...))
		a.initialize()
		sid = a.newSession(cwd)
	}

	It("writes a file after allow_once: one tool call id everywhere, a diff for review", func() {
		fake.Script(toolCallReply("w1", "write_file", map[string]any{"path": "hello.txt", "content": "hi\nthere\n"}),
			llmtest.Reply{Text: "written"})
		start()
		id := a.prompt(sid, "write it")
		req := a.serverRequest("session/request_permission", 0)
		params := req["params"].(map[string]any)
		tc := params["toolCall"].(map[string]any)
		Expect(tc["toolCallId"]).To(Equal("w1"))
		Expect(tc["title"]).To(Equal("Write hello.txt"))
		Expect(tc["kind"]).To(Equal("edit"))
		kinds := []string{}
		for _, o := range params["options"].([]any) {
			kinds = append(kinds, o.(map[string]any)["kind"].(string))
		}
		Expect(kinds).To(Equal([]string{"allow_once", "allow_always", "reject_once", "reject_always"}))
		a.answer(req["id"], allow("allow_once"))
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))

		body, err := os.ReadFile(filepath.Join(cwd, "hello.txt"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(body)).To(Equal("hi\nthere\n"))
		ups := toolUpdates(a.updatesBefore(id), "w1")
		Expect(ups[0]).To(And(HaveKeyWithValue("sessionUpdate", "tool_call"), HaveKeyWithValue("status", "pending"),
			HaveKeyWithValue("kind", "edit"), HaveKey("rawInput"), HaveKey("locations")))
		Expect(ups[1]).To(HaveKeyWithValue("status", "in_progress"))
		final := lastOf(ups)
		Expect(final).To(HaveKeyWithValue("status", "completed"))
		Expect(final["content"]).To(ContainElement(And(HaveKeyWithValue("type", "diff"),
			HaveKeyWithValue("path", filepath.Join(cwd, "hello.txt")), HaveKeyWithValue("newText", "hi\nthere\n"))))
		a.finish()
	})

	DescribeTable("a rejected write never runs and the model reads Permission denied.",
		func(answer map[string]any) {
			fake.Script(toolCallReply("w1", "write_file", map[string]any{"path": "no.txt", "content": "x"}), llmtest.Reply{Text: "ok"})
			start()
			id := a.prompt(sid, "write")
			a.answer(a.serverRequest("session/request_permission", 0)["id"], answer)
			Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
			Expect(filepath.Join(cwd, "no.txt")).NotTo(BeAnExistingFile())
			Expect(lastOf(toolUpdates(a.updatesBefore(id), "w1"))).To(HaveKeyWithValue("status", "failed"))
			Expect(toolResultFor(fake, "w1")).To(Equal("Permission denied."))
			a.finish()
		},
		Entry("reject_once", allow("reject_once")),
		Entry("reject_always", allow("reject_always")),
		Entry("legacy denied", map[string]any{"outcome": "denied"}),
	)

	It("accepts the legacy allowed answer", func() {
		fake.Script(toolCallReply("w1", "write_file", map[string]any{"path": "legacy.txt", "content": "x"}), llmtest.Reply{Text: "ok"})
		start()
		id := a.prompt(sid, "write")
		a.answer(a.serverRequest("session/request_permission", 0)["id"], map[string]any{"outcome": "allowed", "option_id": "allow_once"})
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(filepath.Join(cwd, "legacy.txt")).To(BeAnExistingFile())
		a.finish()
	})

	It("remembers allow_always for the tool in the session", func() {
		fake.Script(toolCallReply("w1", "write_file", map[string]any{"path": "a.txt", "content": "1"}), llmtest.Reply{Text: "one"},
			toolCallReply("w2", "write_file", map[string]any{"path": "b.txt", "content": "2"}), llmtest.Reply{Text: "two"})
		start()
		first := a.prompt(sid, "first")
		a.answer(a.serverRequest("session/request_permission", 0)["id"], allow("allow_always"))
		Expect(a.result(first)["stopReason"]).To(Equal("end_turn"))
		Expect(a.result(a.prompt(sid, "second"))["stopReason"]).To(Equal("end_turn"))
		Expect(filepath.Join(cwd, "b.txt")).To(BeAnExistingFile())
		n := 0
		for _, m := range a.messages() {
			if m["method"] == "session/request_permission" {
				n++
			}
		}
		Expect(n).To(Equal(1))
		a.finish()
	})

	It("cancels during a pending permission: the tool never runs, the prompt ends cancelled", func() {
		fake.Script(toolCallReply("w1", "write_file", map[string]any{"path": "never.txt", "content": "x"}))
		start()
		id := a.prompt(sid, "write")
		req := a.serverRequest("session/request_permission", 0)
		a.notify("session/cancel", map[string]any{"sessionId": sid})
		a.answer(req["id"], map[string]any{"outcome": map[string]any{"outcome": "cancelled"}})
		Expect(a.result(id)["stopReason"]).To(Equal("cancelled"))
		Expect(filepath.Join(cwd, "never.txt")).NotTo(BeAnExistingFile())
		a.finish()
	})

	It("kills the whole process group of bash on cancel", func() {
		pidFile := filepath.Join(cwd, "pid")
		fake.Script(toolCallReply("b1", "bash", map[string]any{"command": "echo $$ > " + pidFile + "; sleep 60 & sleep 60"}))
		start()
		id := a.prompt(sid, "run")
		a.answer(a.serverRequest("session/request_permission", 0)["id"], allow("allow_once"))
		Eventually(func() error { _, err := os.Stat(pidFile); return err }, 10*time.Second).Should(Succeed())
		var pgid int
		Eventually(func() error {
			b, _ := os.ReadFile(pidFile)
			var err error
			pgid, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err
		}).Should(Succeed())
		Expect(syscall.Kill(-pgid, 0)).To(Succeed(), "the group runs")
		a.notify("session/cancel", map[string]any{"sessionId": sid})
		Expect(a.result(id)["stopReason"]).To(Equal("cancelled"))
		Eventually(func() error { return syscall.Kill(-pgid, 0) }, 10*time.Second).Should(MatchError(syscall.ESRCH))
		a.finish()
	})

	It("times bash out and kills it", func() {
		fake.Script(toolCallReply("b1", "bash", map[string]any{"command": "sleep 30", "timeout": 1}), llmtest.Reply{Text: "ok"})
		start()
		id := a.prompt(sid, "run")
		a.answer(a.serverRequest("session/request_permission", 0)["id"], allow("allow_once"))
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(lastOf(toolUpdates(a.updatesBefore(id), "b1"))).To(HaveKeyWithValue("status", "failed"))
		Expect(strings.ToLower(toolResultFor(fake, "b1"))).To(ContainSubstring("timed out"))
		a.finish()
	})

	It("reports edit_file with 0 and 2 matches as failures naming the count", func() {
		Expect(os.WriteFile(filepath.Join(cwd, "f.txt"), []byte("a x a\n"), 0o644)).To(Succeed())
		fake.Script(toolCallReply("e0", "edit_file", map[string]any{"path": "f.txt", "old_string": "zzz", "new_string": "y"}),
			toolCallReply("e2", "edit_file", map[string]any{"path": "f.txt", "old_string": "a", "new_string": "b"}),
			toolCallReply("e1", "edit_file", map[string]any{"path": "f.txt", "old_string": "x", "new_string": "y"}),
			llmtest.Reply{Text: "done"})
		start("IAC_CODE_TEST_MODE=bypass")
		Expect(a.result(a.request("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))).To(BeEmpty())
		id := a.prompt(sid, "edit")
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(toolResultFor(fake, "e0")).To(ContainSubstring("not found"))
		Expect(toolResultFor(fake, "e2")).To(ContainSubstring("2"))
		body, _ := os.ReadFile(filepath.Join(cwd, "f.txt"))
		Expect(string(body)).To(Equal("a y a\n"))
		ups := a.updatesBefore(id)
		Expect(lastOf(toolUpdates(ups, "e0"))).To(HaveKeyWithValue("status", "failed"))
		Expect(lastOf(toolUpdates(ups, "e2"))).To(HaveKeyWithValue("status", "failed"))
		Expect(lastOf(toolUpdates(ups, "e1"))["content"]).To(ContainElement(And(HaveKeyWithValue("type", "diff"),
			HaveKeyWithValue("oldText", "a x a\n"), HaveKeyWithValue("newText", "a y a\n"))))
		a.finish()
	})

	It("runs grep and glob on a generated tree without asking, in parallel, results in order", func() {
		for i := 0; i < 50; i++ {
			dir := filepath.Join(cwd, "src", fmt.Sprintf("d%d", i%5))
			Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
			content := "nothing here\n"
			if i%10 == 0 {
				content = "func NeedleFunc() {}\n"
			}
			Expect(os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.go", i)), []byte(content), 0o644)).To(Succeed())
		}
		fake.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{
			{ID: "g1", Name: "grep", Arguments: `{"pattern":"Needle\\w+","output_mode":"files_with_matches"}`},
			{ID: "g2", Name: "glob", Arguments: `{"pattern":"src/**/*.go"}`},
		}}, llmtest.Reply{Text: "found"})
		start()
		id := a.prompt(sid, "search")
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		grep := toolResultFor(fake, "g1")
		Expect(strings.Count(grep, ".go")).To(Equal(5))
		Expect(strings.Count(toolResultFor(fake, "g2"), ".go")).To(Equal(50))
		msgs := fake.Requests()[1].Chat.Messages
		Expect(msgs[len(msgs)-2].ToolCallID).To(Equal("g1"))
		Expect(msgs[len(msgs)-1].ToolCallID).To(Equal("g2"))
		Expect(lastOf(toolUpdates(a.updatesBefore(id), "g1"))).NotTo(HaveKey("kind")) // updates carry only changes
		a.finish()
	})

	It("fetches a local page as markdown when private addresses are allowed, after asking about the host", func() {
		page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html><body><h1>Title Here</h1><p>Some <b>bold</b> text.</p><script>evil()</script></body></html>")
		}))
		DeferCleanup(page.Close)
		fake.Script(toolCallReply("f1", "web_fetch", map[string]any{"url": page.URL}), llmtest.Reply{Text: "read"})
		start("IAC_CODE_WEB_FETCH_ALLOW_PRIVATE=1")
		id := a.prompt(sid, "fetch")
		req := a.serverRequest("session/request_permission", 0)
		params := req["params"].(map[string]any)
		Expect(params["toolCall"]).To(And(HaveKeyWithValue("title", "Fetch from 127.0.0.1: "+page.URL), HaveKeyWithValue("kind", "fetch")))
		Expect(params["options"]).To(ContainElement(HaveKeyWithValue("name", "Always allow web_fetch for 127.0.0.1 in this session")))
		a.answer(req["id"], allow("allow_once"))
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		out := toolResultFor(fake, "f1")
		Expect(out).To(ContainSubstring("# Title Here"))
		Expect(out).To(ContainSubstring("**bold**"))
		Expect(out).NotTo(ContainSubstring("evil()"))
		a.finish()
	})

	It("refuses to fetch the cloud metadata address", func() {
		fake.Script(toolCallReply("f1", "web_fetch", map[string]any{"url": "http://169.254.169.254/latest/meta-data/"}), llmtest.Reply{Text: "no"})
		start("IAC_CODE_WEB_FETCH_ALLOW_PRIVATE=0")
		id := a.prompt(sid, "fetch")
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(lastOf(toolUpdates(a.updatesBefore(id), "f1"))).To(HaveKeyWithValue("status", "failed"))
		Expect(toolResultFor(fake, "f1")).NotTo(BeEmpty())
		a.finish()
	})

	It("runs an explore sub-agent whose tool calls reach the client", func() {
		Expect(os.WriteFile(filepath.Join(cwd, "main.go"), []byte("package main\n"), 0o644)).To(Succeed())
		fake.Script(
			toolCallReply("ag1", "agent", map[string]any{"prompt": "find go files", "description": "explore the tree", "subagent_type": "explore"}),
			toolCallReply("sub1", "glob", map[string]any{"pattern": "**/*.go"}),
			llmtest.Reply{Text: "Found main.go."},
			llmtest.Reply{Text: "The sub-agent found main.go."},
		)
		start()
		id := a.prompt(sid, "explore")
		req := a.serverRequest("session/request_permission", 0)
		Expect(req["params"].(map[string]any)["toolCall"]).To(HaveKeyWithValue("kind", "execute"))
		a.answer(req["id"], allow("allow_once"))
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		ups := a.updatesBefore(id)
		Expect(toolUpdates(ups, "sub1")).NotTo(BeEmpty())
		Expect(lastOf(toolUpdates(ups, "ag1"))).To(HaveKeyWithValue("status", "completed"))
		Expect(toolResultFor(fake, "ag1")).To(Equal("Found main.go."))
		// the sub-agent was offered read-only tools plus bash, not write tools
		var subTools []string
		for _, t := range fake.Requests()[1].Chat.Tools {
			subTools = append(subTools, t.Function.Name)
		}
		Expect(subTools).To(ContainElement("bash"))
		Expect(subTools).NotTo(ContainElement("write_file"))
		Expect(subTools).NotTo(ContainElement("agent"))
		// its text was not streamed as the main agent's message
		Expect(chunkText(ups, "agent_message_chunk")).To(Equal("The sub-agent found main.go."))
		// a load replays the sub-agent's tool calls too
		loadID := a.request("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
		a.result(loadID)
		live := toolUpdates(a.updatesBefore(id), "sub1")
		all := toolUpdates(a.updatesBefore(loadID), "sub1")
		replayed := all[len(live):]
		Expect(replayed).To(HaveLen(2), "the sub-agent's tool_call and its final update")
		Expect(replayed[0]).To(HaveKeyWithValue("sessionUpdate", "tool_call"))
		Expect(lastOf(replayed)).To(HaveKeyWithValue("status", "completed"))
		a.finish()
	})

	It("streams 200,000 lines of bash output bounded, sending each byte about once", func() {
		fake.Script(toolCallReply("b1", "bash", map[string]any{"command": "seq 1 200000"}), llmtest.Reply{Text: "ok"})
		start()
		id := a.prompt(sid, "count")
		a.answer(a.serverRequest("session/request_permission", 0)["id"], allow("allow_once"))
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		outputSize := 0
		for i := 1; i <= 200000; i++ {
			outputSize += len(strconv.Itoa(i)) + 1
		}
		updateBytes := 0
		a.mu.Lock()
		for _, line := range a.raw {
			if strings.Contains(string(line), `"toolCallId":"b1"`) && strings.Contains(string(line), `"tool_call_update"`) {
				updateBytes += len(line)
			}
		}
		a.mu.Unlock()
		Expect(updateBytes).To(BeNumerically("<", 3*outputSize))
		Expect(len(toolResultFor(fake, "b1"))).To(BeNumerically("<", 60000), "the model gets a bounded result")
		Expect(toolResultFor(fake, "b1")).To(ContainSubstring("200000"))
		a.finish()
	})
})
