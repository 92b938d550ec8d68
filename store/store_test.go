package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// clock is a fake time source advancing by step on every reading.
type clock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

// logBuf collects zerolog JSON lines.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// warnings returns the messages of the logged warnings.
func (l *logBuf) warnings() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec struct {
			Level, Message string
		}
		Expect(protocol.Unmarshal([]byte(line), &rec)).To(Succeed())
		if rec.Level == "warn" {
			out = append(out, rec.Message)
		}
	}
	return out
}

func userMsg(text string) llm.Message {
	return llm.Message{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: text}}}
}

func assistantText(text string) llm.Message {
	return llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockText, Text: text}}}
}

func toolUse(id, name string) llm.Block {
	return llm.Block{Type: llm.BlockToolUse, ToolCallID: id, Name: name, Input: protocol.RawMessage(`{"path":"a.go"}`)}
}

func toolResults(ids ...string) llm.Message {
	m := llm.Message{Role: llm.RoleTool}
	for _, id := range ids {
		m.Content = append(m.Content, llm.Block{Type: llm.BlockToolResult, ToolCallID: id, Name: "read", Text: "ok " + id})
	}
	return m
}

func entries(msgs ...llm.Message) []store.Entry {
	out := make([]store.Entry, len(msgs))
	for i, m := range msgs {
		out[i] = store.MessageEntry(m)
	}
	return out
}

func messages(es []store.Entry) []llm.Message {
	out := make([]llm.Message, len(es))
	for i := range es {
		out[i] = es[i].Message
	}
	return out
}

func seqs(es []store.Entry) []int64 {
	out := make([]int64, len(es))
	for i := range es {
		out[i] = es[i].Seq
	}
	return out
}

var _ = Describe("FileStore", func() {
	var (
		root string
		st   *store.FileStore
		clk  *clock
		logs *logBuf
	)

	BeforeEach(func() {
		root = GinkgoT().TempDir()
		clk = &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), step: time.Second}
		logs = &logBuf{}
		var err error
		st, err = store.New(root, store.WithClock(clk.Now), store.WithLogger(zerolog.New(logs)))
		Expect(err).NotTo(HaveOccurred())
	})

	sessionDir := func(id string) string { return filepath.Join(root, "sessions", id) }
	historyPath := func(id string) string { return filepath.Join(sessionDir(id), "history.jsonl") }

	create := func(id, cwd string, msgs ...llm.Message) store.Session {
		s, err := st.Create(store.Meta{ID: id, Cwd: cwd})
		Expect(err).NotTo(HaveOccurred())
		if len(msgs) > 0 {
			Expect(s.Append(entries(msgs...)...)).To(Succeed())
		}
		return s
	}

	reopen := func(id string) (store.Session, []store.Entry) {
		s, es, err := st.Open(id)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(s.Close)
		return s, es
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

			s2, es := reopen("s1")
			Expect(messages(es)).To(Equal(msgs))
			Expect(seqs(es)).To(Equal([]int64{1, 2, 3, 4}))
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

		It("writes one JSON object per line, readable before Close once synced", func() {
			s := create("s1", "/p", userMsg("a"), assistantText("b"))
			Expect(s.Sync()).To(Succeed())
			data, err := os.ReadFile(historyPath("s1"))
			Expect(err).NotTo(HaveOccurred())
			lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
			Expect(lines).To(HaveLen(2))
			Expect(lines[0]).To(HavePrefix(`{"seq":1,"time":"2025-01-01T00:00:0`))
			Expect(lines[0]).To(ContainSubstring(`"kind":"message","message":{"role":"user"`))
			Expect(s.Close()).To(Succeed())
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
			Expect(st.Delete("s1")).To(Succeed())
			_, _, err := st.Open("s1")
			Expect(err).To(MatchError(store.ErrNotFound))
			Expect(st.Delete("s1")).To(MatchError(store.ErrNotFound))
			names, err := os.ReadDir(filepath.Join(root, "sessions"))
			Expect(err).NotTo(HaveOccurred())
			Expect(names).To(BeEmpty())
		})
	})

	Describe("damaged history", func() {
		It("skips a truncated last line with a warning and appends cleanly after it", func() {
			Expect(create("s1", "/p", userMsg("one"), assistantText("two"), userMsg("three")).Close()).To(Succeed())
			line, err := protocol.Marshal(store.Entry{Seq: 4, Kind: store.KindMessage, Message: assistantText("four, cut short")})
			Expect(err).NotTo(HaveOccurred())
			f, err := os.OpenFile(historyPath("s1"), os.O_WRONLY|os.O_APPEND, 0)
			Expect(err).NotTo(HaveOccurred())
			_, err = f.Write(line[:len(line)/2]) // kill -9 mid-write
			Expect(err).NotTo(HaveOccurred())
			Expect(f.Close()).To(Succeed())

			s, es, err := st.Open("s1")
			Expect(err).NotTo(HaveOccurred())
			Expect(messages(es)).To(Equal([]llm.Message{userMsg("one"), assistantText("two"), userMsg("three")}))
			Expect(logs.warnings()).To(ContainElement("skipping truncated last history line"))
			Expect(s.Append(store.MessageEntry(assistantText("four")))).To(Succeed())
			Expect(s.Close()).To(Succeed())

			logs.buf.Reset()
			_, es = reopen("s1")
			Expect(messages(es)).To(HaveLen(4))
			Expect(es[3].Message).To(Equal(assistantText("four")))
			Expect(seqs(es)).To(Equal([]int64{1, 2, 3, 4}))
			Expect(logs.warnings()).To(BeEmpty(), "the tail was repaired on the first open")
		})

		It("keeps a last line that only lacks its newline", func() {
			Expect(create("s1", "/p", userMsg("one")).Close()).To(Succeed())
			line, err := protocol.Marshal(store.Entry{Seq: 2, Kind: store.KindMessage, Message: assistantText("two")})
			Expect(err).NotTo(HaveOccurred())
			f, err := os.OpenFile(historyPath("s1"), os.O_WRONLY|os.O_APPEND, 0)
			Expect(err).NotTo(HaveOccurred())
			_, err = f.Write(line)
			Expect(err).NotTo(HaveOccurred())
			Expect(f.Close()).To(Succeed())

			s, es, err := st.Open("s1")
			Expect(err).NotTo(HaveOccurred())
			Expect(messages(es)).To(Equal([]llm.Message{userMsg("one"), assistantText("two")}))
			Expect(s.Append(store.MessageEntry(userMsg("three")))).To(Succeed())
			Expect(s.Close()).To(Succeed())
			_, es = reopen("s1")
			Expect(seqs(es)).To(Equal([]int64{1, 2, 3}))
		})

		It("skips corrupt lines in the middle with a warning", func() {
			Expect(create("s1", "/p", userMsg("one")).Close()).To(Succeed())
			f, err := os.OpenFile(historyPath("s1"), os.O_WRONLY|os.O_APPEND, 0)
			Expect(err).NotTo(HaveOccurred())
			_, err = f.WriteString("{\"seq\":2,\"kind\":\"mess\x00\x00\x00\n" + // garbage
				`{"seq":3,"kind":"message"}` + "\n" + // valid JSON, no message
				`{"seq":1,"kind":"message","message":{"role":"user","content":[]}}` + "\n" + // seq goes back
				"\n")
			Expect(err).NotTo(HaveOccurred())
			Expect(f.Close()).To(Succeed())
			s, _, err := st.Open("s1")
			Expect(err).NotTo(HaveOccurred())
			Expect(s.Append(store.MessageEntry(assistantText("two")))).To(Succeed())
			Expect(s.Close()).To(Succeed())

			logs.buf.Reset()
			_, es := reopen("s1")
			Expect(messages(es)).To(Equal([]llm.Message{userMsg("one"), assistantText("two")}))
			Expect(logs.warnings()).To(Equal([]string{
				"skipping corrupt history line", "skipping corrupt history line", "skipping corrupt history line"}))
		})

		It("treats a missing history file as empty", func() {
			Expect(create("s1", "/p", userMsg("one")).Close()).To(Succeed())
			Expect(os.Remove(historyPath("s1"))).To(Succeed())
			s, es := reopen("s1")
			Expect(es).To(BeEmpty())
			Expect(s.Append(store.MessageEntry(userMsg("new")))).To(Succeed())
		})
	})

	Describe("meta", func() {
		It("is replaced atomically: no temp file left, readable after many saves", func() {
			s := create("s1", "/p")
			for i := range 200 {
				m := s.Meta()
				m.Title = fmt.Sprintf("title %d", i)
				m.Usage.OutputTokens = int64(i)
				Expect(s.SaveMeta(m)).To(Succeed())
			}
			names := func() []string {
				ents, err := os.ReadDir(sessionDir("s1"))
				Expect(err).NotTo(HaveOccurred())
				var out []string
				for _, e := range ents {
					out = append(out, e.Name())
				}
				return out
			}
			Expect(names()).To(ConsistOf("meta.json", "history.jsonl", "lock"))
			data, err := os.ReadFile(filepath.Join(sessionDir("s1"), "meta.json"))
			Expect(err).NotTo(HaveOccurred())
			var onDisk store.Meta
			Expect(protocol.Unmarshal(data, &onDisk)).To(Succeed())
			Expect(onDisk.Title).To(Equal("title 199"))
			Expect(s.Close()).To(Succeed())
			s2, _ := reopen("s1")
			Expect(s2.Meta().Usage.OutputTokens).To(BeEquivalentTo(199))
			Expect(names()).To(ConsistOf("meta.json", "history.jsonl", "lock"))
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

			ids := func(ms []store.Meta) []string {
				var out []string
				for _, m := range ms {
					out = append(out, m.ID)
				}
				return out
			}
			all, next, err := st.List("", "", 10)
			Expect(err).NotTo(HaveOccurred())
			Expect(ids(all)).To(Equal([]string{"a", "c", "b"}))
			Expect(next).To(BeEmpty())
			p1, _, err := st.List("/p1", "", 10)
			Expect(err).NotTo(HaveOccurred())
			Expect(ids(p1)).To(Equal([]string{"a", "c"}))
			none, next, err := st.List("/elsewhere", "", 10)
			Expect(err).NotTo(HaveOccurred())
			Expect(none).To(BeEmpty())
			Expect(next).To(BeEmpty())
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
				var out []string
				for _, m := range ms {
					out = append(out, m.ID)
				}
				again, next2, err := st.List(cwd, cursor, 50)
				Expect(err).NotTo(HaveOccurred())
				Expect(again).To(Equal(ms), "same cursor, same page")
				Expect(next2).To(Equal(next))
				return out, next
			}
			var got []string
			var sizes []int
			cursor := ""
			for {
				ids, next := page("", cursor)
				got = append(got, ids...)
				sizes = append(sizes, len(ids))
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
				ids, next := page("/p", cursor)
				got = append(got, ids...)
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

			// Another process (another store on the same root) saves b.
			other, err := store.New(root, store.WithClock(clk.Now))
			Expect(err).NotTo(HaveOccurred())
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
			Expect(ms).To(HaveLen(1))
			Expect(ms[0].ID).To(Equal("a"))
		})

		It("rejects a foreign cursor and skips unreadable metas", func() {
			_, _, err := st.List("", "not-a-cursor!", 10)
			Expect(err).To(MatchError(store.ErrInvalidCursor))
			Expect(create("good", "/p").Close()).To(Succeed())
			Expect(os.MkdirAll(sessionDir("broken"), 0o700)).To(Succeed())
			Expect(os.WriteFile(filepath.Join(sessionDir("broken"), "meta.json"), []byte("{"), 0o600)).To(Succeed())
			Expect(os.MkdirAll(sessionDir("empty"), 0o700)).To(Succeed())
			Expect(os.MkdirAll(filepath.Join(root, "sessions", ".tmp-x-1"), 0o700)).To(Succeed())
			ms, _, err := st.List("", "", 10)
			Expect(err).NotTo(HaveOccurred())
			Expect(ms).To(HaveLen(1))
			Expect(ms[0].ID).To(Equal("good"))
			Expect(logs.warnings()).To(ContainElement("skipping unreadable session meta"))
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

	Describe("Repair", func() {
		It("changes nothing when every call has its result", func() {
			es := entries(userMsg("hi"),
				llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{toolUse("a", "read")}},
				toolResults("a"), assistantText("done"))
			repaired, added := store.Repair(es)
			Expect(added).To(BeNil())
			Expect(repaired).To(Equal(es))
		})

		It("closes one open call of an interrupted turn, persisted across reopen", func() {
			s := create("s1", "/p", userMsg("hi"),
				llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockText, Text: "reading"}, toolUse("a", "read")}})
			Expect(s.Close()).To(Succeed()) // as after a crash

			s, es, err := st.Open("s1")
			Expect(err).NotTo(HaveOccurred())
			repaired, added, err := store.RepairSession(s, es)
			Expect(err).NotTo(HaveOccurred())
			want := llm.Message{Role: llm.RoleTool, Content: []llm.Block{{Type: llm.BlockToolResult, ToolCallID: "a",
				Name: "read", Text: "Session interrupted before tool execution completed.", IsError: true}}}
			Expect(added).To(HaveLen(1))
			Expect(added[0].Message).To(Equal(want))
			Expect(added[0].Seq).To(BeEquivalentTo(3))
			Expect(seqs(repaired)).To(Equal([]int64{1, 2, 3}))
			Expect(repaired[2].Message).To(Equal(want))
			Expect(s.Close()).To(Succeed())

			s2, es := reopen("s1")
			Expect(messages(es)).To(Equal(messages(repaired)))
			Expect(seqs(es)).To(Equal([]int64{1, 2, 3}))
			_, again := store.Repair(es)
			Expect(again).To(BeNil())
			Expect(s2.LastSeq()).To(BeEquivalentTo(3))
		})

		It("closes two open calls in one tool message, in call order", func() {
			es := entries(userMsg("hi"),
				llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{toolUse("a", "read"), toolUse("b", "bash")}})
			for i := range es {
				es[i].Seq = int64(i + 1)
			}
			repaired, added := store.Repair(es)
			Expect(added).To(HaveLen(1))
			Expect(repaired).To(HaveLen(3))
			res := repaired[2].Message
			Expect(res.Role).To(Equal(llm.RoleTool))
			Expect(res.Content).To(HaveLen(2))
			Expect(res.Content[0].ToolCallID).To(Equal("a"))
			Expect(res.Content[0].Name).To(Equal("read"))
			Expect(res.Content[1].ToolCallID).To(Equal("b"))
			Expect(res.Content[1].Name).To(Equal("bash"))
			Expect(res.Content[1].IsError).To(BeTrue())
			Expect(res.Content[1].Text).To(Equal(store.InterruptedText))
			Expect(es).To(HaveLen(2), "input untouched")
		})

		It("places results after the results already recorded", func() {
			es := entries(userMsg("hi"),
				llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{toolUse("a", "read"), toolUse("b", "read")}},
				toolResults("a"))
			for i := range es {
				es[i].Seq = int64(i + 1)
			}
			repaired, added := store.Repair(es)
			Expect(added).To(HaveLen(1))
			Expect(messages(repaired[:3])).To(Equal(messages(es)))
			Expect(repaired[3].Message.Content[0].ToolCallID).To(Equal("b"))
			Expect(seqs(repaired)).To(Equal([]int64{1, 2, 3, 4}))
		})

		It("inserts in the middle before a later user message and persists by rewriting", func() {
			// A lost result line leaves an open call before later messages.
			s := create("s1", "/p", userMsg("one"),
				llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{toolUse("a", "read")}},
				userMsg("two"), assistantText("answer"))
			Expect(s.Append(store.CompactionEntry("summary of one", 2))).To(Succeed())
			Expect(s.Append(store.MessageEntry(userMsg("three")))).To(Succeed())
			Expect(s.Close()).To(Succeed())

			s, es, err := st.Open("s1")
			Expect(err).NotTo(HaveOccurred())
			repaired, added, err := store.RepairSession(s, es)
			Expect(err).NotTo(HaveOccurred())
			Expect(added).To(HaveLen(1))
			Expect(repaired[2].Message.Role).To(Equal(llm.RoleTool))
			Expect(repaired[2].Message.Content[0].ToolCallID).To(Equal("a"))
			Expect(repaired[3].Message).To(Equal(userMsg("two")))
			Expect(seqs(repaired)).To(Equal([]int64{1, 2, 3, 4, 5, 6, 7}))
			// The compaction still covers the call and now its result too.
			Expect(repaired[5].Kind).To(Equal(store.KindCompaction))
			Expect(repaired[5].UpTo).To(BeEquivalentTo(3))
			Expect(store.Context(repaired)).To(Equal([]llm.Message{
				repaired[5].Message, userMsg("two"), assistantText("answer"), userMsg("three")}))
			Expect(s.Append(store.MessageEntry(assistantText("after repair")))).To(Succeed())
			Expect(s.LastSeq()).To(BeEquivalentTo(8))
			Expect(s.Close()).To(Succeed())

			_, es = reopen("s1")
			Expect(messages(es[:7])).To(Equal(messages(repaired)))
			Expect(seqs(es)).To(Equal([]int64{1, 2, 3, 4, 5, 6, 7, 8}))
			Expect(es[5].UpTo).To(BeEquivalentTo(3))
			_, again := store.Repair(es)
			Expect(again).To(BeNil())
			Expect(logs.warnings()).To(BeEmpty())
		})
	})

	Describe("Context", func() {
		It("is every message without a compaction", func() {
			es := entries(userMsg("a"), assistantText("b"))
			Expect(store.Context(es)).To(Equal([]llm.Message{userMsg("a"), assistantText("b")}))
		})

		It("is the latest summary and the messages after what it covers", func() {
			s := create("s1", "/p", userMsg("u1"), assistantText("a1"), userMsg("u2"), assistantText("a2"))
			Expect(s.Append(store.CompactionEntry("first summary", 2))).To(Succeed())
			Expect(s.Append(entries(userMsg("u3"), assistantText("a3"))...)).To(Succeed())
			Expect(s.Close()).To(Succeed())
			_, es := reopen("s1")
			summary := llm.Message{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockSummary, Text: "first summary"}}}
			Expect(store.Context(es)).To(Equal([]llm.Message{summary, userMsg("u2"), assistantText("a2"), userMsg("u3"), assistantText("a3")}))
			Expect(es).To(HaveLen(7), "the full history stays on disk")

			c2 := store.CompactionEntry("second summary", 7)
			es = append(es, c2)
			es[len(es)-1].Seq = 8
			ctx := store.Context(es)
			Expect(ctx).To(HaveLen(1))
			Expect(ctx[0].Content[0].Text).To(Equal("second summary"))
		})
	})

	It("sweeps stale leftovers of interrupted creates on start", func() {
		stale := filepath.Join(root, "sessions", ".tmp-x-123")
		fresh := filepath.Join(root, "sessions", ".del-y-456")
		Expect(os.MkdirAll(stale, 0o700)).To(Succeed())
		Expect(os.MkdirAll(fresh, 0o700)).To(Succeed())
		old := time.Now().Add(-2 * time.Hour)
		Expect(os.Chtimes(stale, old, old)).To(Succeed())
		_, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		_, err = os.Stat(stale)
		Expect(errors.Is(err, os.ErrNotExist)).To(BeTrue())
		Expect(fresh).To(BeADirectory())
	})
})

var _ = Describe("TitleFrom", func() {
	It("collapses whitespace and trims", func() {
		Expect(store.TitleFrom("  fix\n\tthe   build  ")).To(Equal("fix the build"))
		Expect(store.TitleFrom("")).To(Equal(""))
	})

	It("cuts long text to 80 runes with an ellipsis, at a word when near", func() {
		long := strings.Repeat("word ", 40)
		t := store.TitleFrom(long)
		Expect([]rune(t)).To(HaveLen(80))
		Expect(t).To(HaveSuffix(" word…"))
		t = store.TitleFrom(strings.Repeat("abc ", 19) + "abcdefghijkl more")
		Expect(t).To(HaveSuffix(" abc…"), "cut back to the last word")
		noSpaces := strings.Repeat("é", 200)
		t = store.TitleFrom(noSpaces)
		Expect([]rune(t)).To(HaveLen(80))
		Expect(t).To(HaveSuffix("é…"))
		exact := strings.Repeat("x", 80)
		Expect(store.TitleFrom(exact)).To(Equal(exact))
	})
})
