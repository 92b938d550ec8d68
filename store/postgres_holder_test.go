package store_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/store"
)

var _ = Describe("PGStore.Holder", func() {
	It("names the live holder, and says free for a released, expired or dead one, with the running turn it recorded", func() {
		db := newPGSchema()
		a, b := openPG(db.url), openPG(db.url)
		ctx := context.Background()
		holder := func() store.Holder {
			h, err := b.Holder(ctx, "s1")
			Expect(err).NotTo(HaveOccurred())
			return h
		}

		s, err := a.Create(store.Meta{ID: "s1", Cwd: "/p"})
		Expect(err).NotTo(HaveOccurred())
		Expect(holder()).To(Equal(store.Holder{Owner: a.Incarnation()}))
		Expect(s.(store.TurnRecorder).RecordTurn(&store.RunningTurn{StartedAt: time.Now(), PromptRequest: []byte("7")})).To(Succeed())
		Expect(holder()).To(Equal(store.Holder{Owner: a.Incarnation(), Turn: true}))

		Expect(s.Release()).To(Succeed())
		Expect(holder()).To(Equal(store.Holder{}), "released: free, the turn cleared")

		_, _, err = s.Acquire()
		Expect(err).NotTo(HaveOccurred())
		Expect(s.(store.TurnRecorder).RecordTurn(&store.RunningTurn{StartedAt: time.Now(), PromptRequest: []byte("8")})).To(Succeed())
		db.exec("UPDATE iac_sessions SET lease_expires = now() - interval '1 second' WHERE id = $1", "s1")
		Expect(holder()).To(Equal(store.Holder{Turn: true}), "expired: free, the dead holder's turn kept")

		Expect(s.Release()).To(Succeed())
		_, _, err = s.Acquire()
		Expect(err).NotTo(HaveOccurred())
		Expect(holder().Owner).To(Equal(a.Incarnation()))
		Expect(b.MarkDead(ctx, a.Incarnation())).To(Succeed())
		Expect(holder().Owner).To(BeEmpty(), "its holder declared dead")

		_, err = b.Holder(ctx, "nope")
		Expect(err).To(MatchError(store.ErrNotFound))
		_, err = b.Holder(ctx, "../x")
		Expect(err).To(MatchError(store.ErrNotFound))
	})
})
