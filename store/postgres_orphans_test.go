package store_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/store"
)

var _ = Describe("PGStore.OrphanedTurns", func() {
	It("lists the sessions with a running turn whose lease is free (released, or its holder dead; not a lease that merely expired), oldest turn first, and no others", func() {
		db := newPGSchema()
		long := []store.Option{store.WithLeaseTTL(time.Hour), store.WithLeaseRenew(30 * time.Minute)}
		a := openPG(db.url, long...)
		b := openPG(db.url, long...)
		c := openPG(db.url, long...)
		orphans := func() []string {
			ids, err := b.OrphanedTurns(context.Background(), 10)
			Expect(err).NotTo(HaveOccurred())
			return ids
		}
		record := func(st *store.PGStore, id string, at time.Time) store.Session {
			s, err := st.Create(store.Meta{ID: id, Cwd: "/p"})
			Expect(err).NotTo(HaveOccurred())
			Expect(s.(store.TurnRecorder).RecordTurn(&store.RunningTurn{StartedAt: at, PromptRequest: []byte(`7`)})).To(Succeed())
			return s
		}
		now := time.Now()
		record(a, "a-late", now)
		record(a, "a-early", now.Add(-time.Minute))
		idle, err := a.Create(store.Meta{ID: "a-idle", Cwd: "/p"})
		Expect(err).NotTo(HaveOccurred())
		record(b, "b-live", now)
		record(c, "c-lapsed", now.Add(-30*time.Second))
		Expect(orphans()).To(BeEmpty(), "every lease is live")

		Expect(b.MarkDead(context.Background(), a.Incarnation())).To(Succeed())
		// c's lease of c-lapsed expires (as for a pod cut off from the
		// database, whose renewals stopped).
		db.exec(`UPDATE iac_sessions SET lease_expires = now() - interval '1 second' WHERE id = 'c-lapsed'`)
		Expect(orphans()).To(Equal([]string{"a-early", "a-late"}),
			"a is dead; c-lapsed's holder is live (late renewing: a load takes it), a-idle runs no turn, b-live's holder is live")

		// The lease acquisition decides who adopts: after b opened one,
		// it is no longer an orphan, and another opener is refused.
		s, _, err := b.Open("a-early")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(s.Close)
		_, _, err = c.Open("a-early")
		Expect(err).To(MatchError(store.ErrInUse))
		Expect(orphans()).NotTo(ContainElement("a-early"))
		Expect(orphans()).To(Equal([]string{"a-late"}))
		Expect(orphans()).NotTo(ContainElement("a-idle"))

		ids, err := b.OrphanedTurns(context.Background(), 1)
		Expect(err).NotTo(HaveOccurred())
		Expect(ids).To(HaveLen(1), "at most limit")
		_ = idle
	})
})
