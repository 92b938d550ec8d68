package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
)

// describeSingleWriter is the cross-process contract of a Store: one writer
// per session at a time, whatever holds the other handle. twoStores returns
// two independent Store values on one backing state, standing for two
// server processes sharing IAC_CODE_HOME (file store) or one database
// (a shared store with leases).
func describeSingleWriter(name string, twoStores func() (a, b store.Store)) bool {
	return Describe(name+": one writer per session across processes", func() {
		var a, b store.Store
		BeforeEach(func() { a, b = twoStores() })

		newSession := func(st store.Store, id string) store.Session {
			s, err := st.Create(store.Meta{ID: id, Cwd: "/p"})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(s.Close)
			return s
		}
		open := func(st store.Store, id string) (store.Session, []store.Entry) {
			s, es, err := st.Open(id)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(s.Close)
			return s, es
		}

		It("refuses Open and Delete elsewhere while a handle holds the session, naming the situation", func() {
			s := newSession(a, "s1")
			_, _, err := b.Open("s1")
			Expect(err).To(MatchError(store.ErrInUse))
			var locked *store.InUseError
			Expect(errors.As(err, &locked)).To(BeTrue())
			Expect(locked.ID).To(Equal("s1"))
			Expect(err.Error()).To(ContainSubstring("another iac-code process"))
			Expect(b.Delete("s1")).To(MatchError(store.ErrInUse))
			// forking a held session is reading, which is allowed
			f, _, err := b.Fork("s1", "f1")
			Expect(err).NotTo(HaveOccurred())
			Expect(f.Close()).To(Succeed())
			Expect(s.Close()).To(Succeed())
			_, _ = open(b, "s1")
		})

		It("hands the session over on Release; the first holder reloads what the other wrote and goes on after it", func() {
			s := newSession(a, "s1")
			Expect(s.Append(entries(userMsg("a1"), assistantText("a2"))...)).To(Succeed())
			Expect(s.Release()).To(Succeed())
			Expect(s.Append(entries(userMsg("too early"))...)).To(MatchError(store.ErrReleased))
			Expect(s.SaveMeta(s.Meta())).To(MatchError(store.ErrReleased))

			o, es := open(b, "s1")
			Expect(messages(es)).To(Equal([]llm.Message{userMsg("a1"), assistantText("a2")}))
			Expect(o.Append(entries(userMsg("b1"), assistantText("b2"))...)).To(Succeed())
			m := o.Meta()
			m.Title = "from b"
			Expect(o.SaveMeta(m)).To(Succeed())

			_, _, err := s.Acquire()
			Expect(err).To(MatchError(store.ErrInUse), "b still holds it")
			Expect(o.Release()).To(Succeed())

			es, changed, err := s.Acquire()
			Expect(err).NotTo(HaveOccurred())
			Expect(changed).To(BeTrue())
			Expect(messages(es)).To(Equal([]llm.Message{userMsg("a1"), assistantText("a2"), userMsg("b1"), assistantText("b2")}))
			Expect(s.LastSeq()).To(Equal(int64(4)))
			Expect(s.Meta().Title).To(Equal("from b"))
			more := entries(userMsg("a3"))
			Expect(s.Append(more...)).To(Succeed())
			Expect(more[0].Seq).To(Equal(int64(5)))
			Expect(s.Close()).To(Succeed())

			_, all := open(a, "s1")
			Expect(seqs(all)).To(Equal([]int64{1, 2, 3, 4, 5}))

			_, _, err = o.Acquire()
			Expect(err).To(MatchError(store.ErrInUse), "the reader of the last step holds it")
		})

		It("reports no change when nobody wrote while released", func() {
			s := newSession(a, "s1")
			Expect(s.Append(entries(userMsg("x"))...)).To(Succeed())
			Expect(s.Release()).To(Succeed())
			Expect(s.Release()).To(Succeed(), "idempotent")
			es, changed, err := s.Acquire()
			Expect(err).NotTo(HaveOccurred())
			Expect(changed).To(BeFalse())
			Expect(es).To(BeNil())
			es, changed, err = s.Acquire()
			Expect(err).NotTo(HaveOccurred(), "idempotent")
			Expect(changed).To(BeFalse())
			Expect(s.Append(entries(assistantText("y"))...)).To(Succeed())
			Expect(s.LastSeq()).To(Equal(int64(2)))
		})

		It("lets go on Close and on Release, and a released handle closes cleanly", func() {
			s := newSession(a, "s1")
			Expect(s.Release()).To(Succeed())
			Expect(s.Close()).To(Succeed())
			o, _ := open(b, "s1")
			Expect(o.Close()).To(Succeed())
			Expect(b.Delete("s1")).To(Succeed())
			_, _, err := a.Open("s1")
			Expect(err).To(MatchError(store.ErrNotFound))
		})

		It("never interleaves: two writers taking turns leave one strictly increasing history", func() {
			s := newSession(a, "s1")
			Expect(s.Release()).To(Succeed())
			o, _ := open(b, "s1")
			Expect(o.Release()).To(Succeed())
			const rounds = 40
			var wg sync.WaitGroup
			written := make([][]int64, 2)
			for i, h := range []store.Session{s, o} {
				wg.Add(1)
				go func() {
					defer GinkgoRecover()
					defer wg.Done()
					for n := 0; n < rounds; {
						if _, _, err := h.Acquire(); err != nil {
							Expect(err).To(MatchError(store.ErrInUse))
							runtime.Gosched()
							continue
						}
						e := entries(userMsg("w"))
						Expect(h.Append(e...)).To(Succeed())
						written[i] = append(written[i], e[0].Seq)
						Expect(h.Release()).To(Succeed())
						n++
					}
				}()
			}
			wg.Wait()
			Expect(s.Close()).To(Succeed())
			Expect(o.Close()).To(Succeed())
			_, all := open(a, "s1")
			Expect(all).To(HaveLen(2 * rounds))
			for i := range all {
				Expect(all[i].Seq).To(Equal(int64(i + 1)))
			}
			Expect(append(written[0], written[1]...)).To(ConsistOf(seqs(all)))
		})
	})
}

var _ = describeSingleWriter("FileStore", func() (store.Store, store.Store) {
	root := GinkgoT().TempDir()
	a, err := store.New(root)
	Expect(err).NotTo(HaveOccurred())
	b, err := store.New(root)
	Expect(err).NotTo(HaveOccurred())
	return a, b
})

var _ = Describe("FileStore descriptors", func() {
	openFDs := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			Skip("no /proc/self/fd")
		}
		return len(ents)
	}

	It("holds none for a released session and two for an acquired one", func() {
		st, err := store.New(GinkgoT().TempDir(), store.WithLogger(zerolog.Nop()))
		Expect(err).NotTo(HaveOccurred())
		before := openFDs()
		var hs []store.Session
		for i := 0; i < 50; i++ {
			s, err := st.Create(store.Meta{ID: filepath.Base(GinkgoT().TempDir()) + "-x", Cwd: "/p"})
			Expect(err).NotTo(HaveOccurred())
			Expect(s.Append(entries(userMsg("hi"))...)).To(Succeed())
			hs = append(hs, s)
		}
		Expect(openFDs()-before).To(Equal(100), "history and lock of each")
		for _, s := range hs {
			Expect(s.Release()).To(Succeed())
		}
		Expect(openFDs()).To(Equal(before))
		for _, s := range hs {
			_, changed, err := s.Acquire()
			Expect(err).NotTo(HaveOccurred())
			Expect(changed).To(BeFalse())
			Expect(s.Close()).To(Succeed())
		}
		Expect(openFDs()).To(Equal(before))
	})
})

var _ = describeSingleWriter("PGStore", func() (store.Store, store.Store) {
	db := newPGSchema()
	lease := []store.Option{store.WithLeaseTTL(time.Hour), store.WithLeaseRenew(30 * time.Minute)}
	return openPG(db.url, lease...), openPG(db.url, lease...)
})
