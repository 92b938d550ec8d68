package cluster

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("the recovery scan", func() {
	DescribeTable("runs again at once only after a whole batch of which it adopted some (the rest would wait seconds, past the follow timeout of their clients)",
		func(listed, adopted int, again bool) {
			Expect(scanAgain(listed, adopted)).To(Equal(again))
		},
		Entry("a whole batch, some adopted", recoveryBatch, 10, true),
		Entry("a whole batch, all adopted", recoveryBatch, recoveryBatch, true),
		Entry("a whole batch, none adopted here: the next scan, as usual", recoveryBatch, 0, false),
		Entry("less than a batch: nothing left", recoveryBatch-1, recoveryBatch-1, false),
		Entry("nothing listed", 0, 0, false),
	)
})
