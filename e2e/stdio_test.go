package e2e

import (
	"maps"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// The raw-client scenarios run once per model wire format: the server's
// real OpenAI-compatible and Anthropic providers against the fake server.
var _ = stdioScenarios("openai")
var _ = stdioScenarios("anthropic")

func stdioScenarios(format string) bool {
	return Describe("stdio transport with a raw JSON-RPC client ("+format+" model format)", Label("e2e", format), func() {
		stdioSpecs(format)
	})
}

func stdioSpecs(format string) {
	var (
		fake *llmtest.Server
		a    *agent
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
	})
	start := func(extraEnv ...string) {
		a = startAgent(agentEnv(fake, append([]string{"IAC_CODE_PROVIDER=chaos_" + format}, extraEnv...)...))
	}

	It("answers initialize per the spec, for any requested version", func() {
		start()
		res := a.result(a.request("initialize", map[string]any{"protocolVersion": 7, "capabilities": map[string]any{}}))
		Expect(res["protocolVersion"]).To(Equal(1.0))
		Expect(res["agentInfo"]).To(HaveKeyWithValue("name", "iac-code"))
		Expect(res["agentInfo"]).To(HaveKey("version"))
		caps := res["agentCapabilities"].(map[string]any)
		Expect(caps["loadSession"]).To(BeTrue())
		Expect(caps["promptCapabilities"]).To(Equal(map[string]any{"image": true, "audio": false, "embeddedContext": true}))
		Expect(caps["sessionCapabilities"]).To(Equal(map[string]any{"list": map[string]any{}, "close": map[string]any{},
			"resume": map[string]any{}, "fork": map[string]any{}, "delete": map[string]any{}, "additionalDirectories": map[string]any{}}))
		Expect(res["authMethods"]).To(HaveLen(1), "never empty: the key method, with a key configured too")
		Expect(res["authMethods"].([]any)[0]).To(HaveKeyWithValue("id", "api-key"))
		a.finish()
	})

	It("streams thinking and text before an end_turn response with usage", func() {
		fake.Script(llmtest.Reply{Thinking: "Let me think about it", Text: "Hello there, how are you?",
			Usage: &llmtest.Usage{PromptTokens: 21, CompletionTokens: 9}})
		start()
		a.initialize()
		sid := a.newSession(cwd)
		id := a.prompt(sid, "hi")
		res := a.result(id)
		Expect(res["stopReason"]).To(Equal("end_turn"))
		Expect(res["usage"]).To(Equal(map[string]any{"inputTokens": 21.0, "outputTokens": 9.0, "totalTokens": 30.0}))
		var thought, text strings.Builder
		for _, u := range a.updatesBefore(id) {
			c, _ := u["content"].(map[string]any)
			switch u["sessionUpdate"] {
			case "agent_thought_chunk":
				Expect(text.Len()).To(BeZero(), "thinking comes before text")
				thought.WriteString(c["text"].(string))
			case "agent_message_chunk":
				text.WriteString(c["text"].(string))
			}
		}
		Expect(thought.String()).To(Equal("Let me think about it"))
		Expect(text.String()).To(Equal("Hello there, how are you?"))
		// what the model saw
		reqs := fake.Requests()
		Expect(reqs).To(HaveLen(1))
		Expect(reqs[0].Streaming()).To(BeTrue())
		Expect(reqs[0].Model()).To(Equal("test-model"))
		a.finish()
	})

	DescribeTable("sends images as images (a text marker for text-only models) and other rich content as text",
		func(imageInput string, asImage bool) {
			start("IAC_CODE_IMAGE_INPUT=" + imageInput)
			a.initialize()
			sid := a.newSession(cwd)
			id := a.request("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{
				map[string]any{"type": "text", "text": "look"},
				map[string]any{"type": "resource", "resource": map[string]any{"uri": "file:///x/a.txt", "mimeType": "text/plain", "text": "file body"}},
				map[string]any{"type": "resource_link", "uri": "file:///x/b.txt", "name": "b.txt"},
				map[string]any{"type": "image", "mimeType": "image/png", "data": "AAAA"},
				map[string]any{"type": "audio", "mimeType": "audio/wav", "data": "AAAA"},
			}})
			Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
			req := fake.Requests()[0]
			for _, want := range []string{"look", "file body", "file:///x/b.txt", "[audio: audio/wav]"} {
				Expect(string(req.Body)).To(ContainSubstring(want))
			}
			if asImage {
				Expect(req.Images()).To(ConsistOf(And(HaveField("Role", "user"), HaveField("MediaType", "image/png"), HaveField("Data", "AAAA"))))
				Expect(string(req.Body)).NotTo(ContainSubstring("[image: image/png]"))
			} else {
				Expect(req.Images()).To(BeEmpty())
				Expect(string(req.Body)).To(ContainSubstring("[image: image/png]"))
			}
			a.finish()
		},
		Entry("auto, a model not known to be text only", "auto", true),
		Entry("off", "off", false),
	)

	It("maps finish_reason length to max_tokens and content_filter to refusal", func() {
		fake.Script(llmtest.Reply{Text: "cut", FinishReason: "length"}, llmtest.Reply{Text: "no", FinishReason: "content_filter"})
		start()
		a.initialize()
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "a"))["stopReason"]).To(Equal("max_tokens"))
		Expect(a.result(a.prompt(sid, "b"))["stopReason"]).To(Equal("refusal"))
		a.finish()
	})

	It("cancels mid-stream with stopReason cancelled, then serves the next prompt", func() {
		fake.Script(llmtest.Reply{Text: "one two three four five", Hang: true, AfterChunks: 3},
			llmtest.Reply{Text: "second answer"})
		start()
		a.initialize()
		sid := a.newSession(cwd)
		id := a.prompt(sid, "long")
		a.waitFor("first chunk", isChunk)
		a.notify("session/cancel", map[string]any{"sessionId": sid})
		Expect(a.result(id)["stopReason"]).To(Equal("cancelled"))
		a.notify("session/cancel", map[string]any{"sessionId": sid}) // idle cancel is harmless
		Expect(a.result(a.prompt(sid, "again"))["stopReason"]).To(Equal("end_turn"))
		a.finish()
	})

	It("queues a second concurrent prompt behind the first, shows it when it starts, and runs it after", func() {
		fake.Script(llmtest.Reply{Text: "slow answer here", Delay: 100 * time.Millisecond}, llmtest.Reply{Text: "second answer"})
		start()
		a.initialize()
		sid := a.newSession(cwd)
		first := a.prompt(sid, "one")
		second := a.prompt(sid, "two")
		Expect(a.result(first)["stopReason"]).To(Equal("end_turn"))
		Expect(a.result(second)["stopReason"]).To(Equal("end_turn"))
		after := a.updatesBefore(second)[len(a.updatesBefore(first)):]
		Expect(after).NotTo(BeEmpty())
		shown := maps.Clone(after[0])
		Expect(shown).To(HaveKeyWithValue("messageId", Not(BeEmpty())), "the echo has its message's id")
		delete(shown, "messageId")
		Expect(shown).To(Equal(userChunk("two")), "the queued prompt is shown when it starts")
		body := string(lastRequest(fake).Body)
		Expect(strings.Index(body, "slow answer here")).To(BeNumerically("<", strings.LastIndex(body, `"two"`)),
			"the second turn's request has the first turn's answer before its prompt")
		a.finish()
	})

	It("closes a session: later prompts get -32002 Session not found", func() {
		start()
		a.initialize()
		sid := a.newSession(cwd)
		Expect(a.result(a.request("session/close", map[string]any{"sessionId": sid}))).To(BeEmpty())
		e := a.errorOf(a.prompt(sid, "x"))
		Expect(e["code"]).To(Equal(-32002.0))
		Expect(e["data"]).To(Equal(map[string]any{"sessionId": sid, "session_id": "Session not found"}))
		a.finish()
	})

	It("closes a session with a running turn: the prompt ends cancelled", func() {
		fake.Script(llmtest.Reply{Text: "a b c d", Hang: true, AfterChunks: 2})
		start()
		a.initialize()
		sid := a.newSession(cwd)
		id := a.prompt(sid, "x")
		a.waitFor("first chunk", isChunk)
		closeID := a.request("session/close", map[string]any{"sessionId": sid})
		Expect(a.result(id)["stopReason"]).To(Equal("cancelled"))
		Expect(a.result(closeID)).To(BeEmpty())
		a.finish()
	})

	It("answers bad input with the spec's error codes and keeps working", func() {
		start()
		a.sendLine(`{"jsonrpc":"2.0","id":"early","method":"session/new","params":{"cwd":"/"}}`)
		_, early := a.waitFor("pre-initialize error", func(m map[string]any) bool { return m["id"] == "early" })
		Expect(early["error"]).To(HaveKeyWithValue("code", -32600.0)) // before initialize
		a.initialize()
		a.sendLine(`this is not json`)
		_, parseErr := a.waitFor("parse error", func(m map[string]any) bool {
			e, _ := m["error"].(map[string]any)
			return e != nil && e["code"] == -32700.0
		})
		Expect(parseErr).To(HaveKeyWithValue("id", BeNil()))
		a.sendLine(`[{"jsonrpc":"2.0","id":50,"method":"initialize"}]`)
		a.waitFor("batch error", func(m map[string]any) bool {
			e, _ := m["error"].(map[string]any)
			return e != nil && e["code"] == -32600.0 && m["id"] == nil
		})
		Expect(a.errorOf(a.request("no/such/method", map[string]any{}))["code"]).To(Equal(-32601.0))
		a.notify("no/such/notification", map[string]any{})
		Expect(a.errorOf(a.request("session/new", map[string]any{"cwd": "relative"}))["code"]).To(Equal(-32602.0))
		Expect(a.errorOf(a.request("session/new", map[string]any{"cwd": 42}))["code"]).To(Equal(-32602.0))
		e := a.errorOf(a.prompt("unknown-session", "x"))
		Expect(e["data"]).To(Equal(map[string]any{"sessionId": "unknown-session", "session_id": "Session not found"}))
		a.notify("session/cancel", map[string]any{"sessionId": "unknown-session"})
		// a long line still works
		sid := a.newSession(cwd)
		big := strings.Repeat("y", 11<<20)
		Expect(a.result(a.prompt(sid, big))["stopReason"]).To(Equal("end_turn"))
		a.finish()
	})

	It("answers -32000 Authentication required when no key is configured, without leaking anything", func() {
		start("IAC_CODE_API_KEY=")
		res := a.initialize()
		Expect(res["authMethods"]).To(HaveLen(1))
		e := a.errorOf(a.request("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))
		Expect(e["code"]).To(Equal(-32000.0))
		Expect(e["message"]).To(Equal("Authentication required"))
		Expect(e["data"].(map[string]any)["hint"]).To(ContainSubstring("IAC_CODE_API_KEY"))
		Expect(fake.Requests()).To(BeEmpty())
		a.finish()
	})

	It("maps a provider 401 to -32000", func() {
		fake.Script(llmtest.Reply{Status: 401})
		start()
		a.initialize()
		sid := a.newSession(cwd)
		Expect(a.errorOf(a.prompt(sid, "x"))["code"]).To(Equal(-32000.0))
		a.finish()
	})

	It("turns a panicking turn into -32603 with an error id; the session keeps working", func() {
		start()
		a.initialize()
		sid := a.newSession(cwd)
		e := a.errorOf(a.prompt(sid, "please __panic_turn__"))
		Expect(e["code"]).To(Equal(-32603.0))
		Expect(e["data"]).To(HaveKey("error_id"))
		Expect(a.stderr.String()).To(ContainSubstring(e["data"].(map[string]any)["error_id"].(string)))
		Expect(a.result(a.prompt(sid, "fine now"))["stopReason"]).To(Equal("end_turn"))
		a.finish()
	})

	It("runs a tool call through a tool actor: an unknown tool is an error result for the model", func() {
		fake.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "no_such_tool", Arguments: `{"x":1}`}}},
			llmtest.Reply{Text: "sorry"})
		start()
		a.initialize()
		sid := a.newSession(cwd)
		id := a.prompt(sid, "use a tool")
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		ups := a.updatesBefore(id)
		Expect(ups[0]).To(HaveKeyWithValue("sessionUpdate", "tool_call"))
		Expect(ups[0]).To(HaveKeyWithValue("toolCallId", "call_1"))
		Expect(ups).To(ContainElement(And(HaveKeyWithValue("toolCallId", "call_1"), HaveKeyWithValue("status", "failed"))))
		results := fake.Requests()[1].ToolResults()
		last := results[len(results)-1]
		Expect(last.ID).To(Equal("call_1"))
		Expect(last.Content).To(ContainSubstring("Unknown tool: no_such_tool"))
		a.finish()
	})

	It("turns a panicking tool into a failed tool call and continues the turn", func() {
		fake.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_p", Name: "test_panic", Arguments: `{}`}}},
			llmtest.Reply{Text: "recovered"})
		start()
		a.initialize()
		sid := a.newSession(cwd)
		id := a.prompt(sid, "crash the tool")
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(a.updatesBefore(id)).To(ContainElement(And(HaveKeyWithValue("toolCallId", "call_p"), HaveKeyWithValue("status", "failed"))))
		a.finish()
	})

	It("answers a session/load, the prompt after it and a session/list written right before stdin EOF", func() {
		env := agentEnv(fake, "IAC_CODE_PROVIDER=chaos_"+format)
		a = startAgent(env)
		a.initialize()
		sid := a.newSession(cwd)
		a.finish()
		fake.Script(llmtest.Reply{Text: "hello"})
		a = startAgent(env) // the same home: the session is stored
		a.initialize()
		load := a.request("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
		id := a.prompt(sid, "x")
		list := a.request("session/list", map[string]any{})
		a.finish()
		Expect(a.result(list)["sessions"]).To(HaveLen(1))
		Expect(a.result(load)).To(HaveKey("modes"))
		Expect(a.result(id)["stopReason"]).To(BeElementOf("end_turn", "cancelled"))
	})

	It("cancels running turns on stdin EOF, answers them, and exits 0", func() {
		fake.Script(llmtest.Reply{Text: "never ending story", Hang: true, AfterChunks: 2})
		start()
		a.initialize()
		sid := a.newSession(cwd)
		id := a.prompt(sid, "x")
		a.waitFor("first chunk", isChunk)
		a.finish()
		Expect(a.result(id)["stopReason"]).To(Equal("cancelled"))
	})
}
