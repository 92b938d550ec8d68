package actors

import (
	"bytes"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// A leg rejoining a holder whose proxy answers its follow and then says the
// session left, before that Share returned: the leg follows on to the next
// holder, and only that holder's answer settles it. Four pods over one
// PostgreSQL (podNet): a holds the session, b serves it to its client
// through a stub, c and then d take it over.
var _ = Describe("a leg that follows the session on before its Share to the last holder returned (PostgreSQL)", func() {
	It("settles on the next holder's answer to its follow, not the last one's: a prompt sent meanwhile runs there once, answered end_turn", func() {
		stores := pgPods(4)
		pa, pc, pd := &scriptedProvider{}, &scriptedProvider{}, &scriptedProvider{}
		a := newSessionHarnessOn(pa, stores[0], nil)
		b := newSessionHarnessOn(&scriptedProvider{}, stores[1], nil)
		move := func(c *Config) { c.SessionAttach = AttachMove }
		c := newSessionHarnessOn(pc, stores[2], move)
		d := newSessionHarnessOn(pd, stores[3], move)
		pods := []*sessionHarness{a, b, c, d}
		net := &podNet{pods: map[string]*Server{}, gate: map[string]chan struct{}{}, gateAfter: map[string]chan struct{}{}}
		for i, h := range pods {
			DeferCleanup(h.close)
			net.pods[stores[i].Incarnation()] = h.srv
			h.srv.SetHandover(podOf{net: net, here: h.srv})
		}
		incC, incD := stores[2].Incarnation(), stores[3].Incarnation()
		cwd := GinkgoT().TempDir()
		owner := a.connect()
		sid := owner.result(owner.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		load := func(h *harness) map[string]any {
			return h.result(h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
		}
		b1 := b.connect()
		load(b1)

		By("c takes the session over; b's leg follows it there, and c's proxy answers the follow while its Share is held")
		afterC := make(chan struct{})
		releaseC := sync.OnceFunc(func() { close(afterC) })
		DeferCleanup(releaseC)
		answeredByC := make(chan struct{})
		heardC := sync.OnceFunc(func() { close(answeredByC) })
		net.mu.Lock()
		net.gateAfter[incC] = afterC
		net.heard = func(from *Server, body []byte) {
			if from == c.srv && bytes.Contains(body, followID) {
				heardC()
			}
		}
		net.mu.Unlock()
		load(c.connect())
		Eventually(answeredByC, 5*time.Second).Should(BeClosed())

		By("b's client prompts meanwhile: it waits for the follow")
		pd.then(say("on ", "d"))
		prompt := b1.call("session/prompt", textPrompt(sid, "meanwhile"))

		By("d takes the session from c: c's proxy says it left, b's leg follows on to d, whose answer to the follow is held on its way")
		_, releaseD := net.holdFrom(d.srv)
		DeferCleanup(releaseD)
		load(d.connect())
		Eventually(func() int {
			net.mu.Lock()
			defer net.mu.Unlock()
			return net.served[incD]
		}, 5*time.Second, 5*time.Millisecond).Should(Equal(1), "b's leg asked d for a proxy")
		Consistently(pd.requests, 500*time.Millisecond, 10*time.Millisecond).Should(BeEmpty(),
			"the prompt waits for d's own answer to the follow; c's does not settle the leg")

		By("d's answer comes: the prompt runs on d, answered once")
		releaseD()
		Expect(b1.result(prompt)["stopReason"]).To(Equal("end_turn"), "not answered cancelled")
		Consistently(func() int { return answersTo(b1, prompt) }, 300*time.Millisecond).Should(Equal(1))
		Expect(pd.requests()).To(HaveLen(1), "it ran once, on d")
		Expect(chatOf(b1, 0, "agent_message_chunk")).To(Equal("on d"))
		Expect(pa.requests()).To(BeEmpty())
		Expect(pc.requests()).To(BeEmpty())
	})
})
