package actors

import (
	"time"

	"github.com/iac-code/iac-code/protocol"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("the connection actor", func() {
	var h *harness
	BeforeEach(func() { h = newHarness(&scriptedProvider{}) })
	AfterEach(func() { h.close() })

	It("survives a panic while dispatching and keeps its state", func() {
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))
		h.conn.Deliver(nil) // a nil message makes dispatch panic
		res := h.result(h.call("session/new", map[string]any{"cwd": GinkgoT().TempDir()}))
		Expect(res).To(HaveKey("sessionId"), "still initialized")
	})

	It("refuses requests before initialize", func() {
		Expect(h.errorOf(h.call("session/new", map[string]any{"cwd": "/"}))["code"]).To(Equal(-32600.0))
	})

	It("answers initialize with protocol 1 and the spec's capabilities", func() {
		res := h.result(h.call("initialize", map[string]any{"protocolVersion": 2}))
		Expect(res["protocolVersion"]).To(Equal(1.0))
		Expect(res["agentInfo"]).To(HaveKeyWithValue("name", "iac-code"))
		caps := res["agentCapabilities"].(map[string]any)
		Expect(caps["loadSession"]).To(BeTrue())
		Expect(caps["promptCapabilities"]).To(Equal(map[string]any{"image": true, "audio": false, "embeddedContext": true}))
		Expect(caps["sessionCapabilities"]).To(Equal(map[string]any{"list": map[string]any{}, "close": map[string]any{},
			"resume": map[string]any{}, "fork": map[string]any{}, "delete": map[string]any{}, "additionalDirectories": map[string]any{}}))
		Expect(caps["auth"]).To(Equal(map[string]any{"logout": map[string]any{}}))
		methods := res["authMethods"].([]any)
		Expect(methods).To(HaveLen(1), "the key method, never an empty list")
		Expect(methods[0]).To(HaveKeyWithValue("id", "api-key"))
		Expect(methods[0]).NotTo(HaveKey("type"))
	})

	It("when unusable (no home) answers initialize, then every request with the reason; notifications get nothing", func() {
		unusable := protocol.NewError(protocol.CodeInternalError, "no home; set IAC_CODE_HOME", map[string]string{"reason": "no_home"})
		u := newHarnessOn(nil, Config{Unusable: unusable}, &scriptedProvider{})
		defer u.close()
		Expect(u.result(u.call("initialize", map[string]any{"protocolVersion": 1}))).To(HaveKeyWithValue("protocolVersion", 1.0))
		for _, method := range []string{"session/new", "session/list", "authenticate", "session/set_model", "no/such"} {
			e := u.errorOf(u.call(method, map[string]any{"cwd": "/"}))
			Expect(e["code"]).To(Equal(-32603.0), method)
			Expect(e["data"]).To(HaveKeyWithValue("reason", "no_home"), method)
		}
		u.notify("session/cancel", map[string]any{"sessionId": "x"})
		id := u.call("session/new", map[string]any{"cwd": "/"})
		u.errorOf(id)
		Expect(u.out.all()).To(HaveLen(7), "the notification was not answered")
	})

	It("refuses logout to a user of a multi-user server: the key is every user's", func() {
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))
		alice := h.as("alice")
		defer alice.conn.Close(time.Second)
		e := alice.errorOf(alice.call("logout", map[string]any{}))
		Expect(e["code"]).To(Equal(-32600.0))
		Expect(e["data"]).To(HaveKeyWithValue("reason", "shared_credential"))
	})

	It("offers the terminal login only to a client that advertises terminal auth", func() {
		res := h.result(h.call("initialize", map[string]any{"protocolVersion": 1,
			"clientCapabilities": map[string]any{"auth": map[string]any{"terminal": true}}}))
		methods := res["authMethods"].([]any)
		Expect(methods).To(HaveLen(2))
		Expect(methods[1]).To(HaveKeyWithValue("type", "terminal"))
		Expect(methods[1]).To(HaveKeyWithValue("args", []any{"login"}))
	})

	It("offers the terminal login to a client of the older _meta[\"terminal-auth\"] convention (the ACP Registry's check)", func() {
		res := h.result(h.call("initialize", map[string]any{"protocolVersion": 1,
			"clientCapabilities": map[string]any{"terminal": true, "fs": map[string]any{"readTextFile": true, "writeTextFile": true},
				"_meta": map[string]any{"terminal_output": true, "terminal-auth": true}}}))
		methods := res["authMethods"].([]any)
		Expect(methods).To(HaveLen(2))
		login := methods[1].(map[string]any)
		Expect(login).To(HaveKeyWithValue("id", "login"))
		Expect(login).NotTo(HaveKey("type"), "the terminal type needs auth.terminal; this client reads _meta")
		meta := login["_meta"].(map[string]any)["terminal-auth"].(map[string]any)
		Expect(meta["args"]).To(Equal([]any{"login"}))
		Expect(meta["command"]).NotTo(BeEmpty())
		Expect(meta["label"]).NotTo(BeEmpty())
	})

	It("offers one terminal login with both the type and _meta to a client announcing both", func() {
		res := h.result(h.call("initialize", map[string]any{"protocolVersion": 1,
			"clientCapabilities": map[string]any{"auth": map[string]any{"terminal": true}, "_meta": map[string]any{"terminal-auth": true}}}))
		methods := res["authMethods"].([]any)
		Expect(methods).To(HaveLen(2))
		Expect(methods[1]).To(And(HaveKeyWithValue("type", "terminal"), HaveKeyWithValue("args", []any{"login"}), HaveKey("_meta")))
	})

	It("ignores a _meta terminal-auth that is not true", func() {
		res := h.result(h.call("initialize", map[string]any{"protocolVersion": 1,
			"clientCapabilities": map[string]any{"_meta": map[string]any{"terminal-auth": "yes"}}}))
		Expect(res["authMethods"]).To(HaveLen(1))
	})

	It("validates cwd on session/new", func() {
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))
		for _, cwd := range []string{"relative/dir", "/does/not/exist", ""} {
			e := h.errorOf(h.call("session/new", map[string]any{"cwd": cwd}))
			Expect(e["code"]).To(Equal(-32602.0))
			Expect(e["data"]).To(HaveKey("cwd"))
		}
	})

	It("answers unknown methods and ignores unknown notifications", func() {
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))
		h.notify("whatever/notify", map[string]any{})
		Expect(h.errorOf(h.call("whatever/call", map[string]any{}))["code"]).To(Equal(-32601.0))
		Expect(h.out.all()).To(HaveLen(2))
	})

	It("reports unknown sessions the spec's way", func() {
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))
		e := h.errorOf(h.call("session/prompt", map[string]any{"sessionId": "nope", "prompt": []any{}}))
		Expect(e["code"]).To(Equal(-32002.0))
		Expect(e["data"]).To(Equal(map[string]any{"sessionId": "nope", "session_id": "Session not found"}))
	})

	It("closes a session: later prompts get session not found", func() {
		sid := h.newSession(GinkgoT().TempDir())
		Expect(h.result(h.call("session/close", map[string]any{"sessionId": sid}))).To(BeEmpty())
		e := h.errorOf(h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "x"}}}))
		Expect(e["code"]).To(Equal(-32002.0))
		Expect(e["data"]).To(Equal(map[string]any{"sessionId": sid, "session_id": "Session not found"}))
	})
})

var _ = Describe("a connection closed while a session/new waits for its MCP servers", func() {
	It("answers the session/new before it goes", func() {
		h := newHarnessWith(Config{MCPStartupTimeout: time.Minute}, &scriptedProvider{})
		defer h.srv.Shutdown()
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))
		// A server that never answers its initialize.
		id := h.call("session/new", map[string]any{"cwd": GinkgoT().TempDir(), "mcpServers": []any{
			map[string]any{"name": "mute", "command": "sleep", "args": []any{"60"}, "env": []any{}}}})
		Consistently(func() map[string]any { return h.out.response(id) }, 100*time.Millisecond).Should(BeNil(), "it waits for the server")
		h.conn.Close(5 * time.Second)
		Expect(h.out.response(id)).To(HaveKey("result"))
	})
})
