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
			Eventually(func() []float64 {
				var unanswered []float64
				for _, id := range ids {
					if h.out.response(id) == nil {
						unanswered = append(unanswered, id)
					}
				}
				return unanswered
			}, 3*time.Second, 10*time.Millisecond).Should(BeEmpty(), "round %d", round)
			for _, id := range ids {
				if r := h.out.response(id); r["error"] != nil {
					Expect(r["error"]).To(HaveKeyWithValue("data", HaveKeyWithValue("session_id", "Session moved to another connection")))
				}
			}
		}
	})
})
