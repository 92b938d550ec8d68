package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
)

// echoTool is a minimal tool for exercising the tool actor path.
type echoTool struct {
	readOnly bool
	panics   bool
}

func (echoTool) Name() string            { return "echo" }
func (echoTool) Description() string     { return "echo the input" }
func (echoTool) Schema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (echoTool) Kind() tools.Kind        { return tools.KindOther }
func (e echoTool) ReadOnly() bool        { return e.readOnly }
func (e echoTool) Prepare(_ *tools.Env, input json.RawMessage) (tools.Call, error) {
	return &tools.FuncCall{TitleText: "Echo " + string(input), RunFunc: func(context.Context, func(string)) tools.Result {
		if e.panics {
			panic("echo exploded")
		}
		return tools.Result{Output: "echo:" + string(input)}
	}}, nil
}

func callTool(id, name, args string) func(context.Context, func(llm.Event)) error {
	return func(_ context.Context, emit func(llm.Event)) error {
		emit(llm.Event{Type: llm.EventToolCallStart, Index: 0, ID: id, Name: name})
		emit(llm.Event{Type: llm.EventToolCallArgs, Index: 0, ArgsDelta: args})
		emit(llm.Event{Type: llm.EventToolCallEnd, Index: 0})
		emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopToolUse})
		return nil
	}
}

var _ = Describe("a prompt turn", func() {
	var (
		h   *harness
		p   *scriptedProvider
		sid string
	)
	prompt := func(text string) float64 {
		return h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": text}}})
	}
	start := func(extra ...tools.Tool) {
		h = newHarness(p, extra...)
		sid = h.newSession(GinkgoT().TempDir())
	}
	BeforeEach(func() { p = &scriptedProvider{} })
	AfterEach(func() { h.close() })

	It("streams text and thinking before the response and sums usage", func() {
		p.then(func(_ context.Context, emit func(llm.Event)) error {
			emit(llm.Event{Type: llm.EventThinkingDelta, Text: "hmm"})
			// "lo" arrived with "Hel" (one socket read): they go out as one chunk
			emit(llm.Event{Type: llm.EventTextDelta, Text: "Hel", Buffered: true})
			emit(llm.Event{Type: llm.EventTextDelta, Text: "lo"})
			emit(llm.Event{Type: llm.EventUsage, Usage: llm.Usage{InputTokens: 7, OutputTokens: 3}})
			emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopEndTurn})
			return nil
		})
		start()
		id := prompt("hi")
		res := h.result(id)
		Expect(res["stopReason"]).To(Equal("end_turn"))
		Expect(res["usage"]).To(Equal(map[string]any{"inputTokens": 7.0, "outputTokens": 3.0, "totalTokens": 10.0}))
		ups := h.out.updates()
		Expect(ups).To(HaveLen(2))
		Expect(ups[0]["sessionUpdate"]).To(Equal("agent_thought_chunk"))
		Expect(ups[0]["content"]).To(Equal(map[string]any{"type": "text", "text": "hmm"}))
		Expect(ups[1]["sessionUpdate"]).To(Equal("agent_message_chunk"))
		Expect(ups[1]["content"]).To(Equal(map[string]any{"type": "text", "text": "Hello"}))
		// the response is the last frame: every update precedes it
		all := h.out.all()
		Expect(all[len(all)-1]["id"]).To(Equal(id))
	})

	It("sends each delta as its own chunk while it keeps up with the model", func() {
		chunks := func() []string {
			var out []string
			for _, u := range h.out.updates() {
				if u["sessionUpdate"] == "agent_message_chunk" {
					out = append(out, u["content"].(map[string]any)["text"].(string))
				}
			}
			return out
		}
		p.then(func(_ context.Context, emit func(llm.Event)) error {
			for _, w := range []string{"one ", "two ", "three"} {
				n := len(chunks())
				emit(llm.Event{Type: llm.EventTextDelta, Text: w})
				Eventually(func() int { return len(chunks()) }).Should(Equal(n + 1))
			}
			emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopEndTurn})
			return nil
		})
		start()
		Expect(h.result(prompt("hi"))["stopReason"]).To(Equal("end_turn"))
		Expect(chunks()).To(Equal([]string{"one ", "two ", "three"}))
	})

	It("joins received deltas into chunks of at most 64 KiB, thinking and text apart, nothing lost", func() {
		var want strings.Builder
		p.then(func(_ context.Context, emit func(llm.Event)) error {
			for i := range 20000 {
				w := fmt.Sprintf("w%05d ", i)
				if i%5000 == 4999 {
					emit(llm.Event{Type: llm.EventThinkingDelta, Text: "thought", Buffered: true})
				}
				emit(llm.Event{Type: llm.EventTextDelta, Text: w, Buffered: true})
				want.WriteString(w)
			}
			emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopEndTurn})
			return nil
		})
		start()
		Expect(h.result(prompt("hi"))["stopReason"]).To(Equal("end_turn"))
		var got strings.Builder
		var kinds []string
		for _, u := range h.out.updates() {
			text := u["content"].(map[string]any)["text"].(string)
			Expect(len(text)).To(BeNumerically("<=", 64<<10+7))
			kind := u["sessionUpdate"].(string)
			if kind == "agent_thought_chunk" {
				Expect(text).To(Equal("thought"))
			} else {
				got.WriteString(text)
			}
			if len(kinds) == 0 || kinds[len(kinds)-1] != kind {
				kinds = append(kinds, kind)
			}
		}
		Expect(got.String()).To(Equal(want.String()))
		Expect(kinds).To(Equal([]string{"agent_message_chunk", "agent_thought_chunk", "agent_message_chunk",
			"agent_thought_chunk", "agent_message_chunk", "agent_thought_chunk", "agent_message_chunk",
			"agent_thought_chunk", "agent_message_chunk"}))
		// the history has the whole answer too
		p.then(say("ok"))
		h.result(prompt("again"))
		Expect(p.requests()[1].Messages[1].TextOf()).To(Equal(want.String()))
	})

	It("maps provider stop reasons", func() {
		p.then(func(_ context.Context, emit func(llm.Event)) error {
			emit(llm.Event{Type: llm.EventTextDelta, Text: "long"})
			emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopMaxTokens})
			return nil
		}).then(func(_ context.Context, emit func(llm.Event)) error {
			emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopRefusal})
			return nil
		})
		start()
		Expect(h.result(prompt("a"))["stopReason"]).To(Equal("max_tokens"))
		Expect(h.result(prompt("b"))["stopReason"]).To(Equal("refusal"))
	})

	It("keeps the conversation across prompts", func() {
		p.then(say("first answer"))
		start()
		h.result(prompt("one"))
		h.result(prompt("two"))
		reqs := p.requests()
		Expect(reqs).To(HaveLen(2))
		Expect(reqs[1].Messages).To(HaveLen(3))
		Expect(reqs[1].Messages[1].TextOf()).To(Equal("first answer"))
		Expect(reqs[1].Messages[2].TextOf()).To(Equal("two"))
	})

	It("answers cancelled on session/cancel and accepts the next prompt", func() {
		started := make(chan struct{})
		p.then(func(ctx context.Context, emit func(llm.Event)) error {
			emit(llm.Event{Type: llm.EventTextDelta, Text: "partial"})
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		start()
		id := prompt("long")
		Eventually(started).Should(BeClosed())
		h.notify("session/cancel", map[string]any{"sessionId": sid})
		h.notify("session/cancel", map[string]any{"sessionId": sid}) // idempotent
		Expect(h.result(id)["stopReason"]).To(Equal("cancelled"))
		Expect(h.result(prompt("again"))["stopReason"]).To(Equal("end_turn"))
		// the partial answer the user saw stays in the history
		Expect(p.requests()[1].Messages[1].TextOf()).To(Equal("partial"))
	})

	It("queues prompts while one runs, runs them in order, and refuses one beyond the queue's limit", func() {
		release := make(chan struct{})
		p.then(func(ctx context.Context, emit func(llm.Event)) error {
			<-release
			return say("done")(ctx, emit)
		})
		h = newHarnessWith(Config{PromptQueue: 2}, p)
		sid = h.newSession(GinkgoT().TempDir())
		first := prompt("one")
		second := prompt("two")
		third := prompt("three")
		full := h.errorOf(prompt("four"))
		Expect(full["code"]).To(Equal(float64(protocol.CodeLimit)))
		Expect(full["message"]).To(ContainSubstring("prompt queue of this session is full"))
		Expect(full["data"]).To(HaveKeyWithValue("reason", "prompt_queue_full"))
		close(release)
		for _, id := range []float64{first, second, third} {
			Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
		}
		reqs := p.requests()
		Expect(reqs).To(HaveLen(3))
		last := reqs[2].Messages
		var seen []string
		for _, m := range last {
			seen = append(seen, m.TextOf())
		}
		Expect(seen).To(Equal([]string{"one", "done", "two", "ok", "three"}))
		// a queued prompt's text is shown when it starts
		var echoed []string
		for _, u := range h.out.allUpdates() {
			if u["sessionUpdate"] == "user_message_chunk" {
				echoed = append(echoed, u["content"].(map[string]any)["text"].(string))
			}
		}
		Expect(echoed).To(Equal([]string{"two", "three"}))
	})

	It("answers every queued prompt cancelled on session/cancel", func() {
		started := make(chan struct{})
		p.then(func(ctx context.Context, emit func(llm.Event)) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		start()
		first := prompt("one")
		Eventually(started).Should(BeClosed())
		second, third := prompt("two"), prompt("three")
		h.notify("session/cancel", map[string]any{"sessionId": sid})
		for _, id := range []float64{first, second, third} {
			Expect(h.result(id)["stopReason"]).To(Equal("cancelled"))
		}
		Expect(p.requests()).To(HaveLen(1))
		Expect(h.result(prompt("again"))["stopReason"]).To(Equal("end_turn"))
	})

	It("turns a panic in the turn into -32603 with an error id and keeps the session", func() {
		p.then(func(context.Context, func(llm.Event)) error { panic("provider exploded") })
		start()
		e := h.errorOf(prompt("boom"))
		Expect(e["code"]).To(Equal(-32603.0))
		Expect(e["data"]).To(HaveKey("error_id"))
		Expect(e["message"]).To(ContainSubstring("provider exploded"))
		Expect(h.result(prompt("again"))["stopReason"]).To(Equal("end_turn"))
	})

	It("reports provider errors as an [Error] chunk and -32603, auth errors as -32000", func() {
		p.then(func(context.Context, func(llm.Event)) error { return errors.New("upstream broke") }).
			then(func(context.Context, func(llm.Event)) error { return &llm.APIError{Status: 401, Message: "bad key"} })
		start()
		e := h.errorOf(prompt("x"))
		Expect(e["code"]).To(Equal(-32603.0))
		Expect(h.out.updates()[0]["content"].(map[string]any)["text"]).To(HavePrefix("[Error] "))
		Expect(h.errorOf(prompt("y"))["code"]).To(Equal(-32000.0))
	})

	It("runs a read-only tool through a tool actor and feeds the result back", func() {
		p.then(callTool("c1", "echo", `{"a":1}`)).then(say("used it"))
		start(echoTool{readOnly: true})
		Expect(h.result(prompt("use echo"))["stopReason"]).To(Equal("end_turn"))
		ups := h.out.updates()
		Expect(ups[0]).To(HaveKeyWithValue("sessionUpdate", "tool_call"))
		Expect(ups[0]).To(HaveKeyWithValue("status", "pending"))
		Expect(ups[0]).To(HaveKeyWithValue("toolCallId", "c1"))
		Expect(ups[1]).To(HaveKeyWithValue("status", "in_progress"))
		Expect(ups[2]).To(HaveKeyWithValue("status", "completed"))
		msgs := p.requests()[1].Messages
		last := msgs[len(msgs)-1]
		Expect(last.Role).To(Equal(llm.RoleTool))
		Expect(last.Content[0].Text).To(Equal(`echo:{"a":1}`))
	})

	It("records each tool call's start before it runs and its result when it ends; the model sees one tool message as before", func() {
		root := GinkgoT().TempDir()
		st, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		p.then(callTools([3]string{"c1", "echo", `{"a":1}`}, [3]string{"c2", "echo", `{"a":2}`})).then(say("used them")).then(say("again"))
		h = newHarnessOn(st, Config{}, p, echoTool{readOnly: true})
		sid = h.newSession(GinkgoT().TempDir())
		Expect(h.result(prompt("use echo"))["stopReason"]).To(Equal("end_turn"))

		// The answer comes before the session lets go of its lock
		// (releaseBetweenTurns): wait for it as another process does
		// (cmd/internal/acpserver: WithLockWait).
		other, err := store.New(root, store.WithLockWait(time.Second))
		Expect(err).NotTo(HaveOccurred())
		s, es, err := other.Open(sid)
		Expect(err).NotTo(HaveOccurred())
		var kinds []string
		at := map[string]int{}
		for i, e := range es {
			kinds = append(kinds, string(e.Kind)+":"+e.CallID)
			at[kinds[i]] = i
		}
		Expect(kinds[:2]).To(Equal([]string{"message:", "message:"}))
		Expect(kinds[2:6]).To(ConsistOf("tool_start:c1", "tool_start:c2", "tool_result:c1", "tool_result:c2"))
		Expect(at["tool_start:c1"]).To(BeNumerically("<", at["tool_result:c1"]))
		Expect(at["tool_start:c2"]).To(BeNumerically("<", at["tool_result:c2"]))
		Expect(kinds[6:]).To(Equal([]string{"message:"}))
		Expect(s.Close()).To(Succeed())

		results := p.requests()[1].Messages[2]
		Expect(results.Role).To(Equal(llm.RoleTool))
		Expect(results.Content).To(HaveLen(2))
		Expect(results.Content[0].ToolCallID).To(Equal("c1"))
		Expect(results.Content[1].ToolCallID).To(Equal("c2"))
		By("the next prompt's context, read from the history, is what the turn itself sent")
		h.result(prompt("more"))
		next := p.requests()[2].Messages
		Expect(next[:3]).To(Equal(p.requests()[1].Messages))
	})

	It("answers an unknown tool with an error result to the model", func() {
		p.then(callTool("c1", "nope", `{}`)).then(say("ok"))
		start()
		h.result(prompt("x"))
		msgs := p.requests()[1].Messages
		Expect(msgs[len(msgs)-1].Content[0]).To(MatchFields2("Unknown tool: nope", true))
	})

	It("turns a panicking tool into a failed tool call and continues the turn", func() {
		p.then(callTool("c1", "echo", `{}`)).then(say("after crash"))
		start(echoTool{readOnly: true, panics: true})
		Expect(h.result(prompt("x"))["stopReason"]).To(Equal("end_turn"))
		Expect(h.out.updates()).To(ContainElement(HaveKeyWithValue("status", "failed")))
	})

	Describe("permissions", func() {
		It("asks, then runs on allow and remembers allow_always", func() {
			p.then(callTool("c1", "echo", `{}`)).then(say("a")).then(callTool("c2", "echo", `{}`)).then(say("b"))
			start(echoTool{})
			id := prompt("x")
			var req map[string]any
			Eventually(func() int { return len(h.out.requests("session/request_permission")) }).Should(Equal(1))
			req = h.out.requests("session/request_permission")[0]
			params := req["params"].(map[string]any)
			Expect(params["toolCall"]).To(HaveKeyWithValue("toolCallId", "c1"))
			h.answer(req["id"], map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_always"}})
			Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
			Expect(h.result(prompt("y"))["stopReason"]).To(Equal("end_turn"))
			Expect(h.out.requests("session/request_permission")).To(HaveLen(1))
		})

		DescribeTable("rejects without running the tool",
			func(answer map[string]any) {
				p.then(callTool("c1", "echo", `{}`)).then(say("ok"))
				start(echoTool{})
				id := prompt("x")
				Eventually(func() int { return len(h.out.requests("session/request_permission")) }).Should(Equal(1))
				h.answer(h.out.requests("session/request_permission")[0]["id"], answer)
				Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
				msgs := p.requests()[1].Messages
				Expect(msgs[len(msgs)-1].Content[0]).To(MatchFields2("Permission denied.", true))
			},
			Entry("reject_once", map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "reject_once"}}),
			Entry("legacy denied", map[string]any{"outcome": "denied"}),
		)

		It("ends the turn cancelled on a cancelled outcome", func() {
			p.then(callTool("c1", "echo", `{}`))
			start(echoTool{})
			id := prompt("x")
			Eventually(func() int { return len(h.out.requests("session/request_permission")) }).Should(Equal(1))
			h.answer(h.out.requests("session/request_permission")[0]["id"], map[string]any{"outcome": map[string]any{"outcome": "cancelled"}})
			Expect(h.result(id)["stopReason"]).To(Equal("cancelled"))
		})
	})
})

var _ = Describe("a turn cancelled while compacting", func() {
	It("does not keep the partial summary as an answer", func() {
		p := &scriptedProvider{}
		h := newHarness(p)
		defer h.close()
		sid := h.newSession(GinkgoT().TempDir())
		// two earlier turns so /compact has something to summarise
		for _, text := range []string{"one", "two"} {
			p.then(say("answer " + text))
			h.result(h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": text}}}))
		}
		p.then(func(ctx context.Context, emit func(llm.Event)) error {
			emit(llm.Event{Type: llm.EventTextDelta, Text: "partial summary"})
			<-ctx.Done()
			return ctx.Err()
		})
		id := h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "/compact"}}})
		Eventually(func() int { return len(p.requests()) }).Should(Equal(3))
		h.notify("session/cancel", map[string]any{"sessionId": sid})
		Expect(h.result(id)["stopReason"]).To(Equal("cancelled"))
		p.then(say("after"))
		h.result(h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "three"}}}))
		reqs := p.requests()
		for _, m := range reqs[len(reqs)-1].Messages {
			Expect(m.TextOf()).NotTo(ContainSubstring("partial summary"))
		}
	})
})

var _ = Describe("turn limits and permission order", func() {
	It("stops with max_turn_requests after the configured number of model calls", func() {
		p := &scriptedProvider{}
		for i := 0; i < 5; i++ {
			p.then(callTool(fmt.Sprintf("c%d", i), "echo", `{}`))
		}
		h := newHarnessWith(Config{MaxTurnRequests: 3}, p, echoTool{readOnly: true})
		defer h.close()
		sid := h.newSession(GinkgoT().TempDir())
		id := h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "loop"}}})
		Expect(h.result(id)["stopReason"]).To(Equal("max_turn_requests"))
		Expect(p.requests()).To(HaveLen(3))
	})

	It("asks the client one permission at a time", func() {
		p := &scriptedProvider{}
		p.then(func(_ context.Context, emit func(llm.Event)) error {
			for i, id := range []string{"p1", "p2"} {
				emit(llm.Event{Type: llm.EventToolCallStart, Index: i, ID: id, Name: "echo"})
				emit(llm.Event{Type: llm.EventToolCallArgs, Index: i, ArgsDelta: `{}`})
			}
			emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopToolUse})
			return nil
		}).then(say("done"))
		h := newHarness(p, echoTool{})
		defer h.close()
		sid := h.newSession(GinkgoT().TempDir())
		id := h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "two"}}})
		Eventually(func() int { return len(h.out.requests("session/request_permission")) }).Should(Equal(1))
		Consistently(func() int { return len(h.out.requests("session/request_permission")) }, 300*time.Millisecond).Should(Equal(1))
		first := h.out.requests("session/request_permission")[0]
		firstID := first["params"].(map[string]any)["toolCall"].(map[string]any)["toolCallId"]
		h.answer(first["id"], map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}})
		Eventually(func() int { return len(h.out.requests("session/request_permission")) }).Should(Equal(2))
		second := h.out.requests("session/request_permission")[1]
		secondID := second["params"].(map[string]any)["toolCall"].(map[string]any)["toolCallId"]
		Expect([]any{firstID, secondID}).To(ConsistOf("p1", "p2"))
		h.answer(second["id"], map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}})
		Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
	})
})
