package store_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// backend is one fresh, empty store backend for a contract spec.
type backend struct {
	// open opens a store on the backend's data; every call stands for
	// another process using the same data. The stores are closed after
	// the spec.
	open func(opts ...store.Option) store.Store
	// holder is how an *InUseError names st as the holder of a session.
	holder func(st store.Store) store.InUseError
	// expire ends the lease of session id as if its holder had stopped
	// renewing it; nil when the backend has no leases to lose.
	expire func(id string)
	// crash makes holder, which holds s, look dead to every other process
	// (killed with -9): the shared store declares it dead; the file store
	// leaves s's lock file as it is with no lock on it.
	crash func(holder store.Store, s store.Session)
}

// The one contract of store.Store, run against every implementation so that
// they cannot drift.
var _ = describeStoreContract("FileStore", fileBackend)
var _ = describeStoreContract("PGStore", pgBackend)

func fileBackend() backend {
	root := GinkgoT().TempDir()
	return backend{
		open: func(opts ...store.Option) store.Store {
			st, err := store.New(root, opts...)
			Expect(err).NotTo(HaveOccurred())
			return st
		},
		// The pid written in the lock file: this test process.
		holder: func(store.Store) store.InUseError { return store.InUseError{PID: os.Getpid()} },
		crash: func(holder store.Store, s store.Session) {
			lock := filepath.Join(holder.(*store.FileStore).Dir(), s.ID(), "lock")
			left, err := os.ReadFile(lock)
			Expect(err).NotTo(HaveOccurred())
			Expect(s.Close()).To(Succeed())
			Expect(os.WriteFile(lock, left, 0o600)).To(Succeed())
		},
	}
}

func describeStoreContract(name string, fresh func() backend) bool {
	return Describe(name+" contract", func() {
		var (
			b    backend
			st   store.Store
			clk  *clock
			logs *logBuf
		)

		BeforeEach(func() {
			b = fresh()
			clk = &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), step: time.Second}
			logs = &logBuf{}
			st = b.open(store.WithClock(clk.Now), store.WithLogger(zerolog.New(logs)))
		})

		// another is a second process on the same data.
		another := func() store.Store { return b.open(store.WithClock(clk.Now)) }
		// heldBy expects err to be the in-use error of session id, naming
		// holder.
		heldBy := func(err error, id string, holder store.Store) {
			GinkgoHelper()
			Expect(err).To(MatchError(store.ErrInUse))
			var inUse *store.InUseError
			Expect(errors.As(err, &inUse)).To(BeTrue(), "an *InUseError")
			want := b.holder(holder)
			want.ID = id
			Expect(*inUse).To(Equal(want))
			Expect(err.Error()).To(ContainSubstring("another iac-code process"))
		}

		create := func(id, cwd string, msgs ...llm.Message) store.Session { return createIn(st, id, cwd, msgs...) }
		reopen := func(id string) (store.Session, []store.Entry) { return reopenIn(st, id) }

		ids := func(ms []store.Meta) []string {
			var out []string
			for _, m := range ms {
				out = append(out, m.ID)
			}
			return out
		}

		Describe("round trip", func() {
			It("keeps messages with thinking signatures, tool calls and results, and the meta", func() {
				assistant := llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{
					{Type: llm.BlockThinking, Text: "let me look\nat \"it\" <ok>", Signature: "EqQBCkYIARgCKkA+sig=="},
					{Type: llm.BlockRedactedThinking, Data: "ZW5jcnlwdGVk"},
					{Type: llm.BlockText, Text: "Reading the file."},
					toolUse("call_1", "read"),
					{Type: llm.BlockToolUse, ToolCallID: "call_2", Name: "bash", Input: protocol.RawMessage(`{"cmd":"ls -la","n":[1,2.5,true,null]}`)},
				}}
				results := llm.Message{Role: llm.RoleTool, Content: []llm.Block{
					{Type: llm.BlockToolResult, ToolCallID: "call_1", Name: "read", Text: "package main\n"},
					{Type: llm.BlockToolResult, ToolCallID: "call_2", Name: "bash", Text: "boom", IsError: true},
				}}
				msgs := []llm.Message{userMsg("hello ünïcode ✓"), assistant, results, assistantText("done")}

				s, err := st.Create(store.Meta{ID: "s1", Cwd: "/work/p", Title: "hello", Mode: "default", Model: "m1"})
				Expect(err).NotTo(HaveOccurred())
				Expect(s.ID()).To(Equal("s1"))
				batch := entries(msgs[:2]...)
				Expect(s.Append(batch...)).To(Succeed())
				Expect(seqs(batch)).To(Equal([]int64{1, 2}), "assigned seqs are written back")
				Expect(batch[0].Time.IsZero()).To(BeFalse())
				Expect(s.Append(store.MessageEntry(msgs[2]))).To(Succeed())
				Expect(s.Append(store.MessageEntry(msgs[3]))).To(Succeed())
				Expect(s.LastSeq()).To(BeEquivalentTo(4))
				Expect(s.Sync()).To(Succeed())
				Expect(s.Sync()).To(Succeed(), "nothing to sync")

				m := s.Meta()
				m.Config = map[string]string{"mode": "plan"}
				m.Permissions = map[string]store.Decision{"bash": store.Deny, "read": store.Allow}
				m.Usage = m.Usage.Add(llm.Usage{InputTokens: 10, OutputTokens: 5, ThoughtTokens: 3, CachedReadTokens: 2})
				m.Usage = m.Usage.Add(llm.Usage{InputTokens: 1, CachedWriteTokens: 7})
				Expect(s.SaveMeta(m)).To(Succeed())
				saved := s.Meta()
				Expect(s.Close()).To(Succeed())
				Expect(s.Close()).To(Succeed(), "close is idempotent")
				Expect(s.Append(store.MessageEntry(userMsg("late")))).To(MatchError(store.ErrClosed))
				Expect(s.Sync()).To(MatchError(store.ErrClosed))
				Expect(s.SaveMeta(m)).To(MatchError(store.ErrClosed))
				Expect(s.Rewrite(nil)).To(MatchError(store.ErrClosed))

				s2, es := reopen("s1")
				Expect(messages(es)).To(Equal(msgs))
				Expect(seqs(es)).To(Equal([]int64{1, 2, 3, 4}))
				Expect(es[0].Time).To(Equal(batch[0].Time))
				got := s2.Meta()
				Expect(got).To(Equal(saved))
				Expect(got.Usage).To(Equal(store.Usage{InputTokens: 11, OutputTokens: 5, ThoughtTokens: 3, CachedReadTokens: 2, CachedWriteTokens: 7}))
				Expect(got.Permissions).To(HaveKeyWithValue("bash", store.Deny))
				Expect(got.Title).To(Equal("hello"))
				Expect(got.Version).To(Equal(store.FormatVersion))
				Expect(got.UpdatedAt).To(BeTemporally(">", got.CreatedAt))
				Expect(s2.LastSeq()).To(BeEquivalentTo(4))

				// Appends continue the numbering.
				Expect(s2.Append(store.MessageEntry(userMsg("again")))).To(Succeed())
				Expect(s2.LastSeq()).To(BeEquivalentTo(5))
				Expect(logs.warnings()).To(BeEmpty())
			})

			It("returns tool inputs as written: key order, duplicate keys, number forms and escapes", func() {
				// A normalising store (jsonb) would sort the keys, keep one "k",
				// print 1e3 as 1000 and decode the escape: the model would then
				// see a different prompt than the one it answered.
				in := protocol.RawMessage(`{"z": 1, "a": {"y": 2.50, "b": [1e3, -0.0]}, "k": "dup", "k": "\u00e9"}`)
				const written = `{"z":1,"a":{"y":2.50,"b":[1e3,-0.0]},"k":"dup","k":"\u00e9"}`
				msg := llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockToolUse, ToolCallID: "c1", Name: "bash", Input: in}}}
				Expect(create("s1", "/p", msg).Close()).To(Succeed())
				_, es := reopen("s1")
				Expect(string(es[0].Message.Content[0].Input)).To(Equal(written))
				f, fes, err := st.Fork("s1", "s2")
				Expect(err).NotTo(HaveOccurred())
				Expect(f.Close()).To(Succeed())
				Expect(string(fes[0].Message.Content[0].Input)).To(Equal(written))
			})

			It("rejects non-increasing explicit seqs without writing", func() {
				s := create("s1", "/p", userMsg("a"))
				e := store.MessageEntry(userMsg("b"))
				e.Seq = 1
				Expect(s.Append(e)).To(MatchError(store.ErrBadSeq))
				e.Seq = 10
				Expect(s.Append(e)).To(Succeed())
				Expect(s.Close()).To(Succeed())
				_, es := reopen("s1")
				Expect(seqs(es)).To(Equal([]int64{1, 10}))
			})

			It("guards against a second handle and existing ids", func() {
				s := create("s1", "/p")
				_, _, err := st.Open("s1")
				Expect(err).To(MatchError(store.ErrInUse))
				var inUse *store.InUseError
				Expect(errors.As(err, &inUse)).To(BeTrue())
				Expect(inUse.ID).To(Equal("s1"))
				Expect(st.Delete("s1")).To(MatchError(store.ErrInUse))
				_, err = st.Create(store.Meta{ID: "s1"})
				Expect(err).To(MatchError(store.ErrExists))
				Expect(s.Close()).To(Succeed())
				_, err = st.Create(store.Meta{ID: "s1"})
				Expect(err).To(MatchError(store.ErrExists))
				_, _, err = st.Open("nope")
				Expect(err).To(MatchError(store.ErrNotFound))
			})

			It("deletes", func() {
				Expect(create("s1", "/p", userMsg("a")).Close()).To(Succeed())
				Expect(create("s2", "/p", userMsg("b")).Close()).To(Succeed())
				Expect(st.Delete("s1")).To(Succeed())
				_, _, err := st.Open("s1")
				Expect(err).To(MatchError(store.ErrNotFound))
				Expect(st.Delete("s1")).To(MatchError(store.ErrNotFound))
				ms, _, err := st.List("", "", 10)
				Expect(err).NotTo(HaveOccurred())
				Expect(ids(ms)).To(Equal([]string{"s2"}))
				// The id is free again, with no history left behind.
				s := create("s1", "/p")
				Expect(s.Close()).To(Succeed())
				_, es := reopen("s1")
				Expect(es).To(BeEmpty())
			})
		})

		Describe("meta", func() {
			It("keeps the latest of many saves", func() {
				s := create("s1", "/p")
				for i := range 50 {
					m := s.Meta()
					m.Title = fmt.Sprintf("title %d", i)
					m.Usage.OutputTokens = int64(i)
					Expect(s.SaveMeta(m)).To(Succeed())
				}
				Expect(s.Close()).To(Succeed())
				s2, _ := reopen("s1")
				Expect(s2.Meta().Usage.OutputTokens).To(BeEquivalentTo(49))
				Expect(s2.Meta().Title).To(Equal("title 49"))
			})

			It("keeps id, createdAt and forkedFrom and stamps updatedAt", func() {
				s := create("s1", "/p")
				before := s.Meta()
				m := before
				m.ID, m.CreatedAt, m.ForkedFrom = "other", time.Time{}, "x"
				Expect(s.SaveMeta(m)).To(Succeed())
				after := s.Meta()
				Expect(after.ID).To(Equal("s1"))
				Expect(after.CreatedAt).To(Equal(before.CreatedAt))
				Expect(after.ForkedFrom).To(BeEmpty())
				Expect(after.UpdatedAt).To(BeTemporally(">", before.UpdatedAt))
				Expect(s.Close()).To(Succeed())
			})

			It("returns copies that do not alias the handle's maps", func() {
				s := create("s1", "/p")
				m := s.Meta()
				m.Permissions = map[string]store.Decision{"bash": store.Allow}
				Expect(s.SaveMeta(m)).To(Succeed())
				m.Permissions["bash"] = store.Deny
				Expect(s.Meta().Permissions).To(HaveKeyWithValue("bash", store.Allow))
				Expect(s.Close()).To(Succeed())
			})
		})

		Describe("Rewrite", func() {
			It("replaces the whole history; appends continue after it", func() {
				s := create("s1", "/p", userMsg("one"), assistantText("two"), userMsg("three"))
				es := entries(userMsg("uno"), assistantText("dos"))
				es[0].Seq, es[1].Seq = 1, 5
				Expect(s.Rewrite(es)).To(Succeed())
				Expect(s.LastSeq()).To(BeEquivalentTo(5))
				Expect(s.Append(store.MessageEntry(userMsg("tres")))).To(Succeed())
				Expect(s.LastSeq()).To(BeEquivalentTo(6))

				bad := entries(userMsg("x"), userMsg("y"))
				bad[0].Seq, bad[1].Seq = 2, 2
				Expect(s.Rewrite(bad)).To(MatchError(store.ErrBadSeq))
				Expect(s.Close()).To(Succeed())

				_, got := reopen("s1")
				Expect(messages(got)).To(Equal([]llm.Message{userMsg("uno"), assistantText("dos"), userMsg("tres")}))
				Expect(seqs(got)).To(Equal([]int64{1, 5, 6}))
			})

			It("persists a repair in the middle by rewriting", func() {
				// A lost result line leaves an open call before later messages.
				s := create("s1", "/p", userMsg("one"),
					llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{toolUse("a", "read")}},
					userMsg("two"), assistantText("answer"))
				Expect(s.Append(store.CompactionEntry("summary of one", 2))).To(Succeed())
				Expect(s.Append(store.MessageEntry(userMsg("three")))).To(Succeed())
				Expect(s.Append(store.MessageEntry(llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{toolUse("b", "bash")}}))).To(Succeed())
				Expect(s.Close()).To(Succeed())

				s, es, err := st.Open("s1")
				Expect(err).NotTo(HaveOccurred())
				repaired, added, err := store.RepairSession(s, es)
				Expect(err).NotTo(HaveOccurred())
				Expect(added).To(HaveLen(2))
				Expect(repaired[2].Message.Content[0].ToolCallID).To(Equal("a"))
				Expect(seqs(repaired)).To(Equal([]int64{1, 2, 3, 4, 5, 6, 7, 8, 9}))
				Expect(repaired[5].UpTo).To(BeEquivalentTo(3))
				Expect(s.Append(store.MessageEntry(assistantText("after repair")))).To(Succeed())
				Expect(s.LastSeq()).To(BeEquivalentTo(10))
				Expect(s.Close()).To(Succeed())

				_, es = reopen("s1")
				Expect(messages(es[:9])).To(Equal(messages(repaired)))
				Expect(seqs(es)).To(Equal([]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}))
				_, again := store.Repair(es)
				Expect(again).To(BeNil())
				Expect(logs.warnings()).To(BeEmpty())
			})
		})

		Describe("List", func() {
			It("returns nothing for an empty store", func() {
				metas, next, err := st.List("", "", 0)
				Expect(err).NotTo(HaveOccurred())
				Expect(metas).To(BeEmpty())
				Expect(next).To(BeEmpty())
			})

			It("filters by cwd and sorts newest first", func() {
				Expect(create("a", "/p1").Close()).To(Succeed())
				Expect(create("b", "/p2").Close()).To(Succeed())
				Expect(create("c", "/p1/").Close()).To(Succeed())
				s, _ := reopen("a")
				Expect(s.SaveMeta(s.Meta())).To(Succeed()) // a becomes the newest

				all, next, err := st.List("", "", 10)
				Expect(err).NotTo(HaveOccurred())
				Expect(ids(all)).To(Equal([]string{"a", "c", "b"}))
				Expect(next).To(BeEmpty())
				p1, _, err := st.List("/p1", "", 10)
				Expect(err).NotTo(HaveOccurred())
				Expect(ids(p1)).To(Equal([]string{"a", "c"}))
				p1, _, err = st.List("/p1/", "", 10)
				Expect(err).NotTo(HaveOccurred())
				Expect(ids(p1)).To(Equal([]string{"a", "c"}))
				none, next, err := st.List("/elsewhere", "", 10)
				Expect(err).NotTo(HaveOccurred())
				Expect(none).To(BeEmpty())
				Expect(next).To(BeEmpty())
			})

			It("lists one owner's sessions only; an owner is kept by SaveMeta and Fork, and none means default", func() {
				for id, owner := range map[string]string{"a1": "alice", "b1": "bob", "a2": "alice", "d1": ""} {
					s, err := st.Create(store.Meta{ID: id, Cwd: "/p", Owner: owner})
					Expect(err).NotTo(HaveOccurred())
					Expect(s.Close()).To(Succeed())
				}
				s, _ := reopen("a1")
				m := s.Meta()
				Expect(m.Owner).To(Equal("alice"))
				m.Owner = "bob" // an owner never changes
				Expect(s.SaveMeta(m)).To(Succeed())
				Expect(s.Meta().Owner).To(Equal("alice"))
				Expect(s.Close()).To(Succeed())
				f, _, err := st.Fork("a2", "a3")
				Expect(err).NotTo(HaveOccurred())
				Expect(f.Meta().Owner).To(Equal("alice"))
				Expect(f.Close()).To(Succeed())

				alice, _, err := st.ListOwned("alice", "", "", 10)
				Expect(err).NotTo(HaveOccurred())
				Expect(ids(alice)).To(ConsistOf("a1", "a2", "a3"))
				bob, _, err := st.ListOwned("bob", "/p", "", 10)
				Expect(err).NotTo(HaveOccurred())
				Expect(ids(bob)).To(Equal([]string{"b1"}))
				def, _, err := st.ListOwned(store.DefaultOwner, "", "", 10)
				Expect(err).NotTo(HaveOccurred())
				Expect(ids(def)).To(Equal([]string{"d1"}))
				Expect(def[0].OwnedBy()).To(Equal(store.DefaultOwner))
				page, next, err := st.ListOwned("alice", "", "", 2)
				Expect(err).NotTo(HaveOccurred())
				Expect(page).To(HaveLen(2))
				rest, _, err := st.ListOwned("alice", "", next, 2)
				Expect(err).NotTo(HaveOccurred())
				Expect(append(ids(page), ids(rest)...)).To(ConsistOf("a1", "a2", "a3"))
				all, _, err := st.List("", "", 10)
				Expect(err).NotTo(HaveOccurred())
				Expect(all).To(HaveLen(5))

				m, err = st.Stat("b1")
				Expect(err).NotTo(HaveOccurred())
				Expect(m.OwnedBy()).To(Equal("bob"))
				_, err = st.Stat("nope")
				Expect(err).To(MatchError(store.ErrNotFound))
				_, err = st.Stat("../x")
				Expect(err).To(MatchError(store.ErrNotFound))
			})

			It("pages 120 sessions by 50 with a stable cursor, no duplicates and no gaps", func() {
				clk.step = 0 // groups of sessions share an updatedAt: ties break by id
				for i := range 120 {
					if i%7 == 0 {
						clk.t = clk.t.Add(time.Millisecond)
					}
					cwd := "/p"
					if i%10 == 0 {
						cwd = "/other"
					}
					Expect(create(fmt.Sprintf("s%03d", i), cwd).Close()).To(Succeed())
				}
				full, _, err := st.List("/p", "", 1000)
				Expect(err).NotTo(HaveOccurred())
				Expect(full).To(HaveLen(108))
				var want []string
				for i, m := range full {
					want = append(want, m.ID)
					if i > 0 {
						prev := full[i-1]
						Expect(prev.UpdatedAt.After(m.UpdatedAt) ||
							(prev.UpdatedAt.Equal(m.UpdatedAt) && prev.ID < m.ID)).To(BeTrue())
					}
				}

				page := func(cwd, cursor string) ([]string, string) {
					ms, next, err := st.List(cwd, cursor, 50)
					Expect(err).NotTo(HaveOccurred())
					again, next2, err := st.List(cwd, cursor, 50)
					Expect(err).NotTo(HaveOccurred())
					Expect(again).To(Equal(ms), "same cursor, same page")
					Expect(next2).To(Equal(next))
					return ids(ms), next
				}
				var got []string
				var sizes []int
				cursor := ""
				for {
					page, next := page("", cursor)
					got = append(got, page...)
					sizes = append(sizes, len(page))
					if next == "" {
						break
					}
					cursor = next
				}
				Expect(sizes).To(Equal([]int{50, 50, 20}))
				seen := map[string]bool{}
				for _, id := range got {
					Expect(seen[id]).To(BeFalse(), "duplicate "+id)
					seen[id] = true
				}
				Expect(seen).To(HaveLen(120))

				got, cursor = nil, ""
				for {
					page, next := page("/p", cursor)
					got = append(got, page...)
					if next == "" {
						break
					}
					cursor = next
				}
				Expect(got).To(Equal(want))

				// New sessions created while paging appear on top, not mid-way.
				first, next := page("/p", "")
				clk.t = clk.t.Add(time.Hour)
				Expect(create("zzz", "/p").Close()).To(Succeed())
				second, _ := page("/p", next)
				Expect(append(first, second...)).To(Equal(want[:100]))
			})

			It("sees changes made by this and by other processes", func() {
				a := create("a", "/p")
				Expect(create("b", "/p").Close()).To(Succeed())
				ms, _, err := st.List("", "", 10)
				Expect(err).NotTo(HaveOccurred())
				Expect(ms[0].ID).To(Equal("b"))
				ms[0].Config = map[string]string{"x": "y"} // callers own what they get
				m := a.Meta()
				m.Title = "renamed"
				Expect(a.SaveMeta(m)).To(Succeed())
				ms, _, err = st.List("", "", 10)
				Expect(err).NotTo(HaveOccurred())
				Expect(ms[0].ID).To(Equal("a"))
				Expect(ms[0].Title).To(Equal("renamed"))
				Expect(ms[1].Config).To(BeNil())
				Expect(a.Close()).To(Succeed())

				other := another()
				b, _, err := other.Open("b")
				Expect(err).NotTo(HaveOccurred())
				mb := b.Meta()
				mb.Title = "from elsewhere"
				Expect(b.SaveMeta(mb)).To(Succeed())
				Expect(b.Close()).To(Succeed())
				ms, _, err = st.List("", "", 10)
				Expect(err).NotTo(HaveOccurred())
				Expect(ms[0].ID).To(Equal("b"))
				Expect(ms[0].Title).To(Equal("from elsewhere"))

				Expect(other.Delete("b")).To(Succeed())
				ms, _, err = st.List("", "", 10)
				Expect(err).NotTo(HaveOccurred())
				Expect(ids(ms)).To(Equal([]string{"a"}))
			})

			It("rejects a foreign cursor", func() {
				for _, c := range []string{"not-a-cursor!", "e30", "bm9wZQ"} { // garbage, {}, "nope"
					_, _, err := st.List("", c, 10)
					Expect(err).To(MatchError(store.ErrInvalidCursor), c)
				}
			})
		})

		Describe("Fork", func() {
			It("makes an independent copy", func() {
				src := create("src", "/p", userMsg("one"), assistantText("two"))
				m := src.Meta()
				m.Title, m.Mode = "original", "plan"
				m.Permissions = map[string]store.Decision{"bash": store.Allow}
				Expect(src.SaveMeta(m)).To(Succeed())
				Expect(src.Sync()).To(Succeed())

				fork, es, err := st.Fork("src", "dst") // the source may stay open
				Expect(err).NotTo(HaveOccurred())
				Expect(messages(es)).To(Equal([]llm.Message{userMsg("one"), assistantText("two")}))
				fm := fork.Meta()
				Expect(fm.ID).To(Equal("dst"))
				Expect(fm.ForkedFrom).To(Equal("src"))
				Expect(fm.Title).To(Equal("original"))
				Expect(fm.Mode).To(Equal("plan"))
				Expect(fm.Permissions).To(HaveKeyWithValue("bash", store.Allow))
				Expect(fm.CreatedAt).To(BeTemporally(">", src.Meta().UpdatedAt))
				Expect(fork.LastSeq()).To(BeEquivalentTo(2))

				Expect(fork.Append(store.MessageEntry(userMsg("fork only")))).To(Succeed())
				fm.Title = "fork"
				Expect(fork.SaveMeta(fm)).To(Succeed())
				Expect(fork.Close()).To(Succeed())
				Expect(src.Append(store.MessageEntry(userMsg("source only")))).To(Succeed())
				Expect(src.Close()).To(Succeed())

				s, es := reopen("src")
				Expect(messages(es)).To(Equal([]llm.Message{userMsg("one"), assistantText("two"), userMsg("source only")}))
				Expect(s.Meta().Title).To(Equal("original"))
				f, es := reopen("dst")
				Expect(messages(es)).To(Equal([]llm.Message{userMsg("one"), assistantText("two"), userMsg("fork only")}))
				Expect(seqs(es)).To(Equal([]int64{1, 2, 3}))
				Expect(f.Meta().Title).To(Equal("fork"))
				Expect(f.Meta().ForkedFrom).To(Equal("src"))
			})

			It("holds the new session like Create does", func() {
				Expect(create("src", "/p", userMsg("one")).Close()).To(Succeed())
				fork, _, err := st.Fork("src", "dst")
				Expect(err).NotTo(HaveOccurred())
				_, _, err = st.Open("dst")
				Expect(err).To(MatchError(store.ErrInUse))
				Expect(fork.Close()).To(Succeed())
				reopen("dst")
			})

			It("reports missing sources, taken targets and bad ids", func() {
				_, _, err := st.Fork("nope", "dst")
				Expect(err).To(MatchError(store.ErrNotFound))
				Expect(create("a", "/p").Close()).To(Succeed())
				Expect(create("b", "/p").Close()).To(Succeed())
				_, _, err = st.Fork("a", "b")
				Expect(err).To(MatchError(store.ErrExists))
				_, _, err = st.Fork("a", "../b")
				Expect(err).To(MatchError(store.ErrInvalidID))
				_, _, err = st.Fork("../a", "c")
				Expect(err).To(MatchError(store.ErrNotFound))
			})
		})

		Describe("ids", func() {
			DescribeTable("invalid ids are rejected",
				func(id string) {
					_, err := st.Create(store.Meta{ID: id, Cwd: "/p"})
					Expect(err).To(MatchError(store.ErrInvalidID))
					_, _, err = st.Open(id)
					Expect(err).To(MatchError(store.ErrNotFound))
					Expect(st.Delete(id)).To(MatchError(store.ErrNotFound))
					Expect(store.ValidID(id)).To(BeFalse())
				},
				Entry("empty", ""),
				Entry("dot dot", ".."),
				Entry("dot", "."),
				Entry("parent path", "../escape"),
				Entry("slash", "a/b"),
				Entry("backslash", `a\b`),
				Entry("hidden", ".hidden"),
				Entry("absolute", "/etc"),
				Entry("nul", "a\x00b"),
				Entry("space", "a b"),
				Entry("too long", strings.Repeat("a", 129)),
			)

			It("accepts uuids", func() {
				Expect(store.ValidID("3f2b8c1e-9d4a-4e7b-8c2f-1a2b3c4d5e6f")).To(BeTrue())
				Expect(create("3f2b8c1e-9d4a-4e7b-8c2f-1a2b3c4d5e6f", "/p").Close()).To(Succeed())
			})
		})

		// Two holders: st and another store on the same data, standing for
		// two server processes on one IAC_CODE_HOME or one database.
		Describe("two holders", func() {
			newSession := func(in store.Store, id string, msgs ...llm.Message) store.Session {
				s := createIn(in, id, "/p", msgs...)
				DeferCleanup(s.Close)
				return s
			}

			It("refuses a second holder's Open, Acquire and Delete while the first holds the session, naming the holder", func() {
				s := newSession(st, "s1", userMsg("one"))
				other := another()
				_, _, err := other.Open("s1")
				heldBy(err, "s1", st)
				heldBy(other.Delete("s1"), "s1", st)
				f, fes, err := other.Fork("s1", "copy") // reading is fine
				Expect(err).NotTo(HaveOccurred())
				Expect(messages(fes)).To(Equal([]llm.Message{userMsg("one")}))
				Expect(f.Close()).To(Succeed())

				Expect(s.Append(store.MessageEntry(assistantText("two")))).To(Succeed())
				Expect(s.Release()).To(Succeed())
				s2, es, err := other.Open("s1")
				Expect(err).NotTo(HaveOccurred())
				Expect(messages(es)).To(Equal([]llm.Message{userMsg("one"), assistantText("two")}))
				_, _, err = s.Acquire()
				heldBy(err, "s1", other)
				Expect(s.Close()).To(Succeed())
				_, _, err = st.Open("s1")
				heldBy(err, "s1", other)
				Expect(s2.Close()).To(Succeed())
			})

			It("lets go on Close and on Release: the next holder gets everything written, a released handle closes cleanly", func() {
				s := newSession(st, "s1", userMsg("one"), assistantText("two"))
				Expect(s.Sync()).To(Succeed())
				Expect(s.Close()).To(Succeed())
				other := another()
				s2, es, err := other.Open("s1")
				Expect(err).NotTo(HaveOccurred())
				Expect(messages(es)).To(Equal([]llm.Message{userMsg("one"), assistantText("two")}))
				Expect(s2.Append(store.MessageEntry(userMsg("three")))).To(Succeed())
				Expect(s2.Release()).To(Succeed())
				Expect(s2.Close()).To(Succeed())
				Expect(s2.Release()).To(MatchError(store.ErrClosed))
				_, _, err = s2.Acquire()
				Expect(err).To(MatchError(store.ErrClosed))

				s3, es := reopen("s1")
				Expect(seqs(es)).To(Equal([]int64{1, 2, 3}))
				Expect(s3.Close()).To(Succeed())
				Expect(other.Delete("s1")).To(Succeed())
				_, _, err = st.Open("s1")
				Expect(err).To(MatchError(store.ErrNotFound))
			})

			It("hands the session over on Release; the first holder reloads what the other wrote and goes on after it", func() {
				s := newSession(st, "s1", userMsg("a1"), assistantText("a2"))
				Expect(s.Release()).To(Succeed())
				Expect(s.Append(entries(userMsg("too early"))...)).To(MatchError(store.ErrReleased))
				Expect(s.SaveMeta(s.Meta())).To(MatchError(store.ErrReleased))
				Expect(s.Rewrite(nil)).To(MatchError(store.ErrReleased))
				Expect(s.LastSeq()).To(BeEquivalentTo(2), "a released handle still answers")

				other := another()
				o, es, err := other.Open("s1")
				Expect(err).NotTo(HaveOccurred())
				DeferCleanup(o.Close)
				Expect(messages(es)).To(Equal([]llm.Message{userMsg("a1"), assistantText("a2")}))
				Expect(o.Append(entries(userMsg("b1"), assistantText("b2"))...)).To(Succeed())
				m := o.Meta()
				m.Title = "from b"
				Expect(o.SaveMeta(m)).To(Succeed())

				_, _, err = s.Acquire()
				heldBy(err, "s1", other)
				Expect(o.Release()).To(Succeed())

				es, changed, err := s.Acquire()
				Expect(err).NotTo(HaveOccurred())
				Expect(changed).To(BeTrue())
				Expect(messages(es)).To(Equal([]llm.Message{userMsg("a1"), assistantText("a2"), userMsg("b1"), assistantText("b2")}))
				Expect(s.LastSeq()).To(BeEquivalentTo(4))
				Expect(s.Meta().Title).To(Equal("from b"))
				more := entries(userMsg("a3"))
				Expect(s.Append(more...)).To(Succeed())
				Expect(more[0].Seq).To(BeEquivalentTo(5))
				Expect(s.Close()).To(Succeed())

				_, all := reopen("s1")
				Expect(seqs(all)).To(Equal([]int64{1, 2, 3, 4, 5}))
				_, _, err = o.Acquire()
				heldBy(err, "s1", st)
			})

			It("reports no change when nobody wrote while released", func() {
				s := newSession(st, "s1", userMsg("x"))
				Expect(s.Release()).To(Succeed())
				Expect(s.Release()).To(Succeed(), "idempotent")
				es, changed, err := s.Acquire()
				Expect(err).NotTo(HaveOccurred())
				Expect(changed).To(BeFalse())
				Expect(es).To(BeNil())
				es, changed, err = s.Acquire()
				Expect(err).NotTo(HaveOccurred(), "idempotent")
				Expect(changed).To(BeFalse())
				Expect(es).To(BeNil())
				Expect(s.Append(entries(assistantText("y"))...)).To(Succeed())
				Expect(s.LastSeq()).To(BeEquivalentTo(2))
				Expect(s.Close()).To(Succeed())
				_, es = reopen("s1")
				Expect(messages(es)).To(Equal([]llm.Message{userMsg("x"), assistantText("y")}))
			})

			It("never interleaves: two writers taking turns leave one strictly increasing history", func() {
				s := newSession(st, "s1")
				Expect(s.Release()).To(Succeed())
				o, _, err := another().Open("s1")
				Expect(err).NotTo(HaveOccurred())
				DeferCleanup(o.Close)
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
				_, all := reopen("s1")
				Expect(all).To(HaveLen(2 * rounds))
				for i := range all {
					Expect(all[i].Seq).To(BeEquivalentTo(i + 1))
				}
				Expect(append(written[0], written[1]...)).To(ConsistOf(seqs(all)))
			})

			It("fences a handle whose lease was taken over: it never writes at that lease again; Release and Acquire reload", func() {
				if b.expire == nil {
					Skip("no lease to lose: the session stays held until Release, Close or the process exits")
				}
				s := newSession(st, "s1", userMsg("one"))
				b.expire("s1")
				other := another()
				s2, es, err := other.Open("s1")
				Expect(err).NotTo(HaveOccurred())
				Expect(messages(es)).To(Equal([]llm.Message{userMsg("one")}))

				late := s.Append(store.MessageEntry(assistantText("late")))
				Expect(late).To(MatchError(store.ErrFenced))
				heldBy(late, "s1", other) // the fence names the new holder
				Expect(s.SaveMeta(s.Meta())).To(MatchError(store.ErrFenced))
				mine := entries(userMsg("all mine"))
				mine[0].Seq = 1
				Expect(s.Rewrite(mine)).To(MatchError(store.ErrFenced))
				Expect(s.LastSeq()).To(BeEquivalentTo(1), "a refused append assigns nothing")

				// Released, the fenced handle cannot take the session while
				// the new holder has it, and did not release its lease.
				Expect(s.Release()).To(Succeed())
				_, _, err = s.Acquire()
				heldBy(err, "s1", other)
				Expect(s2.Append(store.MessageEntry(assistantText("two")))).To(Succeed())
				Expect(s2.Close()).To(Succeed())

				// Once it is free, Acquire reloads what the new holder wrote.
				es, changed, err := s.Acquire()
				Expect(err).NotTo(HaveOccurred())
				Expect(changed).To(BeTrue())
				Expect(messages(es)).To(Equal([]llm.Message{userMsg("one"), assistantText("two")}))
				Expect(s.Append(store.MessageEntry(userMsg("three")))).To(Succeed())
				Expect(s.Close()).To(Succeed())
				_, es = reopen("s1")
				Expect(seqs(es)).To(Equal([]int64{1, 2, 3}))
			})
		})

		Describe("running turn", func() {
			// listed is the running turn List and ListOwned of in report for
			// session id (they must agree).
			listed := func(in store.Store, id string) *store.RunningTurn {
				GinkgoHelper()
				var turns []*store.RunningTurn
				all, _, err := in.List("", "", 0)
				Expect(err).NotTo(HaveOccurred())
				owned, _, err := in.ListOwned(store.DefaultOwner, "/p", "", 0)
				Expect(err).NotTo(HaveOccurred())
				for _, ms := range [][]store.Meta{all, owned} {
					found := false
					for _, m := range ms {
						if m.ID == id {
							turns, found = append(turns, m.RunningTurn), true
						}
					}
					Expect(found).To(BeTrue(), "%s listed", id)
				}
				Expect(turns[0]).To(Equal(turns[1]), "List and ListOwned agree")
				return turns[0]
			}
			started := time.Date(2026, 12, 1, 23, 59, 58, 123456000, time.UTC)
			turn := func(prompt string) *store.RunningTurn {
				return &store.RunningTurn{StartedAt: started, PromptRequest: []byte(prompt)}
			}
			recorder := func(s store.Session) store.TurnRecorder {
				GinkgoHelper()
				r, ok := s.(store.TurnRecorder)
				Expect(ok).To(BeTrue(), "the session records its turn")
				return r
			}
			newSession := func(id string) store.Session {
				s := create(id, "/p", userMsg("one"))
				DeferCleanup(s.Close)
				return s
			}

			It("is listed by every process while the holder records it, the prompt request's bytes as given; cleared, it is gone", func() {
				s := newSession("s1")
				newSession("s2")
				other := another()
				Expect(listed(st, "s1")).To(BeNil())

				for _, prompt := range []string{`"p-\u00e9 7"`, `42`, `1.50`} {
					Expect(recorder(s).RecordTurn(turn(prompt))).To(Succeed())
					for _, in := range []store.Store{st, other} {
						got := listed(in, "s1")
						Expect(got).NotTo(BeNil())
						Expect(string(got.PromptRequest)).To(Equal(prompt), "byte for byte")
						Expect(got.StartedAt).To(BeTemporally("==", started))
						Expect(listed(in, "s2")).To(BeNil(), "only the session it runs in")
					}
				}

				By("not in the handle's meta, nor stored with a meta saved from a listed one")
				Expect(s.Meta().RunningTurn).To(BeNil())
				ms, _, err := other.List("", "", 0)
				Expect(err).NotTo(HaveOccurred())
				var fromList store.Meta
				for _, m := range ms {
					if m.ID == "s1" {
						fromList = m
					}
				}
				Expect(fromList.RunningTurn).NotTo(BeNil())
				Expect(s.SaveMeta(fromList)).To(Succeed())
				Expect(s.Meta().RunningTurn).To(BeNil())
				stat, err := other.Stat("s1")
				Expect(err).NotTo(HaveOccurred())
				Expect(stat.RunningTurn).To(BeNil())

				Expect(recorder(s).RecordTurn(nil)).To(Succeed())
				Expect(listed(st, "s1")).To(BeNil())
				Expect(listed(other, "s1")).To(BeNil())
			})

			It("goes with Release and Close; a released handle records nothing; acquired again, none runs", func() {
				s := newSession("s1")
				other := another()
				Expect(recorder(s).RecordTurn(turn("1"))).To(Succeed())
				Expect(s.Release()).To(Succeed())
				Expect(listed(other, "s1")).To(BeNil())
				Expect(recorder(s).RecordTurn(turn("2"))).To(MatchError(store.ErrReleased))
				_, _, err := s.Acquire()
				Expect(err).NotTo(HaveOccurred())
				Expect(listed(other, "s1")).To(BeNil())

				Expect(recorder(s).RecordTurn(turn("3"))).To(Succeed())
				Expect(listed(other, "s1")).NotTo(BeNil())
				Expect(s.Close()).To(Succeed())
				Expect(listed(other, "s1")).To(BeNil())
				Expect(recorder(s).RecordTurn(turn("4"))).To(MatchError(store.ErrClosed))
				s2, _ := reopenIn(other, "s1")
				Expect(listed(other, "s1")).To(BeNil(), "the next holder starts without a turn")
				Expect(recorder(s2).RecordTurn(turn("5"))).To(Succeed())
				Expect(string(listed(st, "s1").PromptRequest)).To(Equal("5"))
			})

			It("is not listed once its holder died mid-turn, nor as the next holder's", func() {
				s := newSession("s1")
				other := another()
				Expect(recorder(s).RecordTurn(turn(`"dying"`))).To(Succeed())
				Expect(listed(other, "s1")).NotTo(BeNil())
				b.crash(st, s)
				Expect(listed(other, "s1")).To(BeNil())
				Expect(listed(st, "s1")).To(BeNil())
				reopenIn(other, "s1")
				Expect(listed(other, "s1")).To(BeNil())
			})

			It("is not listed once the holder's lease expired; a fenced handle can neither set nor clear one", func() {
				if b.expire == nil {
					Skip("no lease to lose: the session stays held until Release, Close or the process exits")
				}
				s := newSession("s1")
				Expect(recorder(s).RecordTurn(turn("1"))).To(Succeed())
				b.expire("s1")
				other := another()
				Expect(listed(other, "s1")).To(BeNil())

				s2, _ := reopenIn(other, "s1")
				Expect(listed(other, "s1")).To(BeNil(), "the takeover starts without a turn")
				Expect(recorder(s).RecordTurn(turn("2"))).To(MatchError(store.ErrFenced))
				Expect(listed(other, "s1")).To(BeNil())
				Expect(recorder(s2).RecordTurn(turn("3"))).To(Succeed())
				Expect(recorder(s).RecordTurn(nil)).To(MatchError(store.ErrFenced))
				Expect(string(listed(st, "s1").PromptRequest)).To(Equal("3"))
			})

			// Durable turns: the turn a holder leaves is the next holder's to resume.
			keeper := func(s store.Session) store.TurnKeeper {
				GinkgoHelper()
				k, ok := s.(store.TurnKeeper)
				Expect(ok).To(BeTrue(), "the session keeps its turn for the next holder")
				return k
			}
			full := &store.RunningTurn{StartedAt: started, PromptRequest: []byte(`"p 1"`), Conn: "inc-1.c0ffee",
				FirstSeq: 7, ID: "turn-1", MCPServers: []string{"docs", "the \"other\" one"}}

			It("is left to the next holder by a holder that died mid-turn: all of it, not listed; cleared, the one after finds none", func() {
				s := newSession("s1")
				Expect(keeper(s).PriorTurn()).To(BeNil(), "a created session has none")
				Expect(recorder(s).RecordTurn(full)).To(Succeed())
				Expect(listed(st, "s1")).To(Equal(full), "listed with everything recorded")
				other := another()
				b.crash(st, s)
				s2, _ := reopenIn(other, "s1")
				got := keeper(s2).PriorTurn()
				Expect(got).NotTo(BeNil())
				Expect(got.StartedAt).To(BeTemporally("==", started))
				got.StartedAt = started
				Expect(got).To(Equal(full))
				Expect(listed(other, "s1")).To(BeNil(), "not the new holder's running turn")

				Expect(recorder(s2).RecordTurn(nil)).To(Succeed())
				Expect(s2.Close()).To(Succeed())
				s3, _ := reopenIn(another(), "s1")
				Expect(keeper(s3).PriorTurn()).To(BeNil())
			})

			It("is kept by Pause for the next holder (recorded again, listed again); Release and Close clear it", func() {
				s := newSession("s1")
				other := another()
				Expect(recorder(s).RecordTurn(full)).To(Succeed())
				Expect(keeper(s).Pause()).To(Succeed())
				Expect(listed(other, "s1")).To(BeNil(), "nobody runs it while paused")
				Expect(recorder(s).RecordTurn(full)).To(MatchError(store.ErrReleased))
				s2, _ := reopenIn(other, "s1")
				Expect(keeper(s2).PriorTurn()).NotTo(BeNil())
				Expect(keeper(s2).PriorTurn().ID).To(Equal("turn-1"))
				Expect(keeper(s2).PriorTurn().FirstSeq).To(BeEquivalentTo(7))
				Expect(keeper(s2).PriorTurn().MCPServers).To(Equal(full.MCPServers), "the servers' names are kept")
				resumed := *full
				resumed.Conn = ""
				Expect(recorder(s2).RecordTurn(&resumed)).To(Succeed())
				Expect(listed(st, "s1").ID).To(Equal("turn-1"))
				Expect(listed(st, "s1").Conn).To(BeEmpty())
				Expect(s2.Release()).To(Succeed())
				Expect(listed(st, "s1")).To(BeNil())

				_, _, err := s.Acquire()
				Expect(err).NotTo(HaveOccurred())
				Expect(keeper(s).PriorTurn()).To(BeNil(), "released, not paused: no turn left")
			})

			It("is left by a holder whose lease lapsed, and its late writes are refused", func() {
				if b.expire == nil {
					Skip("no lease to lose")
				}
				s := newSession("s1")
				Expect(recorder(s).RecordTurn(full)).To(Succeed())
				b.expire("s1")
				other := another()
				s2, _ := reopenIn(other, "s1")
				Expect(keeper(s2).PriorTurn()).NotTo(BeNil())
				Expect(keeper(s2).PriorTurn().Conn).To(Equal(full.Conn))
				Expect(s.Append(store.ToolStartEntry("c1", "bash"))).To(MatchError(store.ErrFenced))
				Expect(recorder(s).RecordTurn(nil)).To(MatchError(store.ErrFenced))
				Expect(keeper(s).Pause()).To(Succeed(), "a fenced handle lets go; nothing of it is written")
				s2.Close()
				s3, _ := reopenIn(other, "s1")
				Expect(keeper(s3).PriorTurn()).To(BeNil(), "the holder that took it over released it")
			})
		})

		Describe("tool call records", func() {
			It("come back as written, and the model sees one tool message per step in the order of the calls", func() {
				assistant := llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{toolUse("c1", "read"), toolUse("c2", "bash"), toolUse("c3", "read")}}
				result := func(id string) llm.Block {
					return llm.Block{Type: llm.BlockToolResult, ToolCallID: id, Name: "read", Text: "ok " + id}
				}
				s := create("s1", "/p", userMsg("go"), assistant)
				Expect(s.Append(store.ToolStartEntry("c1", "read"), store.ToolStartEntry("c2", "bash"), store.ToolStartEntry("c3", "read"))).To(Succeed())
				Expect(s.Append(store.ToolResultEntry(result("c3")))).To(Succeed())
				Expect(s.Append(store.ToolResultEntry(result("c1")))).To(Succeed())
				Expect(s.Append(store.ToolResultEntry(result("c2")))).To(Succeed())
				Expect(s.Append(store.MessageEntry(assistantText("done")))).To(Succeed())
				Expect(s.Close()).To(Succeed())
				_, es := reopen("s1")
				Expect(es).To(HaveLen(9))
				Expect(es[2].Kind).To(Equal(store.KindToolStart))
				Expect(es[2].CallID).To(Equal("c1"))
				Expect(es[3].Tool).To(Equal("bash"))
				Expect(es[5].Kind).To(Equal(store.KindToolResult))
				Expect(es[5].CallID).To(Equal("c3"))
				Expect(store.Context(es)).To(Equal([]llm.Message{userMsg("go"), assistant, toolResults("c1", "c2", "c3"), assistantText("done")}),
					"what the model saw when a step's results were one message")
				Expect(store.NextStep(es, 1)).To(Equal(store.Step{Done: true}))
			})
		})
	})
}
