package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/tools/mcp/mcptest"
	"github.com/iac-code/iac-code/tools/procgroup"
)

// MCP servers from session/new as tools, end to end: the reference server
// @modelcontextprotocol/server-everything (npm, pinned in e2e/node's
// lockfile) over stdio and Streamable HTTP, and our own small server
// (tools/mcp/mcptest) for what the reference server does not do: crashes,
// a hung start, list_changed on demand, header and environment echo, SSE.
// IAC_CODE_LABEL_FILTER=mcp runs these alone.

var (
	mcpBinOnce sync.Once
	mcpBin     string
)

// mcpTestServer is the test MCP server, built once for every spec.
func mcpTestServer() string {
	mcpBinOnce.Do(func() {
		bin, err := gexec.Build(mcptest.Package)
		Expect(err).NotTo(HaveOccurred())
		mcpBin = bin
	})
	return mcpBin
}

// everything is the reference server over stdio, started by its npm bin
// name: a bare command found through the PATH of the entry's env.
func everything(name string) map[string]any {
	return map[string]any{"name": name, "command": "mcp-server-everything", "args": []string{"stdio"},
		"env": []any{map[string]any{"name": "PATH", "value": filepath.Join(nodeDir, "node_modules", ".bin") + ":" + os.Getenv("PATH")}}}
}

// testServer is our test server over stdio.
func testServer(name string, args ...string) map[string]any {
	if args == nil {
		args = []string{}
	}
	return map[string]any{"name": name, "command": mcpTestServer(), "args": args, "env": []any{}}
}

// startHTTPMCP runs an MCP server over HTTP on loopback and returns its
// URL; the command prints "listening <url>".
func startHTTPMCP(name string, args ...string) string {
	cmd := exec.Command(name, args...)
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

// newMCPSession opens a session with the given MCP servers and returns
// its id and the state of its servers from the response's _meta.
func (a *agent) newMCPSession(cwd string, servers ...map[string]any) (string, []map[string]any) {
	res := a.result(a.request("session/new", map[string]any{"cwd": cwd, "mcpServers": servers}))
	return res["sessionId"].(string), mcpStates(res)
}

// mcpStates reads the servers' state from a result or update's _meta.
func mcpStates(m map[string]any) []map[string]any {
	meta, _ := m["_meta"].(map[string]any)
	ExpectWithOffset(1, meta).To(HaveKey("iac-code/mcpServers"), "no MCP state in %v", m)
	var out []map[string]any
	for _, s := range meta["iac-code/mcpServers"].([]any) {
		out = append(out, s.(map[string]any))
	}
	return out
}

func stateOf(states []map[string]any, name string) map[string]any {
	for _, s := range states {
		if s["name"] == name {
			return s
		}
	}
	Fail("no MCP server " + name + " in the state")
	return nil
}

// offered are the tools of a model request by name (OpenAI format).
func offered(r llmtest.RecordedRequest) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for _, t := range r.Chat.Tools {
		out[t.Function.Name] = t.Function.Parameters
	}
	for _, t := range r.Anthropic.Tools {
		out[t.Name] = t.InputSchema
	}
	return out
}

func toolNamesOf(r llmtest.RecordedRequest) []string {
	var names []string
	for n := range offered(r) {
		names = append(names, n)
	}
	return names
}

// finalUpdate is the completed or failed tool_call_update of a call.
func finalUpdate(ups []map[string]any, callID string) map[string]any {
	for _, u := range ups {
		if u["toolCallId"] == callID && (u["status"] == "completed" || u["status"] == "failed") {
			return u
		}
	}
	Fail("no final update for " + callID)
	return nil
}

// contentTypes are the content block types of a tool call update.
func contentTypes(u map[string]any) []string {
	var out []string
	for _, c := range u["content"].([]any) {
		out = append(out, c.(map[string]any)["content"].(map[string]any)["type"].(string))
	}
	return out
}

func toolResult(r llmtest.RecordedRequest, callID string) string {
	for _, tr := range r.ToolResults() {
		if tr.ID == callID {
			return tr.Content
		}
	}
	Fail("no tool result for " + callID)
	return ""
}

// mcpGroup reads the "<pid> <pgid>" the test server wrote.
func mcpGroup(pidfile string) (pid, pgid int) {
	Eventually(func() error {
		b, err := os.ReadFile(pidfile)
		if err != nil {
			return err
		}
		f := strings.Fields(string(b))
		if len(f) != 2 {
			return os.ErrNotExist
		}
		if pid, err = strconv.Atoi(f[0]); err != nil {
			return err
		}
		pgid, err = strconv.Atoi(f[1])
		return err
	}, 20*time.Second, 10*time.Millisecond).Should(Succeed())
	DeferCleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	return pid, pgid
}

// waitMCPInfo waits for a session_info_update whose MCP state satisfies ok.
func (a *agent) waitMCPInfo(from int, ok func([]map[string]any) bool) []map[string]any {
	var found []map[string]any
	Eventually(func() bool {
		for _, m := range a.messages()[from:] {
			if u := updateOf(m); u != nil && u["sessionUpdate"] == "session_info_update" {
				// (other session_info_updates, such as a turn's end, carry no MCP state)
				if meta, _ := u["_meta"].(map[string]any); meta["iac-code/mcpServers"] != nil && ok(mcpStates(u)) {
					found = mcpStates(u)
					return true
				}
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond).Should(BeTrue(), "no session_info_update with the expected MCP state")
	return found
}

var _ = Describe("MCP servers from session/new", Label("e2e", "mcp"), func() {
	var (
		fake *llmtest.Server
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
	})
	start := func(extraEnv ...string) *agent { return startAgent(agentEnv(fake, extraEnv...)) }

	It("advertises MCP over HTTP and SSE", func() {
		a := start()
		caps := a.initialize()["agentCapabilities"].(map[string]any)
		Expect(caps["mcpCapabilities"]).To(Equal(map[string]any{"http": true, "sse": true}))
		a.finish()
	})

	It("offers a stdio server's tools with its schemas; a call's result reaches the client and the next model request", func() {
		fake.Script(sessToolReply("call_sum", "mcp__everything__get_sum", map[string]any{"a": 2, "b": 3}), llmtest.Reply{Text: "5"})
		a := start()
		a.initialize()
		sid, states := a.newMCPSession(cwd, everything("everything"))
		Expect(states).To(HaveLen(1))
		Expect(states[0]).To(And(HaveKeyWithValue("name", "everything"), HaveKeyWithValue("type", "stdio"),
			HaveKeyWithValue("status", "connected"), HaveKeyWithValue("tools", BeNumerically(">=", 10))))
		id := a.prompt(sid, "add 2 and 3")
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))

		tools := offered(fake.Requests()[0])
		Expect(tools).To(HaveKey("read_file"), "built-in tools stay")
		Expect(tools).To(HaveKey("mcp__everything__get_sum"))
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		Expect(json.Unmarshal(tools["mcp__everything__get_sum"], &schema)).To(Succeed())
		Expect(schema.Type).To(Equal("object"))
		Expect(schema.Properties).To(HaveKey("a"))
		Expect(schema.Properties).To(HaveKey("b"))
		Expect(schema.Required).To(ConsistOf("a", "b"))

		ups := a.updatesBefore(id)
		Expect(ups[0]).To(And(HaveKeyWithValue("sessionUpdate", "tool_call"), HaveKeyWithValue("toolCallId", "call_sum"),
			HaveKeyWithValue("title", "everything: get-sum"), HaveKeyWithValue("kind", "other"),
			HaveKeyWithValue("status", "pending"), HaveKeyWithValue("rawInput", map[string]any{"a": 2.0, "b": 3.0})))
		Expect(ups).To(ContainElement(And(HaveKeyWithValue("toolCallId", "call_sum"), HaveKeyWithValue("status", "in_progress"))))
		final := finalUpdate(ups, "call_sum")
		Expect(final["status"]).To(Equal("completed"))
		Expect(final["content"]).To(Equal([]any{map[string]any{"type": "content",
			"content": map[string]any{"type": "text", "text": "The sum of 2 and 3 is 5."}}}))
		Expect(toolResult(fake.Requests()[1], "call_sum")).To(Equal("The sum of 2 and 3 is 5."))
		Expect(a.messages()).NotTo(ContainElement(HaveKeyWithValue("method", "session/request_permission")),
			"a read-only tool runs without asking")
		a.finish()
	})

	It("maps rich and error results block by block, schema-valid, and gives the model text with markers", func() {
		fake.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{
			{ID: "c_img", Name: "mcp__everything__get_tiny_image", Arguments: `{}`},
			{ID: "c_ref", Name: "mcp__everything__get_resource_reference", Arguments: `{"resourceType":"Text","resourceId":1}`},
			{ID: "c_rich", Name: "mcp__t__rich", Arguments: `{}`},
			{ID: "c_fail", Name: "mcp__t__fail", Arguments: `{}`},
		}}, llmtest.Reply{Text: "seen"})
		a := start()
		a.initialize()
		sid, states := a.newMCPSession(cwd, everything("everything"), testServer("t"))
		Expect(states).To(HaveLen(2))
		id := a.prompt(sid, "show me")
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		ups := a.updatesBefore(id)

		Expect(contentTypes(finalUpdate(ups, "c_img"))).To(Equal([]string{"text", "image", "text"}))
		Expect(contentTypes(finalUpdate(ups, "c_ref"))).To(ContainElement("resource"))
		rich := finalUpdate(ups, "c_rich")
		Expect(rich["status"]).To(Equal("completed"))
		Expect(contentTypes(rich)).To(Equal([]string{"text", "image", "audio", "resource_link", "resource", "resource"}))
		blocks := rich["content"].([]any)
		Expect(blocks[1].(map[string]any)["content"]).To(HaveKeyWithValue("mimeType", "image/png"))
		Expect(blocks[3].(map[string]any)["content"]).To(And(HaveKeyWithValue("uri", "file:///srv/notes.txt"), HaveKeyWithValue("size", 12.0)))
		Expect(blocks[5].(map[string]any)["content"].(map[string]any)["resource"]).To(HaveKeyWithValue("blob", "AQID"))
		fail := finalUpdate(ups, "c_fail")
		Expect(fail["status"]).To(Equal("failed"))
		Expect(contentTypes(fail)).To(Equal([]string{"text"}))

		next := fake.Requests()[1]
		Expect(toolResult(next, "c_img")).To(ContainSubstring("[image: image/png,"))
		Expect(toolResult(next, "c_rich")).To(Equal("rich text\n[image: image/png, 33 bytes]\n[audio: audio/wav, 12 bytes]\n" +
			"[resource_link: notes.txt <file:///srv/notes.txt>]\n<resource uri=\"mem://readme\">\n# embedded\n</resource>\n" +
			"[resource: mem://blob (application/octet-stream, binary, 3 bytes)]"))
		Expect(toolResult(next, "c_fail")).To(Equal("the widget is broken"))
		a.finish() // every message schema-checked
	})

	It("asks before a tool that is not read-only (allow and reject), and plan mode offers only the read-only ones", func() {
		fake.Script(
			sessToolReply("c1", "mcp__everything__toggle_simulated_logging", map[string]any{}), llmtest.Reply{Text: "on"},
			sessToolReply("c2", "mcp__everything__toggle_simulated_logging", map[string]any{}), llmtest.Reply{Text: "refused"},
			llmtest.Reply{Text: "planning"},
		)
		a := start()
		a.initialize()
		sid, _ := a.newMCPSession(cwd, everything("everything"))

		first := a.prompt(sid, "turn logging on")
		req := a.serverRequest("session/request_permission", 0)
		call := req["params"].(map[string]any)["toolCall"].(map[string]any)
		Expect(call).To(And(HaveKeyWithValue("toolCallId", "c1"), HaveKeyWithValue("title", "everything: toggle-simulated-logging")))
		var names []string
		for _, o := range req["params"].(map[string]any)["options"].([]any) {
			names = append(names, o.(map[string]any)["name"].(string))
		}
		Expect(names).To(ContainElement("Always allow mcp__everything__toggle_simulated_logging in this session"))
		a.answer(req["id"], sessAllow("allow_once"))
		Expect(a.result(first)["stopReason"]).To(Equal("end_turn"))
		Expect(finalUpdate(a.updatesBefore(first), "c1")["status"]).To(Equal("completed"))
		Expect(toolResult(fake.Requests()[1], "c1")).To(ContainSubstring("Started simulated"))

		second := a.prompt(sid, "again")
		req = a.serverRequest("session/request_permission", 1)
		a.answer(req["id"], sessAllow("reject_once"))
		Expect(a.result(second)["stopReason"]).To(Equal("end_turn"))
		Expect(finalUpdate(a.sessionUpdates(sid, 0, second), "c2")["status"]).To(Equal("failed"))
		Expect(toolResult(fake.Requests()[3], "c2")).To(Equal("Permission denied."))

		Expect(a.result(a.request("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}))).To(BeEmpty())
		Expect(a.result(a.prompt(sid, "plan it"))["stopReason"]).To(Equal("end_turn"))
		planTools := offered(fake.Requests()[4])
		Expect(planTools).To(HaveKey("mcp__everything__get_sum"))
		Expect(planTools).NotTo(HaveKey("mcp__everything__toggle_simulated_logging"))
		a.finish()
	})

	It("streams progress and cancels a long call at once; the server is told", func() {
		fake.Script(sessToolReply("c_slow", "mcp__t__slow", map[string]any{"seconds": 60, "steps": 600}))
		a := start()
		a.initialize()
		sid, _ := a.newMCPSession(cwd, testServer("t"))
		id := a.prompt(sid, "wait")
		a.waitFor("a progress update", func(m map[string]any) bool {
			u := updateOf(m)
			if u == nil || u["toolCallId"] != "c_slow" || u["content"] == nil {
				return false
			}
			c := u["content"].([]any)[0].(map[string]any)["content"].(map[string]any)
			return strings.HasPrefix(c["text"].(string), "Progress: 1/600 — step 1")
		})
		cancelled := time.Now()
		a.notify("session/cancel", map[string]any{"sessionId": sid})
		Expect(a.result(id)["stopReason"]).To(Equal("cancelled"))
		Expect(time.Since(cancelled)).To(BeNumerically("<", 2*time.Second))
		Eventually(a.stderr.String, 10*time.Second).Should(ContainSubstring("slow call cancelled"),
			"the server got notifications/cancelled")
		a.finish()
	})

	It("reaches the reference server over Streamable HTTP on loopback", func() {
		url := startHTTPMCP("node", filepath.Join(nodeDir, "mcp-everything-http.mjs"))
		fake.Script(sessToolReply("c_echo", "mcp__ev__echo", map[string]any{"message": "over http"}), llmtest.Reply{Text: "ok"})
		a := start()
		a.initialize()
		sid, states := a.newMCPSession(cwd, map[string]any{"type": "http", "name": "ev", "url": url, "headers": []any{}})
		Expect(stateOf(states, "ev")).To(And(HaveKeyWithValue("type", "http"), HaveKeyWithValue("status", "connected")))
		id := a.prompt(sid, "echo")
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(finalUpdate(a.updatesBefore(id), "c_echo")["status"]).To(Equal("completed"))
		Expect(toolResult(fake.Requests()[1], "c_echo")).To(Equal("Echo: over http"))
		a.finish()
	})

	DescribeTable("sends the entry's headers to an HTTP server",
		func(transport string) {
			url := startHTTPMCP(mcpTestServer(), "-transport", transport)
			fake.Script(sessToolReply("c_h", "mcp__remote__headers", map[string]any{}), llmtest.Reply{Text: "ok"})
			a := start()
			a.initialize()
			sid, states := a.newMCPSession(cwd, map[string]any{"type": transport, "name": "remote", "url": url,
				"headers": []any{map[string]any{"name": "X-Api-Key", "value": "k-123"}, map[string]any{"name": "Authorization", "value": "Bearer tok"}}})
			Expect(stateOf(states, "remote")["status"]).To(Equal("connected"))
			Expect(a.result(a.prompt(sid, "headers?"))["stopReason"]).To(Equal("end_turn"))
			got := toolResult(fake.Requests()[1], "c_h")
			Expect(got).To(ContainSubstring("X-Api-Key: k-123"))
			Expect(got).To(ContainSubstring("Authorization: Bearer tok"))
			a.finish()
		},
		Entry("Streamable HTTP", "http"),
		Entry("SSE", "sse"),
	)

	It("gives a stdio server the agent's environment without its secrets, the entry's env and PATH, and the session cwd (Anthropic format)", func() {
		bin := GinkgoT().TempDir()
		Expect(os.Symlink(mcpTestServer(), filepath.Join(bin, "my-mcp-server"))).To(Succeed())
		fake.Script(sessToolReply("c_env", "mcp__t__echo_env", map[string]any{"names": []string{"MCP_TOKEN", "PATH", "IAC_CODE_API_KEY", "FROM_AGENT"}}),
			llmtest.Reply{Text: "ok"})
		a := start("IAC_CODE_PROVIDER=chaos_anthropic", "FROM_AGENT=agent-value")
		a.initialize()
		sid, states := a.newMCPSession(cwd, map[string]any{"name": "t", "command": "my-mcp-server", "args": []any{},
			"env": []any{map[string]any{"name": "MCP_TOKEN", "value": "tok-1"}, map[string]any{"name": "PATH", "value": bin + ":/usr/bin:/bin"}}})
		Expect(stateOf(states, "t")["status"]).To(Equal("connected"))
		Expect(a.result(a.prompt(sid, "env?"))["stopReason"]).To(Equal("end_turn"))
		Expect(offered(fake.Requests()[0])).To(HaveKey("mcp__t__echo_env"))
		got := toolResult(fake.Requests()[1], "c_env")
		Expect(got).To(ContainSubstring("MCP_TOKEN=tok-1\nPATH=" + bin + ":/usr/bin:/bin\nIAC_CODE_API_KEY=<unset>\nFROM_AGENT=agent-value"))
		Expect(got).To(ContainSubstring("cwd=" + cwd))
		a.finish()
	})

	It("answers after the startup budget when a server hangs, reports the failed and the late ones, and the session works", func() {
		pidfile := filepath.Join(cwd, "pid") // in the cwd: the sandboxed server writes it
		fake.Script(llmtest.Reply{Text: "still here"})
		a := start("IAC_CODE_MCP_STARTUP_TIMEOUT=1s")
		a.result(a.request("initialize", map[string]any{"protocolVersion": 1,
			"clientCapabilities": map[string]any{"session": map[string]any{"notices": map[string]any{}}}}))
		began := time.Now()
		id := a.request("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{
			testServer("ok"),
			map[string]any{"name": "missing", "command": "no-such-mcp-server-e2e", "args": []any{}, "env": []any{}},
			testServer("hung", "-hang", "-pidfile", pidfile),
		}})
		res := a.result(id)
		took := time.Since(began)
		Expect(took).To(And(BeNumerically(">=", 900*time.Millisecond), BeNumerically("<", 3*time.Second)))
		states := mcpStates(res)
		Expect(stateOf(states, "ok")["status"]).To(Equal("connected"))
		Expect(stateOf(states, "missing")).To(And(HaveKeyWithValue("status", "failed"),
			HaveKeyWithValue("error", ContainSubstring(`command "no-such-mcp-server-e2e" not found in PATH`))))
		Expect(stateOf(states, "hung")["status"]).To(Equal("connecting"))
		_, notice := a.waitUpdate("notice", a.responseIndex(id))
		Expect(notice).To(And(HaveKeyWithValue("severity", "warning"), HaveKeyWithValue("title", "MCP server 'missing' failed")))
		// stderr is copied asynchronously; the warning may trail the answer.
		Eventually(a.stderr.String, 5*time.Second).Should(ContainSubstring("still starting after the startup budget"))

		Expect(a.messages()).NotTo(ContainElement(Satisfy(isChunk)), "no agent_message_chunk outside a prompt turn")

		sid := res["sessionId"].(string)
		Expect(a.result(a.prompt(sid, "hello"))["stopReason"]).To(Equal("end_turn"))
		names := toolNamesOf(fake.Requests()[0])
		Expect(names).To(ContainElement("mcp__ok__echo_env"))
		Expect(names).NotTo(ContainElement(HavePrefix("mcp__hung__")))
		_, pgid := mcpGroup(pidfile)
		Expect(a.result(a.request("session/close", map[string]any{"sessionId": sid}))).To(BeEmpty())
		groupGoneWithin(pgid, 5*time.Second)
		a.finish()
	})

	It("adds the tools of a server that connects after the answer at the next model request", func() {
		fake.Script(llmtest.Reply{Text: "with the late tools"})
		a := start("IAC_CODE_MCP_STARTUP_TIMEOUT=300ms")
		a.initialize()
		sid, states := a.newMCPSession(cwd, testServer("late", "-delay", "1s"))
		Expect(stateOf(states, "late")["status"]).To(Equal("connecting"))
		from := a.mark()
		late := a.waitMCPInfo(from, func(s []map[string]any) bool { return stateOf(s, "late")["status"] == "connected" })
		Expect(stateOf(late, "late")["tools"]).To(BeNumerically(">", 5))
		Expect(a.result(a.prompt(sid, "now"))["stopReason"]).To(Equal("end_turn"))
		Expect(toolNamesOf(fake.Requests()[0])).To(ContainElement("mcp__late__echo_env"))
		a.finish()
	})

	DescribeTable("leaves no process of a server started through sh -c",
		func(end func(a *agent, sid string)) {
			pidfile := filepath.Join(cwd, "pid") // in the cwd: the sandboxed server writes it
			a := start()
			a.initialize()
			// sh stays the group leader (the trailing command keeps it from
			// exec'ing the server), the server starts a child of its own.
			sid, states := a.newMCPSession(cwd, map[string]any{"name": "wrapped", "command": "sh", "env": []any{},
				"args": []any{"-c", `"$0" -pidfile "$1" -child; echo server ended >&2`, mcpTestServer(), pidfile}})
			Expect(stateOf(states, "wrapped")["status"]).To(Equal("connected"))
			_, pgid := mcpGroup(pidfile)
			Expect(procgroup.Alive(pgid)).To(BeTrue())
			end(a, sid)
			groupGoneWithin(pgid, 5*time.Second)
		},
		Entry("session/close", func(a *agent, sid string) {
			Expect(a.result(a.request("session/close", map[string]any{"sessionId": sid}))).To(BeEmpty())
			a.finish()
		}),
		Entry("stdin EOF", func(a *agent, _ string) { a.finish() }),
		Entry("SIGTERM", func(a *agent, _ string) {
			Expect(a.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
			Expect(a.exitWithin(10 * time.Second)).To(Succeed())
		}),
		Entry("kill -9 of the server (the watchdog)", func(a *agent, _ string) {
			Expect(a.cmd.Process.Kill()).To(Succeed())
			_ = a.exitWithin(10 * time.Second)
		}),
	)

	It("reports a server that crashes; its tools leave, the session goes on", func() {
		fake.Script(sessToolReply("c_crash", "mcp__t__crash", map[string]any{}), llmtest.Reply{Text: "it crashed"},
			llmtest.Reply{Text: "fine"})
		a := start()
		a.initialize()
		sid, _ := a.newMCPSession(cwd, testServer("t"))
		from := a.mark()
		id := a.prompt(sid, "crash it")
		a.answer(a.serverRequest("session/request_permission", 0)["id"], sessAllow("allow_once"))
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(finalUpdate(a.updatesBefore(id), "c_crash")["status"]).To(Equal("failed"))
		states := a.waitMCPInfo(from, func(s []map[string]any) bool { return stateOf(s, "t")["status"] == "failed" })
		Expect(stateOf(states, "t")["error"]).To(ContainSubstring("server exited"))
		Expect(a.result(a.prompt(sid, "and now?"))["stopReason"]).To(Equal("end_turn"))
		Expect(toolNamesOf(lastRequest(fake))).NotTo(ContainElement(HavePrefix("mcp__t__")))
		a.finish()
	})

	It("follows tools/list_changed: a new tool joins at the next model request", func() {
		fake.Script(sessToolReply("c_add", "mcp__t__add_tool", map[string]any{"name": "late_tool"}), llmtest.Reply{Text: "added"},
			sessToolReply("c_late", "mcp__t__late_tool", map[string]any{}), llmtest.Reply{Text: "called"})
		a := start()
		a.initialize()
		sid, states := a.newMCPSession(cwd, testServer("t"))
		before := stateOf(states, "t")["tools"].(float64)
		from := a.mark()
		first := a.prompt(sid, "add a tool")
		a.answer(a.serverRequest("session/request_permission", 0)["id"], sessAllow("allow_once"))
		Expect(a.result(first)["stopReason"]).To(Equal("end_turn"))
		Expect(toolNamesOf(fake.Requests()[0])).NotTo(ContainElement("mcp__t__late_tool"))
		a.waitMCPInfo(from, func(s []map[string]any) bool { return stateOf(s, "t")["tools"] == before+1 })

		second := a.prompt(sid, "call it")
		Expect(a.result(second)["stopReason"]).To(Equal("end_turn"))
		Expect(toolNamesOf(fake.Requests()[2])).To(ContainElement("mcp__t__late_tool"))
		Expect(toolResult(fake.Requests()[3], "c_late")).To(Equal("hello from late_tool"))
		a.finish()
	})

	It("restores the tools on session/load, and reuses the servers of a live session", func() {
		home := GinkgoT().TempDir()
		pidfile := filepath.Join(cwd, "pid") // in the cwd: the sandboxed server writes it
		server := testServer("t", "-pidfile", pidfile)
		a := start("IAC_CODE_HOME=" + home)
		a.initialize()
		sid, _ := a.newMCPSession(cwd, server)
		pid, _ := mcpGroup(pidfile)
		Expect(a.result(a.prompt(sid, "one"))["stopReason"]).To(Equal("end_turn"))
		load := a.result(a.request("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{server}}))
		Expect(stateOf(mcpStates(load), "t")["status"]).To(Equal("connected"))
		again, pgid := mcpGroup(pidfile)
		Expect(again).To(Equal(pid), "the live session kept its server")
		load = a.result(a.request("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
		Expect(mcpStates(load)).To(BeEmpty(), "a load without the server closes it")
		groupGoneWithin(pgid, 5*time.Second)
		a.finish()

		b := start("IAC_CODE_HOME=" + home)
		b.initialize()
		load = b.result(b.request("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{server}}))
		Expect(stateOf(mcpStates(load), "t")["status"]).To(Equal("connected"))
		Expect(b.result(b.prompt(sid, "two"))["stopReason"]).To(Equal("end_turn"))
		Expect(toolNamesOf(lastRequest(fake))).To(ContainElement("mcp__t__echo_env"))
		b.finish()
	})

	It("gives sub-agents the MCP tools their type allows", func() {
		fake.Script(
			sessToolReply("ag", "agent", map[string]any{"prompt": "look around", "description": "explore", "subagent_type": "explore"}),
			sessToolReply("sub", "mcp__t__echo_env", map[string]any{"names": []string{"HOME"}}),
			llmtest.Reply{Text: "explored"},
			llmtest.Reply{Text: "done"},
		)
		a := start()
		a.initialize()
		sid, _ := a.newMCPSession(cwd, testServer("t"))
		id := a.prompt(sid, "explore")
		a.answer(a.serverRequest("session/request_permission", 0)["id"], sessAllow("allow_once"))
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		sub := toolNamesOf(fake.Requests()[1])
		Expect(sub).To(ContainElement("mcp__t__echo_env"), "read-only MCP tools")
		Expect(sub).NotTo(ContainElement("mcp__t__write_note"), "an explore sub-agent gets no MCP tool that is not read-only")
		Expect(finalUpdate(a.updatesBefore(id), "sub")["status"]).To(Equal("completed"))
		Expect(toolResult(fake.Requests()[2], "sub")).To(ContainSubstring("HOME="))
		a.finish()
	})

	It("closes the servers of an idle session evicted from memory and starts them again when it comes back", func() {
		pidfile := filepath.Join(cwd, "pid") // in the cwd: the sandboxed server writes it
		fake.Script(llmtest.Reply{Text: "one"}, llmtest.Reply{Text: "two"})
		a := start("IAC_CODE_SESSION_IDLE=300ms")
		a.initialize()
		sid, _ := a.newMCPSession(cwd, testServer("t", "-pidfile", pidfile))
		firstPID, pgid := mcpGroup(pidfile)
		Eventually(a.stderr.String, 20*time.Second, 50*time.Millisecond).Should(ContainSubstring("idle session evicted from memory"))
		groupGoneWithin(pgid, 5*time.Second)
		Expect(a.result(a.prompt(sid, "back"))["stopReason"]).To(Equal("end_turn"))
		Expect(toolNamesOf(lastRequest(fake))).To(ContainElement("mcp__t__echo_env"), "the prompt waited for the restarted server")
		secondPID, _ := mcpGroup(pidfile)
		Expect(secondPID).NotTo(Equal(firstPID))
		a.finish()
	})

	It("answers a prompt held for starting servers cancelled when the client cancels it", func() {
		fake.Script(llmtest.Reply{Text: "after"})
		a := start("IAC_CODE_SESSION_IDLE=300ms", "IAC_CODE_MCP_STARTUP_TIMEOUT=1s")
		a.initialize()
		sid, _ := a.newMCPSession(cwd, testServer("hung", "-hang"))
		Eventually(a.stderr.String, 20*time.Second, 50*time.Millisecond).Should(ContainSubstring("idle session evicted from memory"))
		id := a.prompt(sid, "brought back, its server hangs") // held for the startup budget
		a.notify("session/cancel", map[string]any{"sessionId": sid})
		Expect(a.result(id)["stopReason"]).To(Equal("cancelled"))
		Expect(fake.Requests()).To(BeEmpty(), "the held prompt never reached the model")
		Expect(a.result(a.prompt(sid, "again"))["stopReason"]).To(Equal("end_turn"))
		a.finish()
	})

	It("refuses a malformed entry with -32602 naming it", func() {
		a := start()
		a.initialize()
		e := a.errorOf(a.request("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{
			testServer("good"), map[string]any{"type": "http", "name": "docs", "headers": []any{}}}}))
		Expect(e["code"]).To(Equal(-32602.0))
		Expect(e["data"]).To(HaveKeyWithValue("mcpServers", `mcpServers[1] ("docs"): url is required`))
		e = a.errorOf(a.request("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{
			map[string]any{"type": "acp", "name": "x", "serverId": "s"}}}))
		Expect(e["data"]).To(HaveKeyWithValue("mcpServers", ContainSubstring(`unknown type "acp"`)))
		a.finish()
	})

	It("works with the TypeScript SDK client, every message schema-checked", Label("node"), func() {
		fake.Script(sessToolReply("c_sum", "mcp__everything__get_sum", map[string]any{"a": 1, "b": 1}), llmtest.Reply{Text: "2"})
		servers, err := json.Marshal([]any{everything("everything")})
		Expect(err).NotTo(HaveOccurred())
		run := runTSClient(agentEnv(fake), stdioArgs("mcp", cwd, "--mcp-servers", string(servers), "--text", "sum")...)
		Expect(stateOf(mcpStates(run.Result["session"].(map[string]any)), "everything")["status"]).To(Equal("connected"))
		Expect(run.Result["prompt"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(finalUpdate(run.Updates, "c_sum")["status"]).To(Equal("completed"))
	})
})

var _ = Describe("MCP prompts as slash commands", Label("e2e", "mcp", "acp-stable"), func() {
	It("lists the prompts of the test and reference servers, runs them with arguments as the user turn, and answers failures in text", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		fake.Script(llmtest.Reply{Text: "reviewed"}, llmtest.Reply{Text: "sunny"}, llmtest.Reply{Text: "simple"})
		a := startAgent(agentEnv(fake))
		a.initialize()
		from := a.mark()
		sid, states := a.newMCPSession(GinkgoT().TempDir(), testServer("t"), everything("everything"))
		Expect(states).To(HaveEach(HaveKeyWithValue("status", "connected")))
		_, cmds := a.waitUpdate("available_commands_update", from)
		hints := map[string]any{}
		for _, c := range cmds["availableCommands"].([]any) {
			c := c.(map[string]any)
			hints[c["name"].(string)] = c["input"]
		}
		Expect(hints).To(HaveKey("mcp__everything__simple_prompt"))
		Expect(hints).To(HaveKeyWithValue("mcp__t__review", HaveKeyWithValue("hint", "focus")))
		Expect(hints).To(HaveKeyWithValue("mcp__everything__args_prompt", HaveKeyWithValue("hint", ContainSubstring("city=…"))))

		userTurn := func(n int) any {
			msgs := fake.Requests()[n].JSON()["messages"].([]any)
			return msgs[len(msgs)-1].(map[string]any)["content"]
		}
		run := func(text string) (int, float64) {
			from := a.mark()
			id := a.prompt(sid, text)
			Expect(a.result(id)["stopReason"]).To(Equal("end_turn"), text)
			return from, id
		}
		from, id := run("/mcp__t__review the error paths")
		Expect(userTurn(0)).To(ContainSubstring("Review the code, focusing on: the error paths"))
		var shown []string
		for _, u := range a.sessionUpdates(sid, from, id) {
			if u["sessionUpdate"] == "user_message_chunk" {
				shown = append(shown, u["content"].(map[string]any)["text"].(string))
			}
		}
		Expect(shown).To(Equal([]string{"Review the code, focusing on: the error paths"}))
		Expect(agentText(a, from)).To(Equal("reviewed"))

		run("/mcp__everything__args_prompt state=Oregon Portland")
		Expect(userTurn(1)).To(ContainSubstring("What's weather in Portland, Oregon?"))
		run("/mcp__everything__simple_prompt")
		Expect(userTurn(2)).To(ContainSubstring("This is a simple prompt without arguments."))

		from, _ = run("/mcp__t__broken")
		Expect(agentText(a, from)).To(And(HavePrefix("The MCP prompt could not be got:"), ContainSubstring("the prompt store is unavailable")))
		from, _ = run("/mcp__everything__args_prompt")
		Expect(agentText(a, from)).To(HavePrefix("Missing argument: city"))
		from, _ = run("/mcp__gone__x")
		Expect(agentText(a, from)).To(HavePrefix("Unknown command /mcp__gone__x"))
		Expect(fake.Requests()).To(HaveLen(3), "no model call for the failures")
		a.finish()
	})
})
