package actors

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

// A client of a stub may use any request id, the ids of the stub's own
// requests to its proxies too (followID, the follow's; shareInitID, the
// proxy's initialize): the stub relays such a request as any other, and
// its answer is the client's. Two pods over one PostgreSQL (podNet): a
// holds the session, b serves it to its clients through a stub.

// stubPods makes the two pods, a (its provider pa) and b, and a session a
// holds; it returns b.
func stubPods(pa *scriptedProvider) (b *sessionHarness, sid, cwd string) {
	stores := pgPods(2)
	a := newSessionHarnessOn(pa, stores[0], nil)
	b = newSessionHarnessOn(&scriptedProvider{}, stores[1], nil)
	net := &podNet{pods: map[string]*Server{stores[0].Incarnation(): a.srv, stores[1].Incarnation(): b.srv}, gate: map[string]chan struct{}{}}
	for _, h := range []*sessionHarness{a, b} {
		DeferCleanup(h.close)
		h.srv.SetHandover(podOf{net: net, here: h.srv})
	}
	cwd = GinkgoT().TempDir()
	owner := a.connect()
	sid = owner.result(owner.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
	return b, sid, cwd
}

// sendWithID delivers h's request method with id; answersWithID are h's
// answers to id so far.
func sendWithID(h *harness, id protocol.RawMessage, method string, params any) {
	h.conn.Deliver(&protocol.Message{JSONRPC: "2.0", ID: id, Method: method, Params: protocol.MustMarshal(params)})
}

func answersWithID(h *harness, id protocol.RawMessage) []map[string]any {
	var want any
	_ = protocol.Unmarshal(id, &want)
	var out []map[string]any
	for _, f := range h.out.all() {
		if f["id"] == want && f["method"] == nil {
			out = append(out, f)
		}
	}
	return out
}

var _ = Describe("a stub's client using the id of the stub's own follow (PostgreSQL)", func() {
	var (
		b        *sessionHarness
		pa       *scriptedProvider
		sid, cwd string
	)

	BeforeEach(func() {
		pa = &scriptedProvider{}
		b, sid, cwd = stubPods(pa)
	})

	send := func(h *harness, method string, params any) { sendWithID(h, followID, method, params) }
	answers := func(h *harness) []map[string]any { return answersWithID(h, followID) }

	It("answers the client's own request with that id, and leaves its running prompt alone", func() {
		release := make(chan struct{})
		ended := sync.OnceFunc(func() { close(release) })
		DeferCleanup(ended)
		pa.then(func(ctx context.Context, emit func(llm.Event)) error {
			emit(llm.Event{Type: llm.EventTextDelta, Text: "part "})
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			emit(llm.Event{Type: llm.EventTextDelta, Text: "done"})
			emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopEndTurn})
			return nil
		})
		b1 := b.connect()
		b1.result(b1.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
		from := len(b1.out.all())
		prompt := b1.call("session/prompt", textPrompt(sid, "long"))
		Eventually(func() string { return chatOf(b1, from, "agent_message_chunk") }, 5*time.Second).Should(Equal("part "), "the turn runs on a")

		send(b1, "session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"})
		Eventually(func() []map[string]any { return answers(b1) }, 5*time.Second, 5*time.Millisecond).Should(
			ConsistOf(HaveKey("result")), "its own answer, from a")
		Consistently(func() map[string]any { return b1.out.response(prompt) }, 300*time.Millisecond, 5*time.Millisecond).Should(BeNil(),
			"the prompt runs on: nothing answers it cancelled")

		ended()
		Expect(b1.result(prompt)["stopReason"]).To(Equal("end_turn"))
		Consistently(func() int { return answersTo(b1, prompt) }, 200*time.Millisecond).Should(Equal(1))
		Expect(answers(b1)).To(HaveLen(1))
	})

	It("answers a load of another connection that has that id", func() {
		b1 := b.connect()
		b1.result(b1.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
		b2 := b.connect()
		send(b2, "session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
		Eventually(func() []map[string]any { return answers(b2) }, 5*time.Second, 5*time.Millisecond).Should(
			ConsistOf(HaveKey("result")), "b's second leg relays it to a, and a's answer is b2's")
		Expect(b2.result(b2.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}))).NotTo(BeNil(), "b2 goes on")
	})
})

// shareInitID is the id of the initialize every Share sends the holder's
// proxy, with the leg's load or resume: a client's request with that id,
// its load sent with that initialize too, is answered as any other.
var _ = Describe("a stub's client using the id of its proxy's initialize (PostgreSQL)", func() {
	var (
		b        *sessionHarness
		sid, cwd string
	)

	BeforeEach(func() {
		b, sid, cwd = stubPods(&scriptedProvider{})
	})

	load := func(h *harness) {
		sendWithID(h, shareInitID, "session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
	}
	answers := func(h *harness) func() []map[string]any {
		return func() []map[string]any { return answersWithID(h, shareInitID) }
	}

	It("answers a request with that id of a client of an attached leg, once", func() {
		b1 := b.connect()
		b1.result(b1.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
		sendWithID(b1, shareInitID, "session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"})
		Eventually(answers(b1), 5*time.Second, 5*time.Millisecond).Should(ConsistOf(HaveKey("result")), "its own answer, from a")
		Consistently(answers(b1), 300*time.Millisecond, 5*time.Millisecond).Should(HaveLen(1))
	})

	It("answers the load with that id that makes the stub, once", func() {
		b1 := b.connect()
		load(b1)
		Eventually(answers(b1), 5*time.Second, 5*time.Millisecond).Should(
			ConsistOf(HaveKey("result")), "the first Share's proxy answers its initialize, then b1's load")
		Consistently(answers(b1), 300*time.Millisecond, 5*time.Millisecond).Should(HaveLen(1), "the initialize's is not b1's")
		Expect(b1.result(b1.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}))).NotTo(BeNil(), "b1 goes on")
	})

	It("answers a load with that id of another connection, once", func() {
		b1 := b.connect()
		b1.result(b1.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
		b2 := b.connect()
		load(b2)
		Eventually(answers(b2), 5*time.Second, 5*time.Millisecond).Should(
			ConsistOf(HaveKey("result")), "b's second leg's proxy answers its initialize, then b2's load")
		Consistently(answers(b2), 300*time.Millisecond, 5*time.Millisecond).Should(HaveLen(1), "the initialize's is not b2's")
		Expect(answers(b1)()).To(BeEmpty())
		Expect(b2.result(b2.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}))).NotTo(BeNil(), "b2 goes on")
	})
})
