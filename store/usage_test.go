package store_test

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
)

// The one contract of store.UsageCounter, against both stores: every open
// of a backend stands for another process on the same data.
var _ = describeUsageContract("FileStore", fileBackend)
var _ = describeUsageContract("PGStore", pgBackend)

func describeUsageContract(name string, fresh func() backend) bool {
	return Describe(name+" usage counter contract", func() {
		var (
			b   backend
			a   store.UsageCounter
			ctx = context.Background()
		)
		BeforeEach(func() {
			b = fresh()
			a = b.open().(store.UsageCounter)
		})
		at := func(s string) time.Time {
			t, err := time.Parse(time.RFC3339, s)
			Expect(err).NotTo(HaveOccurred())
			return t
		}
		call := func(in, out int64) llm.Usage {
			return llm.Usage{InputTokens: in, OutputTokens: out, ThoughtTokens: out / 2, CachedReadTokens: in / 2, CachedWriteTokens: 1}
		}
		used := func(c store.UsageCounter, who, when string) [2]int64 {
			GinkgoHelper()
			d, m, err := c.TokensUsed(ctx, who, at(when))
			Expect(err).NotTo(HaveOccurred())
			return [2]int64{d, m}
		}

		It("counts a principal's tokens per UTC day and month, apart from everyone else's", func() {
			Expect(a.AddUsage(ctx, "alice", "m1", at("2026-03-31T23:59:59Z"), call(100, 10))).To(Succeed()) // March
			Expect(a.AddUsage(ctx, "alice", "m1", at("2026-04-01T00:00:00Z"), call(20, 2))).To(Succeed())
			// 23:30 in New York on the 1st is 03:30 UTC on the 2nd.
			Expect(a.AddUsage(ctx, "alice", "m2", at("2026-04-01T23:30:00-04:00"), call(30, 3))).To(Succeed())
			Expect(a.AddUsage(ctx, "bob", "m1", at("2026-04-02T10:00:00Z"), call(1000, 1))).To(Succeed())

			Expect(used(a, "alice", "2026-03-31T12:00:00Z")).To(Equal([2]int64{110, 110}))
			Expect(used(a, "alice", "2026-04-01T12:00:00Z")).To(Equal([2]int64{22, 22}))
			Expect(used(a, "alice", "2026-04-02T00:00:00Z")).To(Equal([2]int64{33, 55}))
			Expect(used(a, "alice", "2026-04-30T23:59:59Z")).To(Equal([2]int64{0, 55}))
			Expect(used(a, "alice", "2026-05-01T00:00:00Z")).To(Equal([2]int64{0, 0}))
			Expect(used(a, "bob", "2026-04-02T10:00:00Z")).To(Equal([2]int64{1001, 1001}))
			Expect(used(a, "carol", "2026-04-02T10:00:00Z")).To(Equal([2]int64{0, 0}))
		})

		It("shares the count between processes, also while they add at once", func() {
			other := b.open().(store.UsageCounter)
			now := at("2026-06-15T08:00:00Z")
			var wg sync.WaitGroup
			for i := range 40 {
				wg.Add(1)
				go func(c store.UsageCounter) {
					defer GinkgoRecover()
					defer wg.Done()
					Expect(c.AddUsage(ctx, "alice", "m", now, call(10, 5))).To(Succeed())
				}(map[bool]store.UsageCounter{true: a, false: other}[i%2 == 0])
			}
			wg.Wait()
			Expect(used(a, "alice", "2026-06-15T20:00:00Z")).To(Equal([2]int64{600, 600}))
			Expect(used(other, "alice", "2026-06-15T20:00:00Z")).To(Equal([2]int64{600, 600}))
			// Later additions are seen by a process that read before.
			Expect(other.AddUsage(ctx, "alice", "m", now, call(1, 1))).To(Succeed())
			Expect(used(a, "alice", "2026-06-15T20:00:00Z")).To(Equal([2]int64{602, 602}))
		})

		It("counts into each call's day when two processes alternate across days, also after a close", func() {
			other := b.open().(store.UsageCounter)
			days := []string{"2026-07-01T23:59:59Z", "2026-07-02T00:00:00Z", "2026-07-01T12:00:00Z", "2026-07-03T08:00:00Z"}
			for i, d := range days {
				Expect(a.AddUsage(ctx, "alice", "m", at(d), call(int64(i+1), 0))).To(Succeed())
				Expect(other.AddUsage(ctx, "alice", "m", at(d), call(int64(10*(i+1)), 0))).To(Succeed())
			}
			late := int64(0)
			if fs, ok := a.(*store.FileStore); ok { // a closed file store still counts (its day file opened again)
				Expect(fs.Close()).To(Succeed())
				Expect(a.AddUsage(ctx, "alice", "m", at("2026-07-03T09:00:00Z"), call(100, 0))).To(Succeed())
				late = 100
			}
			Expect(used(other, "alice", "2026-07-01T00:00:00Z")).To(Equal([2]int64{11 + 33, 11 + 33}))
			Expect(used(other, "alice", "2026-07-02T00:00:00Z")).To(Equal([2]int64{22, 66}))
			d, m, err := other.TokensUsed(ctx, "alice", at("2026-07-03T23:00:00Z"))
			Expect(err).NotTo(HaveOccurred())
			Expect(m - d).To(BeEquivalentTo(66))
			Expect(d).To(Equal(44 + late))
		})

		It("sums usage per principal and model from a day on, sorted", func() {
			Expect(a.AddUsage(ctx, "bob", "m1", at("2026-04-01T10:00:00Z"), call(10, 1))).To(Succeed())
			Expect(a.AddUsage(ctx, "alice", "m2", at("2026-04-02T10:00:00Z"), call(20, 2))).To(Succeed())
			Expect(a.AddUsage(ctx, "alice", "m1", at("2026-04-03T10:00:00Z"), call(30, 3))).To(Succeed())
			Expect(a.AddUsage(ctx, "alice", "m1", at("2026-04-04T10:00:00Z"), call(40, 4))).To(Succeed())

			all, err := a.UsageSince(ctx, at("2026-01-01T00:00:00Z"))
			Expect(err).NotTo(HaveOccurred())
			Expect(all).To(Equal([]store.UsageTotal{
				{Principal: "alice", Model: "m1", Calls: 2, Usage: store.Usage{InputTokens: 70, OutputTokens: 7, ThoughtTokens: 3, CachedReadTokens: 35, CachedWriteTokens: 2}},
				{Principal: "alice", Model: "m2", Calls: 1, Usage: store.Usage{InputTokens: 20, OutputTokens: 2, ThoughtTokens: 1, CachedReadTokens: 10, CachedWriteTokens: 1}},
				{Principal: "bob", Model: "m1", Calls: 1, Usage: store.Usage{InputTokens: 10, OutputTokens: 1, CachedReadTokens: 5, CachedWriteTokens: 1}},
			}))
			// From a time within a day: that whole UTC day on.
			recent, err := a.UsageSince(ctx, at("2026-04-03T23:00:00Z"))
			Expect(err).NotTo(HaveOccurred())
			Expect(recent).To(HaveLen(1))
			Expect(recent[0].Calls).To(BeEquivalentTo(2))
			Expect(recent[0].Tokens()).To(BeEquivalentTo(77))
			none, err := a.UsageSince(ctx, at("2026-05-01T00:00:00Z"))
			Expect(err).NotTo(HaveOccurred())
			Expect(none).To(BeEmpty())
		})
	})
}

var _ = Describe("token budgets", func() {
	t := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		Expect(err).NotTo(HaveOccurred())
		return v
	}
	It("resets daily budgets at the next 00:00 UTC and monthly ones on the first of the next month", func() {
		Expect(store.NextDay(t("2026-12-06T07:30:00Z"))).To(Equal(t("2026-12-07T00:00:00Z")))
		Expect(store.NextDay(t("2026-12-06T00:00:00Z"))).To(Equal(t("2026-12-07T00:00:00Z")))
		Expect(store.NextDay(t("2026-12-31T23:59:59Z"))).To(Equal(t("2027-01-01T00:00:00Z")))
		Expect(store.NextDay(t("2028-02-28T12:00:00Z"))).To(Equal(t("2028-02-29T00:00:00Z")))
		// A local time past midnight UTC is already the next UTC day.
		Expect(store.NextDay(t("2026-12-06T22:00:00-05:00"))).To(Equal(t("2026-12-08T00:00:00Z")))
		Expect(store.NextMonth(t("2026-12-06T07:30:00Z"))).To(Equal(t("2027-01-01T00:00:00Z")))
		Expect(store.NextMonth(t("2026-01-31T23:00:00Z"))).To(Equal(t("2026-02-01T00:00:00Z")))
		Expect(store.NextMonth(t("2026-02-01T00:00:00Z"))).To(Equal(t("2026-03-01T00:00:00Z")))
		Expect(store.NextMonth(t("2026-03-31T21:00:00-05:00"))).To(Equal(t("2026-05-01T00:00:00Z")))
	})

	It("is over when a capped period is used up, naming it and when it resets", func() {
		now := t("2026-12-06T07:30:00Z")
		day := store.Budget{PerDay: 1000}
		Expect(day.Check(999, 50000, now).Over).To(BeFalse())
		Expect(day.Check(1000, 1000, now)).To(Equal(store.BudgetState{Over: true, Period: store.PeriodDay,
			Limit: 1000, Used: 1000, ResetAt: t("2026-12-07T00:00:00Z")}))
		month := store.Budget{PerMonth: 5000}
		Expect(month.Check(4999, 4999, now).Over).To(BeFalse())
		Expect(month.Check(10, 5200, now)).To(Equal(store.BudgetState{Over: true, Period: store.PeriodMonth,
			Limit: 5000, Used: 5200, ResetAt: t("2027-01-01T00:00:00Z")}))
		// Both used up: the month decides when the model is usable again.
		both := store.Budget{PerDay: 1000, PerMonth: 5000}
		Expect(both.Check(1200, 5000, now).Period).To(Equal(store.PeriodMonth))
		Expect(both.Check(1200, 4000, now).ResetAt).To(Equal(t("2026-12-07T00:00:00Z")))
		Expect(store.Budget{}.Check(1<<40, 1<<40, now).Over).To(BeFalse())
		Expect(store.Budget{}.Limited()).To(BeFalse())
		Expect(store.Budget{PerMonth: 1}.Limited()).To(BeTrue())
	})
})
