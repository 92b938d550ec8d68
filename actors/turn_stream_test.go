package actors

import (
	"context"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
)

var _ = Describe("the event queue of a model call", func() {
	It("wakes the turn once per batch and makes the reader wait while it is full", func() {
		q := newEventQueue(1)
		var wakes atomic.Int32
		wake := func(m *streamBatch) {
			Expect(m.q).To(BeIdenticalTo(q))
			wakes.Add(1)
		}
		for range maxQueuedEvents {
			q.push(context.Background(), llm.Event{Type: llm.EventTextDelta, Text: "x"}, wake)
		}
		Expect(wakes.Load()).To(Equal(int32(1)))

		pushed := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			q.push(context.Background(), llm.Event{Type: llm.EventTextDelta, Text: "last"}, wake)
			close(pushed)
		}()
		Consistently(pushed, "50ms").ShouldNot(BeClosed())
		evs := q.take()
		Expect(evs).To(HaveLen(maxQueuedEvents))
		q.recycle(evs)
		Eventually(pushed).Should(BeClosed())
		Expect(wakes.Load()).To(Equal(int32(2)))
		evs = q.take()
		Expect(evs).To(HaveLen(1))
		Expect(evs[0].Text).To(Equal("last"))
	})

	It("lets a waiting reader go when the call is cancelled", func() {
		q := newEventQueue(1)
		ctx, cancel := context.WithCancel(context.Background())
		for range maxQueuedEvents {
			q.push(ctx, llm.Event{Type: llm.EventTextDelta, Text: "x"}, func(*streamBatch) {})
		}
		done := make(chan struct{})
		go func() {
			q.push(ctx, llm.Event{Type: llm.EventTextDelta, Text: "dropped"}, func(*streamBatch) {})
			close(done)
		}()
		Consistently(done, "20ms").ShouldNot(BeClosed())
		cancel()
		Eventually(done).Should(BeClosed())
		Expect(q.take()).To(HaveLen(maxQueuedEvents))
	})
})
