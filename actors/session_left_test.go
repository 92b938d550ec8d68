package actors

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("a session handed off", func() {
	It("answers every request its connection sent it, those that reached it after it let go too", func() {
		s := newSessionHarness(&scriptedProvider{}, GinkgoT().TempDir(), nil)
		defer s.close()
		h := s.connect()
		for round := 0; round < 10; round++ {
			sid := h.result(h.call("session/new", map[string]any{"cwd": GinkgoT().TempDir()}))["sessionId"].(string)
			var ids []float64
			handedOff := make(chan error, 1)
			// The requests queue on the connection while the session lets
			// go: the connection hears it left only after passing them on.
			go func() { handedOff <- s.srv.HandOff(sid, 4*time.Second) }()
			for range 200 {
				ids = append(ids, h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}))
			}
			Eventually(handedOff, 5*time.Second).Should(Receive(BeNil()))
			Eventually(unanswered(h, ids), 3*time.Second, 10*time.Millisecond).Should(BeEmpty(), "round %d", round)
			for _, id := range ids {
				if r := h.out.response(id); r["error"] != nil {
					Expect(r["error"]).To(HaveKeyWithValue("data", HaveKeyWithValue("session_id", "Session moved to another connection")))
				}
			}
		}
	})
})

var _ = Describe("a session handed off while another connection loads it", func() {
	It("answers every load once: one that reached the actor as it stopped is opened anew once it is gone", func() {
		s := newSessionHarness(&scriptedProvider{}, GinkgoT().TempDir(), nil)
		defer s.close()
		h, g := s.connect(), s.connect()
		cwd := GinkgoT().TempDir()
		for round := 0; round < 10; round++ {
			sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
			var loads []float64
			handedOff := make(chan error, 1)
			go func() { handedOff <- s.srv.HandOff(sid, 4*time.Second) }()
			for range 30 {
				loads = append(loads, g.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
			}
			Eventually(handedOff, 5*time.Second).Should(Receive(BeNil()))
			Eventually(unanswered(g, loads), 3*time.Second, 10*time.Millisecond).Should(BeEmpty(), "round %d", round)
			for _, id := range loads {
				Expect(answersTo(g, id)).To(Equal(1), "load %v answered once", id)
			}
		}
	})
})

// unanswered are the requests of ids that x has no answer to yet.
func unanswered(x *harness, ids []float64) func() []float64 {
	return func() []float64 {
		var left []float64
		for _, id := range ids {
			if x.out.response(id) == nil {
				left = append(left, id)
			}
		}
		return left
	}
}
