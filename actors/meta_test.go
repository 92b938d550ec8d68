package actors

import (
	"context"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
)

// metaCounter is a store whose sessions count their metadata writes.
type metaCounter struct {
	store.Store
	saves atomic.Int32
}

type countedSession struct {
	store.Session
	c *metaCounter
}

func (s countedSession) SaveMeta(m store.Meta) error {
	s.c.saves.Add(1)
	return s.Session.SaveMeta(m)
}

func (c *metaCounter) Create(m store.Meta) (store.Session, error) {
	s, err := c.Store.Create(m)
	if err != nil {
		return nil, err
	}
	return countedSession{s, c}, nil
}

func (c *metaCounter) Open(id string) (store.Session, []store.Entry, error) {
	s, e, err := c.Store.Open(id)
	if err != nil {
		return nil, nil, err
	}
	return countedSession{s, c}, e, nil
}

var _ = Describe("session metadata writes", func() {
	var (
		h    *harness
		p    *scriptedProvider
		st   *metaCounter
		root string
	)
	BeforeEach(func() {
		p = &scriptedProvider{}
		root = GinkgoT().TempDir()
		fs, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		st = &metaCounter{Store: fs}
		h = newHarnessOn(st, Config{}, p)
	})
	AfterEach(func() { h.close() })
	prompt := func(sid, text string) float64 {
		return h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": text}}})
	}
	onDisk := func(sid string) store.Meta {
		fs, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		metas, _, err := fs.List("", "", 0)
		Expect(err).NotTo(HaveOccurred())
		for _, m := range metas {
			if m.ID == sid {
				return m
			}
		}
		Fail("session not listed")
		return store.Meta{}
	}

	It("writes once per turn, title and mode changes included, and not for a change that changes nothing", func() {
		sid := h.newSession(GinkgoT().TempDir())
		Expect(st.saves.Load()).To(BeZero(), "session/new writes its meta with the directory")

		// The first prompt sets the title: still one write, at the turn's end.
		p.then(say("hello"))
		h.result(prompt(sid, "Remember the number 42"))
		Expect(st.saves.Load()).To(Equal(int32(1)))
		m := onDisk(sid)
		Expect(m.Title).To(Equal("Remember the number 42"))
		Expect(m.Usage.OutputTokens).To(Equal(int64(5)))

		// A mode change during a turn is written with the turn.
		release := make(chan struct{})
		p.then(func(ctx context.Context, emit func(llm.Event)) error {
			<-release
			return say("done")(ctx, emit)
		})
		id := prompt(sid, "second")
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}))
		Expect(st.saves.Load()).To(Equal(int32(1)), "no write while the turn runs")
		close(release)
		h.result(id)
		Expect(st.saves.Load()).To(Equal(int32(2)))
		Expect(onDisk(sid).Mode).To(Equal("plan"))

		// Between turns a change is written at once; setting what is set is no change.
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "default"}))
		Expect(st.saves.Load()).To(Equal(int32(3)))
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "default"}))
		h.result(h.call("session/set_config_option", map[string]any{"sessionId": sid, "configId": "mode", "value": "default"}))
		Expect(st.saves.Load()).To(Equal(int32(3)))
		Expect(onDisk(sid).Mode).To(Equal("default"))
	})

	It("gives a session killed during its first turn its title back from the history", func() {
		fs, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		sess, err := fs.Create(store.Meta{ID: "killed-first-turn", Cwd: GinkgoT().TempDir(), Mode: "default"})
		Expect(err).NotTo(HaveOccurred())
		Expect(sess.Append(store.MessageEntry(llm.Message{Role: llm.RoleUser,
			Content: []llm.Block{{Type: llm.BlockText, Text: "What broke   the build?"}}}))).To(Succeed())
		Expect(sess.Close()).To(Succeed())
		Expect(onDisk("killed-first-turn").Title).To(BeEmpty())

		h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))
		h.result(h.call("session/load", map[string]any{"sessionId": "killed-first-turn", "cwd": onDisk("killed-first-turn").Cwd, "mcpServers": []any{}}))
		h.result(h.call("session/close", map[string]any{"sessionId": "killed-first-turn"}))
		Expect(onDisk("killed-first-turn").Title).To(Equal("What broke the build?"))
	})
})
