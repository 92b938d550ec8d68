package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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

// text is everything logged.
func (l *logBuf) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
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

// createIn creates session id in st with msgs appended.
func createIn(st store.Store, id, cwd string, msgs ...llm.Message) store.Session {
	s, err := st.Create(store.Meta{ID: id, Cwd: cwd})
	Expect(err).NotTo(HaveOccurred())
	if len(msgs) > 0 {
		Expect(s.Append(entries(msgs...)...)).To(Succeed())
	}
	return s
}

// reopenIn opens session id of st, closed after the spec.
func reopenIn(st store.Store, id string) (store.Session, []store.Entry) {
	s, es, err := st.Open(id)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(s.Close)
	return s, es
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

	create := func(id, cwd string, msgs ...llm.Message) store.Session { return createIn(st, id, cwd, msgs...) }
	reopen := func(id string) (store.Session, []store.Entry) { return reopenIn(st, id) }

	Describe("round trip", func() {
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

		It("deletes the session directory, leaving nothing behind", func() {
			Expect(create("s1", "/p", userMsg("a")).Close()).To(Succeed())
			Expect(st.Delete("s1")).To(Succeed())
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
	})

	Describe("lock file", func() {
		It("lets another store wait for a holder between turns, and fails at once while the holder runs a turn", func() {
			s := create("s1", "/p", userMsg("one"))
			other, err := store.New(root, store.WithLockWait(2*time.Second))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(other.Close)

			By("a turn runs in the holder: at once, naming it")
			Expect(s.(store.TurnMarker).MarkTurn(true)).To(Succeed())
			start := time.Now()
			_, _, err = other.Open("s1")
			Expect(time.Since(start)).To(BeNumerically("<", 500*time.Millisecond))
			var inUse *store.InUseError
			Expect(errors.As(err, &inUse)).To(BeTrue(), "%v", err)
			Expect(*inUse).To(Equal(store.InUseError{ID: "s1", PID: os.Getpid(), Turn: true}))
			Expect(err.Error()).To(ContainSubstring("running a turn"))

			By("between turns: the holder lets go while the other waits, which then reads what it wrote")
			Expect(s.(store.TurnMarker).MarkTurn(false)).To(Succeed())
			go func() {
				defer GinkgoRecover()
				time.Sleep(100 * time.Millisecond)
				Expect(s.Append(store.MessageEntry(assistantText("two")))).To(Succeed())
				Expect(s.Release()).To(Succeed())
			}()
			s2, es, err := other.Open("s1")
			Expect(err).NotTo(HaveOccurred())
			Expect(messages(es)).To(Equal([]llm.Message{userMsg("one"), assistantText("two")}))

			By("the first takes it back once the other let go, with what the other wrote")
			Expect(s2.Append(store.MessageEntry(userMsg("three")))).To(Succeed())
			Expect(s2.Release()).To(Succeed())
			es, changed, err := s.Acquire()
			Expect(err).NotTo(HaveOccurred())
			Expect(changed).To(BeTrue())
			Expect(messages(es)).To(Equal([]llm.Message{userMsg("one"), assistantText("two"), userMsg("three")}))
			Expect(s.Close()).To(Succeed())
			Expect(s2.Close()).To(Succeed())
		})

		It("records a turn for other processes' lists; one whose prompt id does not fit on a line is marked but not listed", func() {
			s := create("s1", "/p", userMsg("one"))
			DeferCleanup(s.Close)
			other, err := store.New(root)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(other.Close)
			runningIn := func() *store.RunningTurn {
				ms, _, err := other.List("", "", 0)
				Expect(err).NotTo(HaveOccurred())
				Expect(ms).To(HaveLen(1))
				return ms[0].RunningTurn
			}
			at := time.Date(2026, 12, 1, 0, 0, 0, 1, time.UTC)
			for _, id := range []string{"[\n1]", `"` + strings.Repeat("x", 5000) + `"`} {
				Expect(s.(store.TurnRecorder).RecordTurn(&store.RunningTurn{StartedAt: at, PromptRequest: []byte(id)})).To(Succeed())
				Expect(runningIn()).To(BeNil())
				_, _, err = other.Open("s1")
				var inUse *store.InUseError
				Expect(errors.As(err, &inUse)).To(BeTrue(), "%v", err)
				Expect(inUse.Turn).To(BeTrue(), "the turn is marked all the same")
			}
			Expect(s.(store.TurnRecorder).RecordTurn(&store.RunningTurn{StartedAt: at, PromptRequest: []byte(`"a b"`)})).To(Succeed())
			Expect(runningIn()).To(Equal(&store.RunningTurn{StartedAt: at, PromptRequest: []byte(`"a b"`)}))
			Expect(s.(store.TurnRecorder).RecordTurn(nil)).To(Succeed())
			Expect(runningIn()).To(BeNil())
			data, err := os.ReadFile(filepath.Join(root, "sessions", "s1", "lock"))
			Expect(err).NotTo(HaveOccurred())
			Expect(data).To(HaveLen(20), "back to the holder's line alone")
		})

		It("keeps the lock file exactly the lines last recorded, longer or shorter, and hands a long one to the next holder", func() {
			s := create("s1", "/p", userMsg("one"))
			other, err := store.New(root)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(other.Close)
			lockPath := filepath.Join(root, "sessions", "s1", "lock")
			at := time.Date(2026, 12, 1, 0, 0, 0, 1, time.UTC)
			long := &store.RunningTurn{StartedAt: at, PromptRequest: []byte(`"` + strings.Repeat("y", 400) + `"`), FirstSeq: 2, ID: "t", Conn: "c"}
			short := &store.RunningTurn{StartedAt: at, PromptRequest: []byte("7")}
			for _, turn := range []*store.RunningTurn{short, long, short, long} {
				Expect(s.(store.TurnRecorder).RecordTurn(turn)).To(Succeed())
				ms, _, err := other.List("", "", 0)
				Expect(err).NotTo(HaveOccurred())
				Expect(ms).To(HaveLen(1))
				Expect(ms[0].RunningTurn).To(Equal(turn))
				data, err := os.ReadFile(lockPath)
				Expect(err).NotTo(HaveOccurred())
				Expect(strings.Count(string(data), "y")).To(Equal(strings.Count(string(turn.PromptRequest), "y")), "nothing left of a longer turn: %q", data)
			}
			// A holder that pauses the long turn leaves it whole (more than
			// the first read of the lock file) to the next holder.
			Expect(s.(store.TurnKeeper).Pause()).To(Succeed())
			next, _, err := other.Open("s1")
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(next.Close)
			Expect(next.(store.TurnKeeper).PriorTurn()).To(Equal(long))
			Expect(next.(store.TurnRecorder).RecordTurn(nil)).To(Succeed())
			data, err := os.ReadFile(lockPath)
			Expect(err).NotTo(HaveOccurred())
			Expect(data).To(HaveLen(20), "the next holder's line alone once it cleared the turn")
		})

		It("takes a session whose holder died mid-turn while a list's probe holds its lock shared", func() {
			s := create("s1", "/p", userMsg("one"))
			at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			Expect(s.(store.TurnRecorder).RecordTurn(&store.RunningTurn{StartedAt: at, PromptRequest: []byte(`7`)})).To(Succeed())
			lock := filepath.Join(root, "sessions", "s1", "lock")
			left, err := os.ReadFile(lock)
			Expect(err).NotTo(HaveOccurred())
			Expect(s.Close()).To(Succeed())
			Expect(os.WriteFile(lock, left, 0o600)).To(Succeed()) // killed with -9: the lines stay, the lock goes

			By("a probe (a list elsewhere, descheduled) holds the lock shared for 300 ms")
			probe, err := os.Open(lock)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(probe.Close)
			fd := int(probe.Fd())
			Expect(syscall.Flock(fd, syscall.LOCK_SH|syscall.LOCK_NB)).To(Succeed())
			unlocked := make(chan struct{})
			go func() {
				defer close(unlocked)
				time.Sleep(300 * time.Millisecond)
				_ = syscall.Flock(fd, syscall.LOCK_UN)
			}()
			DeferCleanup(func() { <-unlocked })
			other, err := store.New(root, store.WithLockWait(2*time.Second))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(other.Close)
			s2, es, err := other.Open("s1")
			Expect(err).NotTo(HaveOccurred(), "the stale mark is no running turn")
			Expect(messages(es)).To(Equal([]llm.Message{userMsg("one")}))
			Expect(s2.Close()).To(Succeed())
		})

		It("names its holder's pid, over whatever pid an older holder left", func() {
			Expect(create("s1", "/p").Close()).To(Succeed())
			lock := filepath.Join(sessionDir("s1"), "lock")
			// An older version wrote the bare pid after a truncate.
			Expect(os.WriteFile(lock, []byte("2147483647\n"), 0o600)).To(Succeed())
			s, _ := reopen("s1")
			other, err := store.New(root)
			Expect(err).NotTo(HaveOccurred())
			_, _, err = other.Open("s1")
			var inUse *store.InUseError
			Expect(errors.As(err, &inUse)).To(BeTrue(), "%v", err)
			Expect(inUse.PID).To(Equal(os.Getpid()))
			Expect(s.Close()).To(Succeed())
			s2, _, err := other.Open("s1")
			Expect(err).NotTo(HaveOccurred(), "closing the handle released the lock")
			Expect(s2.Close()).To(Succeed())
			Expect(other.Close()).To(Succeed())
		})
	})

	Describe("List", func() {
		It("skips unreadable metas and directories being built", func() {
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

	Describe("NextStep", func() {
		calls := llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{toolUse("c1", "bash"), toolUse("c2", "bash"), toolUse("c3", "bash")}}
		result := func(id string) store.Entry {
			return store.ToolResultEntry(llm.Block{Type: llm.BlockToolResult, ToolCallID: id, Name: "bash", Text: "ok"})
		}
		numbered := func(es ...store.Entry) []store.Entry {
			for i := range es {
				es[i].Seq = int64(i + 1)
			}
			return es
		}
		It("asks the model when the turn has only its prompt, or every call has its result, or the reply was cut", func() {
			Expect(store.NextStep(numbered(store.MessageEntry(userMsg("go"))), 1)).To(Equal(store.Step{Ask: true}))
			es := numbered(store.MessageEntry(userMsg("go")), store.MessageEntry(calls), store.ToolStartEntry("c1", "bash"),
				result("c1"), store.ToolStartEntry("c2", "bash"), result("c2"), store.ToolStartEntry("c3", "bash"), result("c3"))
			Expect(store.NextStep(es, 1)).To(Equal(store.Step{Ask: true}))
			By("an earlier turn's answer is not this turn's")
			es = numbered(store.MessageEntry(userMsg("a")), store.MessageEntry(assistantText("b")), store.MessageEntry(userMsg("go")))
			Expect(store.NextStep(es, 3)).To(Equal(store.Step{Ask: true}))
			Expect(store.NextStep(es, 1)).To(Equal(store.Step{Done: true}))
		})
		It("tells results recorded, calls started without one, and calls never started apart", func() {
			es := numbered(store.MessageEntry(userMsg("go")), store.MessageEntry(calls), store.ToolStartEntry("c1", "bash"),
				store.ToolStartEntry("c2", "bash"), result("c1"))
			step := store.NextStep(es, 1)
			Expect(step.Ask).To(BeFalse())
			Expect(step.Call).To(Equal(&es[1].Message))
			Expect(step.Results).To(Equal(map[string]bool{"c1": true}))
			Expect(step.Started).To(Equal(map[string]bool{"c2": true}))
		})
	})

	Describe("Repair with tool call records", func() {
		It("gives the calls without a result the interrupted text, after the records, folded into the step's one tool message", func() {
			calls := llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{toolUse("c1", "bash"), toolUse("c2", "bash"), toolUse("c3", "bash")}}
			es := []store.Entry{store.MessageEntry(userMsg("go")), store.MessageEntry(calls), store.ToolStartEntry("c1", "bash"),
				store.ToolStartEntry("c2", "bash"),
				store.ToolResultEntry(llm.Block{Type: llm.BlockToolResult, ToolCallID: "c1", Name: "bash", Text: "ok"})}
			for i := range es {
				es[i].Seq = int64(i + 1)
			}
			repaired, added := store.Repair(es)
			Expect(added).To(HaveLen(1))
			Expect(repaired[len(repaired)-1].Seq).To(BeEquivalentTo(6), "at the end, after the records")
			texts := map[string]string{}
			for _, b := range added[0].Message.Content {
				texts[b.ToolCallID] = b.Text
			}
			Expect(texts).To(Equal(map[string]string{"c2": store.InterruptedText, "c3": store.InterruptedText}))
			ctx := store.Context(repaired)
			Expect(ctx).To(HaveLen(3), "one tool message for the step")
			var order []string
			for _, b := range ctx[2].Content {
				order = append(order, b.ToolCallID)
			}
			Expect(order).To(Equal([]string{"c1", "c2", "c3"}))
			Expect(store.NextStep(repaired, 1)).To(Equal(store.Step{Ask: true}))
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

var _ = Describe("FileStore descriptors", func() {
	// openFDs counts this process's descriptors on files under root: other
	// specs' goroutines and finalizers open and close descriptors at any time.
	openFDs := func(root string) int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			Skip("no /proc/self/fd")
		}
		n := 0
		for _, e := range ents {
			if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil &&
				strings.HasPrefix(target, root+string(filepath.Separator)) {
				n++
			}
		}
		return n
	}

	It("holds none for a released session and two for an acquired one", func() {
		root, err := filepath.EvalSymlinks(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		st, err := store.New(root, store.WithLogger(zerolog.Nop()))
		Expect(err).NotTo(HaveOccurred())
		before := openFDs(root)
		var hs []store.Session
		for i := 0; i < 50; i++ {
			s, err := st.Create(store.Meta{ID: filepath.Base(GinkgoT().TempDir()) + "-x", Cwd: "/p"})
			Expect(err).NotTo(HaveOccurred())
			Expect(s.Append(entries(userMsg("hi"))...)).To(Succeed())
			hs = append(hs, s)
		}
		Expect(openFDs(root)-before).To(Equal(100), "history and lock of each")
		for _, s := range hs {
			Expect(s.Release()).To(Succeed())
		}
		Expect(openFDs(root)).To(Equal(before))
		for _, s := range hs {
			_, changed, err := s.Acquire()
			Expect(err).NotTo(HaveOccurred())
			Expect(changed).To(BeFalse())
			Expect(s.Close()).To(Succeed())
		}
		Expect(openFDs(root)).To(Equal(before))
	})
})
