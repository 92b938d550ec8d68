package actors

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools"
)

var _ = Describe("a session shared by several connections", func() {
	var (
		p    *scriptedProvider
		s    *sessionHarness
		a, b *harness
		sid  string
		cwd  string
	)
	BeforeEach(func() {
		p = &scriptedProvider{}
		cwd = GinkgoT().TempDir()
		s = newSessionHarness(p, GinkgoT().TempDir(), nil, echoTool{})
		a = s.connect()
		sid = a.result(a.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		b = s.connect()
		b.result(b.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))
	})
	AfterEach(func() { s.close() })

	// startLongPrompt sends a's prompt whose model call lasts until it is
	// cancelled, once that call has begun.
	startLongPrompt := func() float64 {
		started := make(chan struct{})
		p.then(func(ctx context.Context, emit func(llm.Event)) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		id := a.call("session/prompt", textPrompt(sid, "long"))
		Eventually(started, 2*time.Second).Should(BeClosed())
		return id
	}
	// updatesFrom are the session/update params of h's frames from index on.
	updatesFrom := func(h *harness, from int) []any {
		var out []any
		for _, f := range framesAfter(h, from) {
			if f["method"] == "session/update" {
				out = append(out, f["params"])
			}
		}
		return out
	}

	It("gives no chunk frame back for reuse once written: both connections hold it", func() {
		p.then(say("one ", "two ", "three"))
		Expect(b.result(b.call("session/prompt", textPrompt(sid, "from b")))["stopReason"]).To(Equal("end_turn"))
		for _, h := range []*harness{a, b} {
			chunks, givable := h.out.chunkFrames()
			Expect(chunks).To(Equal(3))
			Expect(givable).To(BeZero())
		}
	})

	It("sends every update of a turn to both connections in the same order, and the answer to the sender only", func() {
		p.then(say("one ", "two ", "three"))
		fromA, fromB := len(a.out.all()), len(b.out.all())
		id := b.call("session/prompt", textPrompt(sid, "from b"))
		Expect(b.result(id)["stopReason"]).To(Equal("end_turn"))
		// (updates after the answer, such as usage, may still be on their way)
		Eventually(func(g Gomega) {
			g.Expect(updatesFrom(a, fromA)).To(Equal(updatesFrom(b, fromB)))
		}, 2*time.Second, 10*time.Millisecond).Should(Succeed())
		ups := updatesFrom(b, fromB)
		// the prompt is shown to both, then the answer's chunks in order
		first := ups[0].(map[string]any)["update"].(map[string]any)
		Expect(first).To(HaveKeyWithValue("sessionUpdate", "user_message_chunk"))
		var text string
		for _, u := range ups {
			up := u.(map[string]any)["update"].(map[string]any)
			if up["sessionUpdate"] == "agent_message_chunk" {
				text += up["content"].(map[string]any)["text"].(string)
			}
		}
		Expect(text).To(Equal("one two three"))
		Consistently(func() map[string]any { return a.out.response(id) }, 200*time.Millisecond).Should(BeNil(),
			"a got no answer for b's request (a's own ids differ)")
	})

	It("asks both clients for permission; the first answer wins and the other's request is withdrawn", func() {
		p.then(callTool("c1", "echo", `{"x":1}`)).then(say("done"))
		id := a.call("session/prompt", textPrompt(sid, "use echo"))
		var reqA, reqB map[string]any
		Eventually(func() int { return len(a.out.requests("session/request_permission")) }, 2*time.Second).Should(Equal(1))
		Eventually(func() int { return len(b.out.requests("session/request_permission")) }, 2*time.Second).Should(Equal(1))
		reqA, reqB = a.out.requests("session/request_permission")[0], b.out.requests("session/request_permission")[0]
		Expect(reqB["params"]).To(Equal(reqA["params"]))
		from := len(a.out.all())
		b.answer(reqB["id"], map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}})
		var cancel map[string]any
		Eventually(func() map[string]any {
			for _, f := range framesAfter(a, from) {
				if f["method"] == protocol.MethodCancelRequest {
					cancel = f
				}
			}
			return cancel
		}, 2*time.Second).ShouldNot(BeNil())
		Expect(cancel["params"]).To(Equal(map[string]any{"requestId": reqA["id"]}))
		Expect(cancel).NotTo(HaveKey("id"), "a notification")
		// a's late answer changes nothing
		a.answer(reqA["id"], map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "reject_once"}})
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		res := p.requests()[1].Messages
		Expect(res[len(res)-1].Content[0].IsError).To(BeFalse(), "the tool ran: b's allow won")
		for _, f := range b.out.all() {
			Expect(f["method"]).NotTo(Equal(protocol.MethodCancelRequest), "the winner's request is not withdrawn")
		}
	})

	It("waits for another client when one answers a permission request with an error", func() {
		p.then(callTool("c1", "echo", `{}`)).then(say("done"))
		id := a.call("session/prompt", textPrompt(sid, "use echo"))
		Eventually(func() int { return len(b.out.requests("session/request_permission")) }, 2*time.Second).Should(Equal(1))
		Eventually(func() int { return len(a.out.requests("session/request_permission")) }, 2*time.Second).Should(Equal(1))
		b.answerError(b.out.requests("session/request_permission")[0]["id"], -32601, "no UI")
		Consistently(func() map[string]any { return a.out.response(id) }, 200*time.Millisecond).Should(BeNil())
		a.answer(a.out.requests("session/request_permission")[0]["id"],
			map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}})
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		res := p.requests()[1].Messages
		Expect(res[len(res)-1].Content[0].IsError).To(BeFalse())
	})

	It("queues prompts of both connections in arrival order, and cancel from either empties the queue", func() {
		gate := make(chan struct{})
		p.then(func(ctx context.Context, emit func(llm.Event)) error {
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
			return say("first done")(ctx, emit)
		})
		first := a.call("session/prompt", textPrompt(sid, "a1"))
		Eventually(func() int { return len(p.requests()) }, 2*time.Second).Should(Equal(1))
		second := b.call("session/prompt", textPrompt(sid, "b1"))
		// answered once b1 reached the session (the order is the session's arrival order)
		b.result(b.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "default"}))
		third := a.call("session/prompt", textPrompt(sid, "a2"))
		close(gate)
		Expect(a.result(first)["stopReason"]).To(Equal("end_turn"))
		Expect(b.result(second)["stopReason"]).To(Equal("end_turn"))
		Expect(a.result(third)["stopReason"]).To(Equal("end_turn"))
		var order []string
		for _, m := range p.requests()[2].Messages {
			order = append(order, m.TextOf())
		}
		Expect(order).To(Equal([]string{"a1", "first done", "b1", "ok", "a2"}))

		long := startLongPrompt()
		qa := a.call("session/prompt", textPrompt(sid, "qa"))
		// answered after qa reached the session: qa is queued before b's cancel
		a.result(a.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "default"}))
		qb := b.call("session/prompt", textPrompt(sid, "qb"))
		b.notify("session/cancel", map[string]any{"sessionId": sid})
		Expect(a.result(long)["stopReason"]).To(Equal("cancelled"))
		Expect(a.result(qa)["stopReason"]).To(Equal("cancelled"))
		Expect(b.result(qb)["stopReason"]).To(Equal("cancelled"))
		Expect(p.requests()).To(HaveLen(4), "no queued prompt ran")
	})

	It("answers a queued prompt refused when it starts to its own sender", func() {
		gate := make(chan struct{})
		p.then(func(ctx context.Context, emit func(llm.Event)) error {
			<-gate
			return say("done")(ctx, emit)
		})
		first := a.call("session/prompt", textPrompt(sid, "one"))
		Eventually(func() int { return len(p.requests()) }, 2*time.Second).Should(Equal(1))
		bad := b.call("session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "image", "mimeType": "image/png", "data": "%%%not base64"}}})
		b.result(b.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "default"}))
		// a is the last to ask something before b's prompt starts
		a.result(a.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "default"}))
		close(gate)
		Expect(a.result(first)["stopReason"]).To(Equal("end_turn"))
		Expect(b.errorOf(bad)["code"]).To(Equal(-32602.0))
	})

	It("detaches only the connection that closes; the other keeps working, and the last close ends the session", func() {
		Expect(a.result(a.call("session/close", map[string]any{"sessionId": sid}))).To(BeEmpty())
		Expect(b.result(b.call("session/prompt", textPrompt(sid, "still here")))["stopReason"]).To(Equal("end_turn"))
		// a may load it again and is attached anew
		a.result(a.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))
		from := len(a.out.all())
		Expect(b.result(b.call("session/prompt", textPrompt(sid, "both see this")))["stopReason"]).To(Equal("end_turn"))
		Eventually(func() int { return len(updatesFrom(a, from)) }, 2*time.Second).Should(BeNumerically(">", 0))
		a.result(a.call("session/close", map[string]any{"sessionId": sid}))
		b.result(b.call("session/close", map[string]any{"sessionId": sid}))
		Expect(b.errorOf(b.call("session/prompt", textPrompt(sid, "gone")))["data"]).To(HaveKeyWithValue("session_id", "Session not found"))
	})

	It("cancels the running prompt of a connection that goes away, and the other's queued prompt then runs", func() {
		long := startLongPrompt()
		queued := b.call("session/prompt", textPrompt(sid, "after a"))
		a.conn.Close(2 * time.Second)
		Expect(a.result(long)["stopReason"]).To(Equal("cancelled"))
		Expect(b.result(queued)["stopReason"]).To(Equal("end_turn"))
	})

})

var _ = Describe("a shared session's tool calls through the client", func() {
	It("go to the connection whose prompt runs, with its capabilities", func() {
		p := &scriptedProvider{}
		cwd, err := filepath.EvalSymlinks(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(cwd, "x.txt"), []byte("on disk\n"), 0o600)).To(Succeed())
		s := newSessionHarness(p, GinkgoT().TempDir(), nil, tools.Builtin()...)
		defer s.close()
		plain := s.connect()
		sid := plain.result(plain.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		plain.result(plain.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))
		editor := s.connect()
		editor.result(editor.call("initialize", map[string]any{"protocolVersion": 1,
			"clientCapabilities": map[string]any{"fs": map[string]any{"readTextFile": true}}}))
		editor.result(editor.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))

		p.then(callTool("r1", "read_file", `{"path":"x.txt"}`)).then(say("read it"))
		id := editor.call("session/prompt", textPrompt(sid, "read"))
		var reqs []map[string]any
		Eventually(func() int { reqs = editor.out.requests("fs/read_text_file"); return len(reqs) }, 5*time.Second).Should(Equal(1))
		editor.answer(reqs[0]["id"], map[string]any{"content": "unsaved buffer\n"})
		Expect(editor.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(plain.out.requests("fs/read_text_file")).To(BeEmpty())
		last := p.requests()[1].Messages
		Expect(last[len(last)-1].Content[0].Text).To(ContainSubstring("unsaved buffer"))

		// a prompt of the connection without fs runs the read locally
		p.then(callTool("r2", "read_file", `{"path":"x.txt"}`)).then(say("read it again"))
		Expect(plain.result(plain.call("session/prompt", textPrompt(sid, "read again")))["stopReason"]).To(Equal("end_turn"))
		Expect(editor.out.requests("fs/read_text_file")).To(HaveLen(1))
		last = p.requests()[3].Messages
		Expect(last[len(last)-1].Content[0].Text).To(ContainSubstring("on disk"))
	})
})

var _ = Describe("session/delete of a session shared by several connections", func() {
	It("ends it for every connection: the others are told and then answered not found, and the files are gone", func() {
		p := &scriptedProvider{}
		cwd := GinkgoT().TempDir()
		home := GinkgoT().TempDir()
		s := newSessionHarness(p, home, nil, echoTool{})
		defer s.close()
		a := s.connect()
		sid := a.result(a.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		b := s.connect()
		b.result(b.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))
		Expect(a.result(a.call("session/prompt", textPrompt(sid, "hello")))["stopReason"]).To(Equal("end_turn"))
		from := len(b.out.all())

		Expect(a.result(a.call("session/delete", map[string]any{"sessionId": sid}))).To(BeEmpty())

		told := false
		for _, f := range framesAfter(b, from) {
			if f["method"] != "session/update" {
				continue
			}
			if raw, _ := json.Marshal(f["params"]); strings.Contains(string(raw), `"iac-code/deleted":true`) {
				told = true
			}
		}
		Expect(told).To(BeTrue(), "the other connection was not told of the delete")
		Eventually(func() any {
			return b.errorOf(b.call("session/prompt", textPrompt(sid, "after")))["code"]
		}, 2*time.Second).Should(BeEquivalentTo(protocol.CodeResourceNotFound))
		Expect(b.errorOf(b.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))["code"]).
			To(BeEquivalentTo(protocol.CodeResourceNotFound))
		left, _ := os.ReadDir(filepath.Join(home, "sessions"))
		for _, e := range left {
			Expect(e.Name()).NotTo(ContainSubstring(sid), "the session's files are still there")
		}
	})
})

var _ = Describe("session/delete from a connection the session is not attached to", func() {
	It("ends it where it is live (that connection is told) before its files go", func() {
		p := &scriptedProvider{}
		cwd := GinkgoT().TempDir()
		home := GinkgoT().TempDir()
		s := newSessionHarness(p, home, nil, echoTool{})
		defer s.close()
		a := s.connect()
		sid := a.result(a.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		Expect(a.result(a.call("session/prompt", textPrompt(sid, "hello")))["stopReason"]).To(Equal("end_turn"))
		from := len(a.out.all())
		b := s.connect() // the same person, who never loaded it
		Expect(b.result(b.call("session/delete", map[string]any{"sessionId": sid}))).To(BeEmpty())
		told := false
		for _, f := range framesAfter(a, from) {
			if raw, _ := json.Marshal(f["params"]); f["method"] == "session/update" && strings.Contains(string(raw), `"iac-code/deleted":true`) {
				told = true
			}
		}
		Expect(told).To(BeTrue(), "the connection it was live on was not told")
		Expect(a.errorOf(a.call("session/prompt", textPrompt(sid, "after")))["code"]).To(BeEquivalentTo(protocol.CodeResourceNotFound))
		left, _ := os.ReadDir(filepath.Join(home, "sessions"))
		for _, e := range left {
			Expect(e.Name()).NotTo(ContainSubstring(sid), "the session's files are still there")
		}
	})
})
