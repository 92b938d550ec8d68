package actors

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("the model host warmed as a session opens (llm.Warmer)", func() {
	It("warms the provider once per session a client opens, new or loaded again, before answering", func() {
		p := &scriptedProvider{}
		s := newSessionHarness(p, GinkgoT().TempDir(), func(c *Config) { c.SessionIdle = 150 * time.Millisecond })
		DeferCleanup(s.close)
		cwd := GinkgoT().TempDir()
		h := s.connect()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		Expect(p.warms.Load()).To(BeEquivalentTo(1))
		h.result(h.call("session/prompt", textPrompt(sid, "one")))
		Expect(p.warms.Load()).To(BeEquivalentTo(1), "a prompt is not an opening")
		// evicted when idle, then opened again by a load
		Eventually(s.srv.Metrics().Sessions.Load, 5*time.Second, 20*time.Millisecond).Should(BeZero())
		h.result(h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))
		Expect(p.warms.Load()).To(BeEquivalentTo(2))
	})
})
