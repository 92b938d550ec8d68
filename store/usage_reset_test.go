package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
)

// An operator may remove a day's usage file (to reset that day's counts)
// or move it away while servers run on the home: what the path names is
// the count, for the process that keeps the file open to append and for
// the one that has read it before.
var _ = Describe("FileStore usage day file removed or moved away", func() {
	var (
		root     string
		a, other *store.FileStore
		ctx      = context.Background()
		now      = time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
		later    = now.Add(time.Hour)
		day      func() string
		used     func(c *store.FileStore) int64
		count    func(c *store.FileStore, in int64)
	)
	BeforeEach(func() {
		root = GinkgoT().TempDir()
		var err error
		a, err = store.New(root)
		Expect(err).NotTo(HaveOccurred())
		other, err = store.New(root)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = a.Close(); _ = other.Close() })
		day = func() string { return filepath.Join(root, "usage", "2026-12-07.jsonl") }
		used = func(c *store.FileStore) int64 {
			GinkgoHelper()
			d, _, err := c.TokensUsed(ctx, "alice", later)
			Expect(err).NotTo(HaveOccurred())
			return d
		}
		count = func(c *store.FileStore, in int64) {
			GinkgoHelper()
			Expect(c.AddUsage(ctx, "alice", "m", now, llm.Usage{InputTokens: in})).To(Succeed())
		}
	})

	It("counts from nothing again after the file is removed, in the writer and in a reader", func() {
		count(a, 100)
		Expect(used(a)).To(BeEquivalentTo(100))
		Expect(used(other)).To(BeEquivalentTo(100))

		Expect(os.Remove(day())).To(Succeed())
		Expect(used(a)).To(BeZero())
		Expect(used(other)).To(BeZero())

		count(a, 10) // the writer kept the removed file open
		Expect(day()).To(BeAnExistingFile())
		Expect(used(a)).To(BeEquivalentTo(10))
		Expect(used(other)).To(BeEquivalentTo(10))
		count(other, 1)
		Expect(used(a)).To(BeEquivalentTo(11))
	})

	It("counts the new file from its start when the day's file was moved away", func() {
		count(a, 100)
		count(a, 100)
		Expect(used(other)).To(BeEquivalentTo(200))
		Expect(os.Rename(day(), day()+".old")).To(Succeed())

		count(other, 5) // a new file, shorter than what other had read of the old one
		Expect(used(other)).To(BeEquivalentTo(5))
		Expect(used(a)).To(BeEquivalentTo(5))
		count(a, 7) // a kept the moved file open
		Expect(used(other)).To(BeEquivalentTo(12))
		old, err := os.ReadFile(day() + ".old")
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.Count(string(old), "\n")).To(Equal(2))
	})
})
