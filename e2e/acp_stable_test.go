package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/store/pgtest"
	"github.com/iac-code/iac-code/tools/sandbox"
)

// The stable ACP parts added in 0.2 (issue 24), over raw JSON-RPC on stdio.
var _ = Describe("stable ACP parts over stdio", Label("e2e", "acp-stable"), func() {
	var (
		fake *llmtest.Server
		home string
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		home, cwd = GinkgoT().TempDir(), GinkgoT().TempDir()
	})
	start := func(extra ...string) *agent {
		return startAgent(agentEnv(fake, append([]string{"IAC_CODE_HOME=" + home}, extra...)...))
	}

	It("titles a session from the first text block only (Goose sends a second one with every prompt)", func() {
		a := start()
		a.initialize()
		sid := a.newSession(cwd)
		from := a.mark()
		id := a.request("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{
			map[string]any{"type": "text", "text": "  "},
			map[string]any{"type": "text", "text": "Fix the login bug"},
			map[string]any{"type": "text", "text": "<context>goose: the current time is 12:00</context>"},
		}})
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		_, info := a.waitUpdate("session_info_update", from)
		Expect(info).To(HaveKeyWithValue("title", "Fix the login bug"))
		list := a.result(a.request("session/list", map[string]any{}))["sessions"].([]any)
		Expect(list[0]).To(HaveKeyWithValue("title", "Fix the login bug"))
		Expect(readMeta(home, sid)).To(HaveKeyWithValue("title", "Fix the login bug"))
		a.finish()
	})

	It("deletes a session: files and tool outputs gone, not listed, load and prompt -32002; a live one is closed first", func() {
		big := strings.Repeat(strings.Repeat("x", 99)+"\n", 800) // 80,000 characters: spilled
		Expect(os.WriteFile(filepath.Join(cwd, "big.txt"), []byte(big), 0o600)).To(Succeed())
		fake.Script(sessToolReply("r1", "read_file", map[string]any{"path": "big.txt"}), llmtest.Reply{Text: "read it"},
			llmtest.Reply{Text: "kept"})
		a := start()
		init := a.initialize()
		Expect(init["agentCapabilities"].(map[string]any)["sessionCapabilities"]).To(HaveKeyWithValue("delete", map[string]any{}))
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "read big.txt"))["stopReason"]).To(Equal("end_turn"))
		spilled, _ := filepath.Glob(filepath.Join(home, "tool-outputs", "*.txt"))
		Expect(spilled).To(HaveLen(1), "the large output was saved")
		other := a.newSession(cwd)
		Expect(a.result(a.prompt(other, "hello"))["stopReason"]).To(Equal("end_turn"))

		Expect(a.result(a.request("session/delete", map[string]any{"sessionId": sid}))).To(BeEmpty())
		Expect(filepath.Join(home, "sessions", sid)).NotTo(BeADirectory())
		Expect(spilled[0]).NotTo(BeAnExistingFile())
		var listed []string
		for _, s := range a.result(a.request("session/list", map[string]any{}))["sessions"].([]any) {
			listed = append(listed, s.(map[string]any)["sessionId"].(string))
		}
		Expect(listed).To(ConsistOf(other))
		notFound := map[string]any{"sessionId": sid, "session_id": "Session not found"}
		for _, id := range []float64{
			a.request("session/load", loadParams(sid, cwd)),
			a.prompt(sid, "still there?"),
			a.request("session/delete", map[string]any{"sessionId": sid}),
		} {
			e := a.errorOf(id)
			Expect(e["code"]).To(Equal(-32002.0))
			Expect(e["data"]).To(Equal(notFound))
		}
		Expect(a.result(a.prompt(other, "and you?"))["stopReason"]).To(Equal("end_turn"))
		a.finish()
	})

	DescribeTable("deletes a session with the TypeScript SDK client", Label("node"),
		func(postgres bool) {
			env := agentEnv(fake, "IAC_CODE_HOME="+home)
			if postgres {
				srv, err := pgtest.SharedOrSkip(Skip)
				Expect(err).NotTo(HaveOccurred())
				schema, dbURL, err := srv.NewSchema()
				Expect(err).NotTo(HaveOccurred())
				DeferCleanup(srv.DropSchema, schema)
				env = append(env, "IAC_CODE_STORE_URL="+dbURL)
			}
			run := runTSClient(env, stdioArgs("delete", cwd)...)
			Expect(run.Result["deleted"]).To(BeEmpty())
			Expect(run.Result["again"]).To(BeEmpty())
			sid := run.Result["sessionId"]
			for _, k := range []string{"rejectedLoad", "rejectedPrompt"} {
				Expect(run.Result[k]).To(HaveKeyWithValue("code", -32002.0), k)
				Expect(run.Result[k]).To(HaveKeyWithValue("data", HaveKeyWithValue("sessionId", sid)), k)
			}
			if !postgres {
				Expect(filepath.Join(home, "sessions", sid.(string))).NotTo(BeADirectory())
			}
		},
		Entry("file store", false),
		Entry("PostgreSQL store", Label("postgres"), true),
	)

	It("shows the diff and locations in write and edit permission requests, equal to the completed call's; names every tool call, on replay too", func() {
		Expect(os.WriteFile(filepath.Join(cwd, "notes.txt"), []byte("alpha\nbeta\n"), 0o600)).To(Succeed())
		fake.Script(
			sessToolReply("e1", "edit_file", map[string]any{"path": "notes.txt", "old_string": "beta", "new_string": "gamma"}),
			sessToolReply("w1", "write_file", map[string]any{"path": "new.txt", "content": "fresh\n"}),
			llmtest.Reply{Text: "done"})
		a := start()
		a.initialize()
		sid := a.newSession(cwd)
		from := a.mark()
		id := a.prompt(sid, "edit and write")
		for n, want := range []struct{ tool, file string }{{"edit_file", "notes.txt"}, {"write_file", "new.txt"}} {
			req := a.serverRequest("session/request_permission", n)
			tc := req["params"].(map[string]any)["toolCall"].(map[string]any)
			path := filepath.Join(cwd, want.file)
			Expect(tc["locations"]).To(ContainElement(HaveKeyWithValue("path", path)), want.tool)
			var asked map[string]any
			for _, c := range tc["content"].([]any) {
				if c.(map[string]any)["type"] == "diff" {
					asked = c.(map[string]any)
				}
			}
			Expect(asked).To(HaveKeyWithValue("path", path), want.tool)
			a.answer(req["id"], sessAllow("allow_once"))
			_, done := a.waitFor(want.tool+" completed", func(m map[string]any) bool {
				u := updateOf(m)
				return u != nil && u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed" &&
					u["toolCallId"] == tc["toolCallId"]
			})
			var completed map[string]any
			for _, c := range updateOf(done)["content"].([]any) {
				if c.(map[string]any)["type"] == "diff" {
					completed = c.(map[string]any)
				}
			}
			Expect(asked).To(Equal(completed), want.tool+": the diff approved is the diff applied")
		}
		Expect(toolCallNames(a, from)).To(Equal([]string{"edit_file", "write_file"}))
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(os.ReadFile(filepath.Join(cwd, "notes.txt"))).To(Equal([]byte("alpha\ngamma\n")))

		By("the replay of another connection names the tool calls too")
		a.finish()
		b := start()
		b.initialize()
		from = b.mark()
		b.result(b.request("session/load", loadParams(sid, cwd)))
		Expect(toolCallNames(b, from)).To(Equal([]string{"edit_file", "write_file"}))
		b.finish()
	})
})

var _ = Describe("additionalDirectories over stdio", Label("e2e", "acp-stable"), func() {
	It("treats additional directories as inside for the permission policy, lists them, and takes the complete list on load", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		home, cwd, extra, outside := GinkgoT().TempDir(), GinkgoT().TempDir(), GinkgoT().TempDir(), GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(extra, "lib.txt"), []byte("from the library\n"), 0o600)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("SECRET\n"), 0o600)).To(Succeed())
		fake.Script(
			sessToolReply("r1", "read_file", map[string]any{"path": filepath.Join(extra, "lib.txt")}),
			sessToolReply("w1", "write_file", map[string]any{"path": filepath.Join(extra, "new.txt"), "content": "edited\n"}),
			sessToolReply("r2", "read_file", map[string]any{"path": filepath.Join(outside, "secret.txt")}),
			llmtest.Reply{Text: "done"})
		env := agentEnv(fake, "IAC_CODE_HOME="+home)
		a := startAgent(env)
		init := a.initialize()
		Expect(init["agentCapabilities"].(map[string]any)["sessionCapabilities"]).To(HaveKeyWithValue("additionalDirectories", map[string]any{}))

		By("each entry must be an absolute path of an existing directory")
		for _, bad := range []string{"relative/dir", filepath.Join(extra, "missing"), filepath.Join(extra, "lib.txt")} {
			e := a.errorOf(a.request("session/new", map[string]any{"cwd": cwd, "additionalDirectories": []any{bad}}))
			Expect(e["code"]).To(Equal(-32602.0), bad)
			Expect(e["data"]).To(HaveKey("additionalDirectories"), bad)
		}

		sid := a.result(a.request("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{},
			"additionalDirectories": []any{extra}}))["sessionId"].(string)
		Expect(a.result(a.request("session/set_mode", map[string]any{"sessionId": sid, "modeId": "accept_edits"}))).To(BeEmpty())
		id := a.prompt(sid, "read, write, read")
		By("a read and, in accept_edits, a write in the additional directory need no permission; a read outside asks")
		req := a.serverRequest("session/request_permission", 0)
		tc := req["params"].(map[string]any)["toolCall"].(map[string]any)
		Expect(tc["locations"]).To(ContainElement(HaveKeyWithValue("path", filepath.Join(outside, "secret.txt"))))
		a.answer(req["id"], sessAllow("reject_once"))
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(os.ReadFile(filepath.Join(extra, "new.txt"))).To(Equal([]byte("edited\n")))
		results := map[string]string{}
		for _, r := range lastRequest(fake).ToolResults() {
			results[r.ID] = r.Content
		}
		Expect(results["r1"]).To(ContainSubstring("from the library"))
		Expect(results["r2"]).NotTo(ContainSubstring("SECRET"))
		n := 0
		for _, m := range a.messages() {
			if m["method"] == "session/request_permission" {
				n++
			}
		}
		Expect(n).To(Equal(1), "only the read outside asked")

		By("session/list reports them; a load takes the complete list it is given (none when omitted)")
		list := a.result(a.request("session/list", map[string]any{}))["sessions"].([]any)
		Expect(list[0]).To(HaveKeyWithValue("additionalDirectories", []any{extra}))
		a.result(a.request("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{},
			"additionalDirectories": []any{outside}}))
		list = a.result(a.request("session/list", map[string]any{}))["sessions"].([]any)
		Expect(list[0]).To(HaveKeyWithValue("additionalDirectories", []any{outside}))
		a.result(a.request("session/load", loadParams(sid, cwd)))
		list = a.result(a.request("session/list", map[string]any{}))["sessions"].([]any)
		Expect(list[0]).NotTo(HaveKey("additionalDirectories"))
		a.finish()
	})
})

// agentText is the agent_message_chunk text from wire position from.
func agentText(a *agent, from int) string {
	var b strings.Builder
	for _, m := range a.messages()[from:] {
		if u := updateOf(m); u != nil && u["sessionUpdate"] == "agent_message_chunk" {
			b.WriteString(u["content"].(map[string]any)["text"].(string))
		}
	}
	return b.String()
}

var _ = Describe("slash commands over stdio", Label("e2e", "acp-stable"), func() {
	It("lists /model, /mode, /status and /init; runs each: the first three without a model call, /init through the tools and permissions", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		home, cwd := GinkgoT().TempDir(), GinkgoT().TempDir()
		fake.Script(sessToolReply("w1", "write_file", map[string]any{"path": "AGENTS.md", "content": "# Agents\nRun go test.\n"}),
			llmtest.Reply{Text: "Wrote AGENTS.md."})
		a := startAgent(agentEnv(fake, "IAC_CODE_HOME="+home, "IAC_CODE_PROVIDER=openai", "IAC_CODE_MODEL=o4-mini"))
		a.initialize()
		from := a.mark()
		sid := a.newSession(cwd)
		_, cmds := a.waitUpdate("available_commands_update", from)
		var names []string
		for _, c := range cmds["availableCommands"].([]any) {
			names = append(names, c.(map[string]any)["name"].(string))
		}
		Expect(names).To(ContainElements("model", "mode", "status", "init"))

		run := func(text string) string {
			from := a.mark()
			Expect(a.result(a.prompt(sid, text))["stopReason"]).To(Equal("end_turn"), text)
			return agentText(a, from)
		}
		Expect(run("/model")).To(And(ContainSubstring("Model: o4-mini"), ContainSubstring("gpt-4.1")))
		from = a.mark()
		Expect(run("/model gpt-4.1")).To(Equal("Model set to gpt-4.1."))
		_, upd := a.waitUpdate("config_option_update", from)
		Expect(upd["configOptions"]).To(ContainElement(And(HaveKeyWithValue("id", "model"), HaveKeyWithValue("currentValue", "gpt-4.1"))))
		Expect(run("/model nope")).To(HavePrefix(`Unknown model "nope"`))
		from = a.mark()
		Expect(run("/mode plan")).To(Equal("Mode set to plan."))
		_, mode := a.waitUpdate("current_mode_update", from)
		Expect(mode).To(HaveKeyWithValue("currentModeId", "plan"))
		Expect(run("/mode")).To(ContainSubstring("Mode: plan"))
		status := run("/status")
		Expect(status).To(And(ContainSubstring("Provider: openai"), ContainSubstring("Model: gpt-4.1"), ContainSubstring("Sandbox: "),
			ContainSubstring("Context: about"), ContainSubstring("MCP servers: none"), ContainSubstring("AGENTS.md: none")))
		Expect(fake.Requests()).To(BeEmpty(), "no model call for /model, /mode, /status")

		By("/init asks the model to write AGENTS.md with its tools; the write asks for permission")
		run("/mode default")
		id := a.prompt(sid, "/init")
		req := a.serverRequest("session/request_permission", 0)
		a.answer(req["id"], sessAllow("allow_once"))
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(fake.Requests()[0].JSON()["messages"]).To(ContainElement(HaveKeyWithValue("content", ContainSubstring("AGENTS.md"))))
		Expect(os.ReadFile(filepath.Join(cwd, "AGENTS.md"))).To(Equal([]byte("# Agents\nRun go test.\n")))
		Expect(run("/status")).To(ContainSubstring("AGENTS.md: present"))
		a.finish()
	})
})

var _ = Describe("compaction updates over stdio", Label("e2e", "acp-stable"), func() {
	It("sends compaction_update in_progress, the summary and completed to a client that advertises session.compaction, text to others", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd := GinkgoT().TempDir()
		for _, advertised := range []bool{true, false} {
			fake.Script(llmtest.Reply{Text: "a1"}, llmtest.Reply{Text: "a2"}, llmtest.Reply{Text: "SUMMARY of turn one"})
			a := startAgent(agentEnv(fake))
			caps := map[string]any{}
			if advertised {
				caps["session"] = map[string]any{"compaction": map[string]any{}}
			}
			a.initializeWith(caps)
			sid := a.newSession(cwd)
			a.result(a.prompt(sid, "u1"))
			a.result(a.prompt(sid, "u2"))
			from := a.mark()
			p := a.prompt(sid, "/compact")
			Expect(a.result(p)["stopReason"]).To(Equal("end_turn"))
			ups := a.sessionUpdates(sid, from, p)
			var kinds []string
			for _, u := range ups {
				kinds = append(kinds, u["sessionUpdate"].(string))
			}
			// the last one: the turn's end (_meta.activeTurn null)
			Expect(ups[len(ups)-1]).To(HaveKeyWithValue("_meta", HaveKeyWithValue("activeTurn", BeNil())))
			if !advertised {
				Expect(kinds).To(Equal([]string{"agent_message_chunk", "session_info_update"}))
				Expect(chatText(ups, "agent_message_chunk")).To(HavePrefix("Context compacted: "))
				a.finish()
				continue
			}
			Expect(kinds).To(Equal([]string{"compaction_update", "compaction_summary_chunk", "compaction_update", "session_info_update"}))
			id := ups[0]["compactionId"]
			Expect(id).NotTo(BeEmpty())
			Expect(ups[0]).To(HaveKeyWithValue("status", "in_progress"))
			Expect(ups[1]).To(And(HaveKeyWithValue("compactionId", id),
				HaveKeyWithValue("content", map[string]any{"type": "text", "text": "SUMMARY of turn one"})))
			Expect(ups[2]).To(And(HaveKeyWithValue("compactionId", id), HaveKeyWithValue("status", "completed")))
			a.finish()
		}
	})
})

// toolNames are the tools a recorded OpenAI-format request offers.
func toolNames(r llmtest.RecordedRequest) []string {
	var names []string
	list, _ := r.JSON()["tools"].([]any)
	for _, t := range list {
		names = append(names, t.(map[string]any)["function"].(map[string]any)["name"].(string))
	}
	return names
}

var _ = Describe("ask_user and elicitation/create over stdio", Label("e2e", "acp-stable"), func() {
	It("offers ask_user only to a client that advertises form elicitation; the answer, a decline or a cancel is the tool result", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd := GinkgoT().TempDir()

		By("no elicitation capability: no ask_user")
		fake.Script(llmtest.Reply{Text: "hi"})
		plain := startAgent(agentEnv(fake))
		plain.initialize()
		sid := plain.newSession(cwd)
		plain.result(plain.prompt(sid, "hello"))
		Expect(toolNames(fake.Requests()[0])).To(ContainElement("read_file"))
		Expect(toolNames(fake.Requests()[0])).NotTo(ContainElement("ask_user"))
		plain.finish()

		fake.Script(
			sessToolReply("q1", "ask_user", map[string]any{"question": "Which colour?", "options": []any{"red", "blue"}}),
			sessToolReply("q2", "ask_user", map[string]any{"question": "Your name?"}),
			llmtest.Reply{Text: "thanks"})
		a := startAgent(agentEnv(fake))
		a.initializeWith(map[string]any{"elicitation": map[string]any{"form": map[string]any{}}})
		sid = a.newSession(cwd)
		id := a.prompt(sid, "ask me")
		q := a.serverRequest("elicitation/create", 0)
		params := q["params"].(map[string]any)
		Expect(params).To(And(HaveKeyWithValue("sessionId", sid), HaveKeyWithValue("mode", "form"),
			HaveKeyWithValue("message", "Which colour?"), HaveKey("toolCallId")))
		answer := params["requestedSchema"].(map[string]any)["properties"].(map[string]any)["answer"].(map[string]any)
		Expect(answer["oneOf"]).To(Equal([]any{map[string]any{"const": "red", "title": "red"}, map[string]any{"const": "blue", "title": "blue"}}))
		a.answer(q["id"], map[string]any{"action": "accept", "content": map[string]any{"answer": "blue"}})
		q = a.serverRequest("elicitation/create", 1)
		Expect(q["params"].(map[string]any)["requestedSchema"].(map[string]any)["properties"].(map[string]any)["answer"]).NotTo(HaveKey("oneOf"))
		a.answer(q["id"], map[string]any{"action": "decline"})
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		results := map[string]string{}
		for _, r := range lastRequest(fake).ToolResults() {
			results[r.ID] = r.Content
		}
		Expect(results).To(Equal(map[string]string{"q1": "The user answered: blue", "q2": "The user declined to answer."}))
		Expect(toolNames(fake.Requests()[1])).To(ContainElement("ask_user"))
		a.finish()
	})
})

var _ = Describe("ask_user with the TypeScript SDK client", Label("e2e", "acp-stable", "node"), func() {
	It("answers elicitation/create through the SDK's handler; the accepted answer and a cancel are the tool results", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		fake.Script(
			sessToolReply("q1", "ask_user", map[string]any{"question": "Which database?", "options": []any{"sqlite", "postgres"}}),
			sessToolReply("q2", "ask_user", map[string]any{"question": "Any deadline?"}),
			llmtest.Reply{Text: "noted"})
		run := runTSClient(agentEnv(fake), stdioArgs("elicitation", GinkgoT().TempDir(), "--text", "set things up",
			"--elicitation-answer", `{"action":"accept","content":{"answer":"postgres"}}`)...)
		Expect(run.Result["prompt"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		asked := run.Result["elicitations"].([]any)
		Expect(asked).To(HaveLen(2))
		first := asked[0].(map[string]any)
		Expect(first).To(And(HaveKeyWithValue("sessionId", run.Result["sessionId"]), HaveKeyWithValue("mode", "form"),
			HaveKeyWithValue("message", "Which database?"), HaveKeyWithValue("toolCallId", "q1")))
		Expect(first["requestedSchema"]).To(HaveKeyWithValue("properties", HaveKeyWithValue("answer",
			HaveKeyWithValue("oneOf", ConsistOf(HaveKeyWithValue("const", "sqlite"), HaveKeyWithValue("const", "postgres"))))))
		Expect(asked[1]).To(HaveKeyWithValue("message", "Any deadline?"))
		results := map[string]string{}
		for _, r := range lastRequest(fake).ToolResults() {
			results[r.ID] = r.Content
		}
		Expect(results).To(HaveKeyWithValue("q1", "The user answered: postgres"))
		Expect(results).To(HaveKeyWithValue("q2", ContainSubstring("cancel")))
		Expect(toolNames(fake.Requests()[0])).To(ContainElement("ask_user"))
	})
})

var _ = Describe("boolean config options over stdio", Label("e2e", "acp-stable"), func() {
	It("offers auto_compact (boolean) to a client that advertises boolean options; off, a full context is not compacted; the choice is the new default", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		home, cwd := GinkgoT().TempDir(), GinkgoT().TempDir()
		long := func(tag string) string { return tag + " " + strings.Repeat(tag[:1], 1000) }
		fake.Script(llmtest.Reply{Text: "a1"}, llmtest.Reply{Text: "a2"}, llmtest.Reply{Text: "a3"}, llmtest.Reply{Text: "a4"})
		env := agentEnv(fake, "IAC_CODE_HOME="+home, "IAC_CODE_CONTEXT_WINDOW=1000")
		autoCompact := func(opts any) any {
			for _, o := range opts.([]any) {
				if o.(map[string]any)["id"] == "auto_compact" {
					Expect(o).To(HaveKeyWithValue("type", "boolean"))
					return o.(map[string]any)["currentValue"]
				}
			}
			return nil
		}

		plain := startAgent(env)
		plain.initialize()
		res := plain.result(plain.request("session/new", map[string]any{"cwd": cwd}))
		Expect(autoCompact(res["configOptions"])).To(BeNil(), "not offered without the capability")
		plain.finish()

		a := startAgent(env)
		a.initializeWith(map[string]any{"session": map[string]any{"configOptions": map[string]any{"boolean": map[string]any{}}}})
		res = a.result(a.request("session/new", map[string]any{"cwd": cwd}))
		sid := res["sessionId"].(string)
		Expect(autoCompact(res["configOptions"])).To(BeTrue())
		set := a.result(a.request("session/set_config_option", map[string]any{"sessionId": sid, "configId": "auto_compact",
			"type": "boolean", "value": false}))
		Expect(autoCompact(set["configOptions"])).To(BeFalse())
		for _, t := range []string{"u1", "u2", "u3", "u4"} {
			Expect(a.result(a.prompt(sid, long(t)))["stopReason"]).To(Equal("end_turn"))
		}
		Expect(fake.Requests()).To(HaveLen(4), "no summary call")
		Expect(chatTexts(lastRequest(fake))[0]).To(Equal(long("u1")), "the whole context went to the model")
		res = a.result(a.request("session/new", map[string]any{"cwd": cwd}))
		Expect(autoCompact(res["configOptions"])).To(BeFalse(), "the last choice is the default")
		a.finish()
	})
})

// thoughtOption is the thought_level option of a configOptions list, or nil.
func thoughtOption(opts any) map[string]any {
	list, _ := opts.([]any)
	for _, o := range list {
		if o.(map[string]any)["id"] == "thought_level" {
			return o.(map[string]any)
		}
	}
	return nil
}

var _ = Describe("the thought_level config option over stdio", Label("e2e", "acp-stable"), func() {
	var (
		fake *llmtest.Server
		home string
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		home, cwd = GinkgoT().TempDir(), GinkgoT().TempDir()
	})
	newSession := func(a *agent) (string, map[string]any) {
		res := a.result(a.request("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))
		return res["sessionId"].(string), res
	}
	setOption := func(a *agent, sid, id, value string) map[string]any {
		return a.result(a.request("session/set_config_option", map[string]any{"sessionId": sid, "configId": id, "value": value}))
	}

	It("sends OpenAI reasoning_effort for o4-mini, nothing for gpt-4.1, and makes the last choice the default of new sessions", func() {
		a := startAgent(agentEnv(fake, "IAC_CODE_HOME="+home, "IAC_CODE_PROVIDER=openai", "IAC_CODE_MODEL=o4-mini"))
		a.initialize()
		sid, res := newSession(a)
		opt := thoughtOption(res["configOptions"])
		Expect(opt).To(And(HaveKeyWithValue("category", "thought_level"), HaveKeyWithValue("currentValue", "default")))
		Expect(thoughtOption(setOption(a, sid, "thought_level", "high")["configOptions"])).To(HaveKeyWithValue("currentValue", "high"))
		Expect(a.result(a.prompt(sid, "think hard"))["stopReason"]).To(Equal("end_turn"))
		Expect(lastRequest(fake).JSON()).To(HaveKeyWithValue("reasoning_effort", "high"))

		Expect(thoughtOption(setOption(a, sid, "model", "gpt-4.1")["configOptions"])).To(BeNil(), "gpt-4.1 takes no level")
		e := a.errorOf(a.request("session/set_config_option", map[string]any{"sessionId": sid, "configId": "thought_level", "value": "low"}))
		Expect(e["code"]).To(Equal(-32602.0))
		Expect(a.result(a.prompt(sid, "plain"))["stopReason"]).To(Equal("end_turn"))
		Expect(lastRequest(fake).JSON()).NotTo(HaveKey("reasoning_effort"))

		_, res = newSession(a)
		Expect(thoughtOption(res["configOptions"])).To(HaveKeyWithValue("currentValue", "high"), "the last choice")
		Expect(os.ReadFile(filepath.Join(home, "settings.yml"))).To(ContainSubstring("thought_level: high"))
		a.finish()
	})

	It("sends a larger Anthropic thinking budget for a higher level on claude-sonnet-4-5", func() {
		a := startAgent(agentEnv(fake, "IAC_CODE_HOME="+home, "IAC_CODE_PROVIDER=anthropic", "IAC_CODE_MODEL=claude-sonnet-4-5"))
		a.initialize()
		sid, res := newSession(a)
		Expect(thoughtOption(res["configOptions"])).NotTo(BeNil())
		budgets := map[string]float64{}
		for _, level := range []string{"low", "high"} {
			setOption(a, sid, "thought_level", level)
			Expect(a.result(a.prompt(sid, "think "+level))["stopReason"]).To(Equal("end_turn"))
			thinking := lastRequest(fake).JSON()["thinking"].(map[string]any)
			Expect(thinking).To(HaveKeyWithValue("type", "enabled"))
			budgets[level] = thinking["budget_tokens"].(float64)
		}
		Expect(budgets["high"]).To(BeNumerically(">", budgets["low"]))
		a.finish()
	})
})

var _ = Describe("additionalDirectories in the sandbox", Label("e2e", "acp-stable", "sandbox"), func() {
	It("lets a sandboxed command write in an additional directory, not beside it", func() {
		if st := sandbox.Probe(sandbox.Settings{Mode: sandbox.On}); st.ABI == 0 {
			Skip("the kernel has no Landlock: " + st.Reason)
		}
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		root, err := filepath.EvalSymlinks(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		cwd, extra, other := filepath.Join(root, "ws"), filepath.Join(root, "extra"), filepath.Join(root, "other")
		for _, d := range []string{cwd, extra, other} {
			Expect(os.MkdirAll(d, 0o700)).To(Succeed())
		}
		fake.Script(sessToolReply("b1", "bash", map[string]any{"command": "echo in > " + extra + "/in.txt; echo out > " + other + "/out.txt"}),
			llmtest.Reply{Text: "done"})
		a := startAgent(agentEnv(fake, "IAC_CODE_SANDBOX=on"))
		a.initialize()
		sid := a.result(a.request("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{},
			"additionalDirectories": []any{extra}}))["sessionId"].(string)
		Expect(a.result(a.request("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))).To(BeEmpty())
		Expect(a.result(a.prompt(sid, "write both"))["stopReason"]).To(Equal("end_turn"))
		Expect(os.ReadFile(filepath.Join(extra, "in.txt"))).To(Equal([]byte("in\n")))
		Expect(filepath.Join(other, "out.txt")).NotTo(BeAnExistingFile())
		a.finish()
	})
})

// messageIDs are the messageId of every chunk of kind from wire position
// from (of session sid).
func messageIDs(a *agent, from int, kind string) []string {
	var ids []string
	for _, m := range a.messages()[from:] {
		if u := updateOf(m); u != nil && u["sessionUpdate"] == kind {
			id, _ := u["messageId"].(string)
			ids = append(ids, id)
		}
	}
	return ids
}

var _ = Describe("messageId over stdio", Label("e2e", "acp-stable"), func() {
	It("gives every chunk of one message the same messageId, another to the next message, and the same ids on every replay", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		home, cwd := GinkgoT().TempDir(), GinkgoT().TempDir()
		fake.Script(llmtest.Reply{Thinking: "let me see", Text: "one two three four", Delay: 5 * time.Millisecond},
			llmtest.Reply{Text: "five six", Delay: 5 * time.Millisecond})
		env := agentEnv(fake, "IAC_CODE_HOME="+home)
		a := startAgent(env)
		a.initialize()
		sid := a.newSession(cwd)
		from := a.mark()
		Expect(a.result(a.prompt(sid, "count"))["stopReason"]).To(Equal("end_turn"))
		first := messageIDs(a, from, "agent_message_chunk")
		Expect(len(first)).To(BeNumerically(">", 1), "several chunks")
		Expect(first[0]).NotTo(BeEmpty())
		for _, id := range first {
			Expect(id).To(Equal(first[0]))
		}
		Expect(messageIDs(a, from, "agent_thought_chunk")).To(HaveEach(first[0]), "thoughts belong to the same answer")
		from = a.mark()
		Expect(a.result(a.prompt(sid, "more"))["stopReason"]).To(Equal("end_turn"))
		second := messageIDs(a, from, "agent_message_chunk")
		Expect(second).To(HaveEach(Not(Equal(first[0]))))
		Expect(second).To(HaveEach(second[0]))
		a.finish()

		var replays [][]string
		for range 2 {
			b := startAgent(env)
			b.initialize()
			from := b.mark()
			b.result(b.request("session/load", loadParams(sid, cwd)))
			agentIDs := messageIDs(b, from, "agent_message_chunk")
			Expect(agentIDs).To(Equal([]string{first[0], second[0]}), "the ids the client saw live")
			userIDs := messageIDs(b, from, "user_message_chunk")
			Expect(userIDs).To(HaveLen(2))
			Expect(userIDs[0]).NotTo(Equal(userIDs[1]))
			replays = append(replays, append(userIDs, agentIDs...))
			b.finish()
		}
		Expect(replays[0]).To(Equal(replays[1]), "stable across replays")
	})
})

var _ = Describe("stable ACP parts with the TypeScript SDK client", Label("e2e", "acp-stable", "node"), func() {
	It("gets the diff of an edit in its permission request, equal to the completed call's, and the tool's name", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd := GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(cwd, "notes.txt"), []byte("alpha\nbeta\n"), 0o600)).To(Succeed())
		fake.Script(sessToolReply("e1", "edit_file", map[string]any{"path": "notes.txt", "old_string": "beta", "new_string": "gamma"}),
			llmtest.Reply{Text: "done"})
		run := runTSClient(agentEnv(fake), stdioArgs("permission", cwd, "--permission", "allow_once")...)
		Expect(run.PermissionRequests).To(HaveLen(1))
		tc := run.PermissionRequests[0]["params"].(map[string]any)["toolCall"].(map[string]any)
		diffOf := func(content any) map[string]any {
			for _, c := range content.([]any) {
				if c.(map[string]any)["type"] == "diff" {
					return c.(map[string]any)
				}
			}
			return nil
		}
		asked := diffOf(tc["content"])
		Expect(asked).To(HaveKeyWithValue("oldText", "alpha\nbeta\n"))
		Expect(asked).To(HaveKeyWithValue("newText", "alpha\ngamma\n"))
		var names []any
		var completed map[string]any
		for _, u := range run.Updates {
			if u["sessionUpdate"] == "tool_call" {
				names = append(names, u["name"])
			}
			if u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed" {
				completed = diffOf(u["content"])
			}
		}
		Expect(names).To(Equal([]any{"edit_file"}))
		Expect(asked).To(Equal(completed))
	})
})

// toolCallNames is the name of every tool_call from wire position from.
func toolCallNames(a *agent, from int) []string {
	var names []string
	for _, m := range a.messages()[from:] {
		if u := updateOf(m); u != nil && u["sessionUpdate"] == "tool_call" {
			name, _ := u["name"].(string)
			names = append(names, name)
		}
	}
	return names
}
