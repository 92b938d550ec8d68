package actors

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

var _ = Describe("a turn running while another connection loads the session", func() {
	var (
		p    *scriptedProvider
		s    *sessionHarness
		a    *harness
		sid  string
		cwd  string
		gate chan struct{}
	)
	// promptID is the JSON-RPC id of a's prompt, as a sends it (a string,
	// to see it come back exactly so).
	const promptID = `"turn-1"`
	BeforeEach(func() {
		p = &scriptedProvider{}
		cwd = GinkgoT().TempDir()
		s = newSessionHarness(p, GinkgoT().TempDir(), nil)
		a = s.connect()
		sid = a.result(a.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		gate = make(chan struct{})
		// the answer: two chunks, then (once the gate opens) the third
		p.then(func(ctx context.Context, emit func(llm.Event)) error {
			emit(llm.Event{Type: llm.EventTextDelta, Text: "one "})
			emit(llm.Event{Type: llm.EventTextDelta, Text: "two "})
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
			return say("three")(ctx, emit)
		})
		raw, _ := json.Marshal(textPrompt(sid, "count"))
		a.conn.Deliver(&protocol.Message{JSONRPC: "2.0", ID: protocol.RawMessage(promptID), Method: "session/prompt", Params: raw})
		Eventually(func() string { return agentText(a.out.allUpdates()) }, 2*time.Second).Should(Equal("one two "))
	})
	AfterEach(func() { s.close() })

	promptAnswer := func() map[string]any {
		for _, f := range a.out.all() {
			if f["id"] == "turn-1" && f["method"] == nil {
				return f
			}
		}
		return nil
	}
	activeTurnOf := func(res map[string]any) any {
		meta, _ := res["_meta"].(map[string]any)
		return meta["activeTurn"]
	}
	// turnOver: the session_info_update saying the turn ended.
	turnOver := func(h *harness) int {
		n := 0
		for _, u := range h.out.allUpdates() {
			if meta, ok := u["_meta"].(map[string]any); ok && u["sessionUpdate"] == "session_info_update" {
				if v, ok := meta["activeTurn"]; ok && v == nil {
					n++
				}
			}
		}
		return n
	}

	It("replays the history with the running message so far, then the rest live: the whole answer once; activeTurn until the end", func() {
		before := time.Now().UTC().Add(-time.Second)
		b := s.connect()
		res := b.result(b.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))
		active, ok := activeTurnOf(res).(map[string]any)
		Expect(ok).To(BeTrue(), "activeTurn in the load answer: %v", res)
		Expect(active["promptRequest"]).To(Equal("turn-1"))
		started, err := time.Parse(time.RFC3339, active["startedAt"].(string))
		Expect(err).NotTo(HaveOccurred())
		Expect(started).To(BeTemporally(">", before))

		// replayed before the answer: the prompt, then the message so far
		var replayed []map[string]any
		for _, f := range b.out.all() {
			if f["id"] != nil && f["method"] == nil && f["result"] != nil && activeTurnOf(f["result"].(map[string]any)) != nil {
				break
			}
			if f["method"] == "session/update" {
				replayed = append(replayed, f["params"].(map[string]any)["update"].(map[string]any))
			}
		}
		Expect(replayed).NotTo(BeEmpty())
		Expect(replayed[0]).To(HaveKeyWithValue("sessionUpdate", "user_message_chunk"))
		Expect(agentText(replayed)).To(Equal("one two "))
		// the chunks keep the messageId the live ones had
		Expect(messageIDs(replayed)).To(Equal(messageIDs(a.out.allUpdates())))

		list := b.result(b.call("session/list", map[string]any{}))
		entry := list["sessions"].([]any)[0].(map[string]any)
		Expect(entry["_meta"]).To(HaveKeyWithValue("activeTurn", active), "session/list shows the running turn")
		resumed := s.connect()
		Expect(activeTurnOf(resumed.result(resumed.call("session/resume", map[string]any{"sessionId": sid, "cwd": cwd})))).To(Equal(active))

		close(gate)
		Eventually(promptAnswer, 2*time.Second).ShouldNot(BeNil())
		Expect(promptAnswer()["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Eventually(func() string { return agentText(b.out.allUpdates()) }, 2*time.Second).Should(Equal("one two three"),
			"replay + live: the whole answer exactly once, in order")
		for _, h := range []*harness{a, b, resumed} {
			Eventually(func() int { return turnOver(h) }, 2*time.Second).Should(Equal(1), "every attached client is told the turn ended")
		}
		Expect(turnOver(b)).To(Equal(1))

		// and afterwards: no activeTurn anywhere
		c := s.connect()
		Expect(activeTurnOf(c.result(c.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd})))).To(BeNil())
		list = c.result(c.call("session/list", map[string]any{}))
		Expect(list["sessions"].([]any)[0]).NotTo(HaveKey("_meta"))
		Expect(agentText(c.out.allUpdates())).To(Equal("one two three"), "the history has the whole answer, once")
	})

	It("lets the loading connection cancel the turn", func() {
		b := s.connect()
		Expect(activeTurnOf(b.result(b.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd})))).NotTo(BeNil())
		b.notify("session/cancel", map[string]any{"sessionId": sid})
		Eventually(promptAnswer, 2*time.Second).ShouldNot(BeNil())
		Expect(promptAnswer()["result"]).To(HaveKeyWithValue("stopReason", "cancelled"))
		Eventually(func() int { return turnOver(b) }, 2*time.Second).Should(Equal(1))
		c := s.connect()
		Expect(activeTurnOf(c.result(c.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd})))).To(BeNil())
	})

	It("says no activeTurn for a session at rest", func() {
		close(gate)
		Eventually(promptAnswer, 2*time.Second).ShouldNot(BeNil())
		b := s.connect()
		Expect(activeTurnOf(b.result(b.call("session/resume", map[string]any{"sessionId": sid, "cwd": cwd})))).To(BeNil())
	})
})

// agentText joins the agent_message_chunk texts of updates.
func agentText(updates []map[string]any) string {
	var b strings.Builder
	for _, u := range updates {
		if u["sessionUpdate"] == "agent_message_chunk" {
			b.WriteString(u["content"].(map[string]any)["text"].(string))
		}
	}
	return b.String()
}

// messageIDs are the distinct messageIds of the agent chunks, in order.
func messageIDs(updates []map[string]any) []any {
	var out []any
	for _, u := range updates {
		if u["sessionUpdate"] == "agent_message_chunk" && (len(out) == 0 || out[len(out)-1] != u["messageId"]) {
			out = append(out, u["messageId"])
		}
	}
	return out
}

var _ = Describe("a load while the running turn waits for a tool's permission", func() {
	It("replays the tool call once, asks the newcomer, and streams the rest: every update exactly once, in the order the first client saw", func() {
		p := &scriptedProvider{}
		cwd := GinkgoT().TempDir()
		s := newSessionHarness(p, GinkgoT().TempDir(), nil, echoTool{})
		DeferCleanup(s.close)
		a := s.connect()
		sid := a.result(a.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		p.then(func(ctx context.Context, emit func(llm.Event)) error {
			emit(llm.Event{Type: llm.EventTextDelta, Text: "let me echo. "})
			return callTool("c1", "echo", `{"x":1}`)(ctx, emit)
		}).then(say("echoed ", "it"))
		from := len(a.out.all())
		id := a.call("session/prompt", textPrompt(sid, "echo please"))
		Eventually(func() int { return len(a.out.requests("session/request_permission")) }, 2*time.Second).Should(Equal(1))

		b := s.connect()
		res := b.result(b.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))
		Expect(res["_meta"]).To(HaveKey("activeTurn"))
		Eventually(func() int { return len(b.out.requests("session/request_permission")) }, 2*time.Second).Should(Equal(1))
		b.answer(b.out.requests("session/request_permission")[0]["id"],
			map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}})
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))

		Eventually(func() string { return agentText(b.out.allUpdates()) }, 2*time.Second).Should(Equal("let me echo. echoed it"))
		toolUpdates := func(ups []map[string]any) []string {
			var out []string
			for _, u := range ups {
				if u["sessionUpdate"] == "tool_call" || u["sessionUpdate"] == "tool_call_update" {
					out = append(out, u["sessionUpdate"].(string)+":"+u["toolCallId"].(string)+":"+jsonString(u["status"]))
				}
			}
			return out
		}
		var seenByA []map[string]any
		for _, f := range framesAfter(a, from) {
			if f["method"] == "session/update" {
				seenByA = append(seenByA, f["params"].(map[string]any)["update"].(map[string]any))
			}
		}
		Expect(toolUpdates(b.out.allUpdates())).To(Equal(toolUpdates(seenByA)),
			"the tool's updates as the first client saw them: once each, in order")
	})
})

func jsonString(v any) string { b, _ := json.Marshal(v); return string(b) }
