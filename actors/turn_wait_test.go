package actors

import (
	"context"
	"io"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
)

var _ = Describe("a turn under the shared model limit", func() {
	It("tells its client once that it waits, queues as the session's owner, and can be cancelled while it waits", func() {
		gate := llm.NewLocalGate(1)
		limit := &llm.Limit{Gate: gate, Key: "k"}
		p := &scriptedProvider{}
		st, err := store.New(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		srv := NewServer(Deps{Store: st, Provider: llm.WithLimit(p, *limit), Tools: tools.NewRegistry(),
			Log: zerolog.New(io.Discard), Config: Config{Version: "test", LLM: llm.Config{APIKey: "k", Model: "m", Limit: limit}}})
		out := &recorder{}
		h := &harness{srv: srv, conn: srv.Connect(out), out: out, provider: p}
		defer h.close()
		sid := h.newSession(GinkgoT().TempDir())

		// Someone else holds the only slot.
		release, err := gate.Enter(context.Background(), "k", "someone", nil)
		Expect(err).NotTo(HaveOccurred())
		id := h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "hi"}}})
		waiting := func() []string {
			var texts []string
			for _, u := range h.out.updates() {
				if u["sessionUpdate"] == "agent_thought_chunk" {
					texts = append(texts, u["content"].(map[string]any)["text"].(string))
				}
			}
			return texts
		}
		Eventually(waiting).Should(ConsistOf(HavePrefix("Waiting for the model: it is busy (shared limit); 1 request ahead.")))
		Consistently(waiting, 200*time.Millisecond).Should(HaveLen(1), "one notice while it waits")
		h.notify("session/cancel", map[string]any{"sessionId": sid})
		Expect(h.result(id)["stopReason"]).To(Equal("cancelled"))

		By("the cancelled request held no slot: the next goes at once when the holder leaves")
		release()
		p.then(say("fine"))
		id = h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "again"}}})
		Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
		Expect(p.requests()).To(HaveLen(1), "the cancelled prompt never reached the model")
		Expect(strings.Join(waiting(), "")).NotTo(ContainSubstring("paused"))
	})
})
