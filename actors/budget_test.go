package actors

import (
	"context"
	"io"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
)

var _ = Describe("token budgets", func() {
	var (
		h      *harness
		p      *scriptedProvider
		st     *store.FileStore
		sid    string
		budget store.Budget
		now    time.Time
		seen   []llm.Usage
		slow   *slowCounter
	)
	ctx := context.Background()
	BeforeEach(func() {
		p = &scriptedProvider{}
		now = time.Date(2026, 12, 6, 7, 30, 0, 0, time.UTC)
		seen, slow = nil, nil
		var err error
		st, err = store.New(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
	})
	start := func() {
		var counter store.UsageCounter = st
		if slow != nil {
			counter = slow
		}
		ledger := &Ledger{Counter: counter, Now: func() time.Time { return now },
			Budget:  func(string) store.Budget { return budget },
			Observe: func(_, _ string, u llm.Usage) { seen = append(seen, u) }}
		srv := NewServer(Deps{Store: st, Provider: p, Tools: tools.NewRegistry(echoTool{readOnly: true}), Log: zerolog.New(io.Discard),
			Config: Config{Version: "test", LLM: llm.Config{APIKey: "k", Model: "m"}}, Ledger: ledger})
		out := &recorder{}
		h = &harness{srv: srv, conn: srv.Connect(out), out: out, provider: p}
		sid = h.newSession(GinkgoT().TempDir())
	}
	AfterEach(func() { h.close() })
	prompt := func(text string) float64 {
		return h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": text}}})
	}
	used := func() [2]int64 {
		d, m, err := st.TokensUsed(ctx, DefaultPrincipal, now)
		Expect(err).NotTo(HaveOccurred())
		return [2]int64{d, m}
	}

	It("counts every model call's tokens for the session's principal and model, budget or none", func() {
		budget = store.Budget{}
		start()
		Expect(h.result(prompt("hi"))["stopReason"]).To(Equal("end_turn"))
		p.then(say("a"))
		Expect(h.result(prompt("again"))["stopReason"]).To(Equal("end_turn"))
		Eventually(used).Should(Equal([2]int64{15, 15})) // the default reply reports no usage
		rows, err := st.UsageSince(ctx, now)
		Expect(err).NotTo(HaveOccurred())
		Expect(rows).To(Equal([]store.UsageTotal{{Principal: DefaultPrincipal, Model: "m", Calls: 1,
			Usage: store.Usage{InputTokens: 10, OutputTokens: 5}}}))
		Expect(seen).To(Equal([]llm.Usage{{InputTokens: 10, OutputTokens: 5}}))
	})

	It("refuses a prompt over budget before the model is called, saying when the budget resets", func() {
		budget = store.Budget{PerDay: 100, PerMonth: 10_000}
		Expect(st.AddUsage(ctx, DefaultPrincipal, "m", now, llm.Usage{InputTokens: 90, OutputTokens: 10})).To(Succeed())
		start()
		e := h.errorOf(prompt("hi"))
		Expect(e["code"]).To(BeEquivalentTo(protocol.CodeLimit))
		Expect(e["message"]).To(ContainSubstring("Token budget exceeded: 100 of 100 tokens used this day"))
		Expect(e["data"]).To(Equal(map[string]any{"reason": "token_budget_exceeded", "period": "day",
			"limit": 100.0, "used": 100.0, "resetAt": "2026-12-07T00:00:00Z"}))
		Expect(p.requests()).To(BeEmpty())

		// Next day the budget is fresh.
		now = now.Add(24 * time.Hour)
		p.then(say("fine"))
		Expect(h.result(prompt("hi"))["stopReason"]).To(Equal("end_turn"))
		Expect(p.requests()).To(HaveLen(1))
	})

	It("lets a turn that crosses the line finish its step, then stops it with max_tokens and a message", func() {
		budget = store.Budget{PerMonth: 30}
		p.then(func(_ context.Context, emit func(llm.Event)) error {
			emit(llm.Event{Type: llm.EventToolCallStart, Index: 0, ID: "c1", Name: "echo"})
			emit(llm.Event{Type: llm.EventToolCallArgs, Index: 0, ArgsDelta: `{}`})
			emit(llm.Event{Type: llm.EventToolCallEnd, Index: 0})
			emit(llm.Event{Type: llm.EventUsage, Usage: llm.Usage{InputTokens: 25, OutputTokens: 10}})
			emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopToolUse})
			return nil
		})
		start()
		res := h.result(prompt("go"))
		Expect(res["stopReason"]).To(Equal("max_tokens"))
		Expect(p.requests()).To(HaveLen(1), "no model call after the line was crossed")
		var tool, text bool
		for _, u := range h.out.updates() {
			if u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed" {
				tool = true
			}
			if u["sessionUpdate"] == "agent_message_chunk" {
				Expect(u["content"].(map[string]any)["text"]).To(Equal(
					"Stopped: the token budget of this month is used up (35 of 30 tokens). It resets at 2027-01-01T00:00:00Z."))
				text = true
			}
		}
		Expect(tool).To(BeTrue(), "the step's tool call ran to its end")
		Expect(text).To(BeTrue())
		// The next prompt is refused outright.
		Expect(h.errorOf(prompt("more"))["data"]).To(HaveKeyWithValue("period", "month"))
	})
	It("answers a prompt of a person with a budget once its usage is counted, so the next prompt anywhere is checked against it", func() {
		costly := func(_ context.Context, emit func(llm.Event)) error {
			emit(llm.Event{Type: llm.EventTextDelta, Text: "done"})
			emit(llm.Event{Type: llm.EventUsage, Usage: llm.Usage{InputTokens: 60, OutputTokens: 10}})
			emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopEndTurn})
			return nil
		}
		slow = &slowCounter{UsageCounter: st, gate: make(chan struct{})}
		budget = store.Budget{PerDay: 100}
		p.then(costly)
		start()
		id := prompt("one")
		Consistently(func() map[string]any { return h.out.response(id) }, 300*time.Millisecond, 10*time.Millisecond).Should(BeNil(),
			"not answered while its usage is being counted")
		close(slow.gate)
		Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(used()).To(Equal([2]int64{70, 70}), "counted when the answer is there")

		By("without a budget the answer does not wait for the count")
		slow.gate = make(chan struct{})
		budget = store.Budget{}
		p.then(costly)
		Expect(h.result(prompt("two"))["stopReason"]).To(Equal("end_turn"))
		Expect(used()).To(Equal([2]int64{70, 70}), "the count is still held")
		close(slow.gate)
		Eventually(used).Should(Equal([2]int64{140, 140}))
	})
})

// slowCounter is a real usage counter whose AddUsage waits for gate: a
// store slow to take a count.
type slowCounter struct {
	store.UsageCounter
	gate chan struct{}
}

func (c *slowCounter) AddUsage(ctx context.Context, principal, model string, at time.Time, u llm.Usage) error {
	<-c.gate
	return c.UsageCounter.AddUsage(ctx, principal, model, at, u)
}
