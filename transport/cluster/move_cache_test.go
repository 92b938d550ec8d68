package cluster

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("the moved-connections cache", func() {
	It("keeps where a connection went, and that it went nowhere only for a moment", func() {
		var mc movedCache
		mc.put("c1", "pod-b")
		mc.put("c2", "")
		to, ok := mc.get("c1")
		Expect(ok).To(BeTrue())
		Expect(to).To(Equal("pod-b"))
		to, ok = mc.get("c2")
		Expect(ok).To(BeTrue(), "a fresh miss is cached: no store read per request")
		Expect(to).To(BeEmpty())

		By("a miss older than movedMissTTL is read again from the store (the move may be recorded since)")
		mc.mu.Lock()
		e := mc.m["c2"]
		e.at = e.at.Add(-movedMissTTL - time.Millisecond)
		mc.m["c2"] = e
		mc.mu.Unlock()
		_, ok = mc.get("c2")
		Expect(ok).To(BeFalse())
		_, ok = mc.get("c1")
		Expect(ok).To(BeTrue(), "a known move does not expire")
	})
})
