package actors

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools/mcp/mcptest"
)

// crashingStore is a real file store whose session handles panic, once
// armed, in a later call of one method (a bug in a store): the session
// actor, which calls its handle itself, panics serving that message.
type crashingStore struct {
	store.Store
	mu sync.Mutex
	// armed: the method whose call panics ("" none), once skip more calls
	// of it went through; disarmed by the panic.
	armed string
	skip  int
}

func (c *crashingStore) arm(method string) { c.armAfter(method, 0) }

// armAfter arms method to panic in its call after the next skip.
func (c *crashingStore) armAfter(method string, skip int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.skip = method, skip
}

func (c *crashingStore) crashIn(method string) {
	c.mu.Lock()
	hit := c.armed == method && c.skip == 0
	switch {
	case hit:
		c.armed = ""
	case c.armed == method:
		c.skip--
	}
	c.mu.Unlock()
	if hit {
		panic("store exploded in " + method)
	}
}

// fileHandle is a file store's session handle with the interfaces the
// session looks for on it.
type fileHandle interface {
	store.Session
	store.TurnKeeper
	store.TurnMarker
}

type crashingSession struct {
	fileHandle
	c *crashingStore
}

func (s crashingSession) Append(es ...store.Entry) error {
	s.c.crashIn("Append")
	return s.fileHandle.Append(es...)
}

func (s crashingSession) Sync() error {
	s.c.crashIn("Sync")
	return s.fileHandle.Sync()
}

func (s crashingSession) SaveMeta(m store.Meta) error {
	s.c.crashIn("SaveMeta")
	return s.fileHandle.SaveMeta(m)
}

func (c *crashingStore) Create(m store.Meta) (store.Session, error) {
	s, err := c.Store.Create(m)
	if err != nil {
		return nil, err
	}
	return crashingSession{s.(fileHandle), c}, nil
}

func (c *crashingStore) Open(id string) (store.Session, []store.Entry, error) {
	s, es, err := c.Store.Open(id)
	if err != nil {
		return nil, nil, err
	}
	return crashingSession{s.(fileHandle), c}, es, nil
}

var _ = Describe("a session actor that crashes while a turn runs", func() {
	var (
		p  *scriptedProvider
		st *crashingStore
		h  *harness
	)
	BeforeEach(func() {
		p = &scriptedProvider{}
		fs, err := store.New(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		st = &crashingStore{Store: fs}
		h = newHarnessOn(st, Config{}, p)
	})
	AfterEach(func() { h.close() })

	answers := func(id float64) int {
		n := 0
		for _, f := range h.out.all() {
			if f["id"] == id && f["method"] == nil {
				n++
			}
		}
		return n
	}

	DescribeTable("answers the turn's prompt once, -32603 with an error id, and the session serves the next prompt",
		func(method string) {
			// The model's reply arms the store: the session panics recording
			// it (Append: the turn still runs), or in the turn's end
			// (Sync: the slot was let go of, its prompt not answered yet).
			p.then(func(_ context.Context, emit func(llm.Event)) error {
				emit(llm.Event{Type: llm.EventTextDelta, Text: "a reply"})
				st.arm(method)
				emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopEndTurn})
				return nil
			})
			sid := h.newSession(GinkgoT().TempDir())
			id := h.call("session/prompt", textPrompt(sid, "crash"))
			e := h.errorOf(id)
			Expect(e["code"]).To(Equal(-32603.0))
			Expect(e["message"]).To(ContainSubstring("store exploded in " + method))
			Expect(e["data"]).To(HaveKey("error_id"))
			Consistently(func() int { return answers(id) }, 300*time.Millisecond, 10*time.Millisecond).Should(Equal(1))

			// The crashed actor is gone; the session comes back from disk.
			Expect(h.result(h.call("session/prompt", textPrompt(sid, "again")))["stopReason"]).To(Equal("end_turn"))
			Expect(p.requests()).To(HaveLen(2))
		},
		Entry("recording the turn's reply", "Append"),
		Entry("ending the turn", "Sync"),
	)

	It("answers -32603 once a prompt whose user message it was recording as it crashed", func() {
		sid := h.newSession(GinkgoT().TempDir())
		st.arm("Append") // the prompt's user message, before its turn runs
		id := h.call("session/prompt", textPrompt(sid, "crash"))
		e := h.errorOf(id)
		Expect(e["code"]).To(Equal(-32603.0))
		Expect(e["message"]).To(ContainSubstring("store exploded in Append"))
		Consistently(func() int { return answers(id) }, 300*time.Millisecond, 10*time.Millisecond).Should(Equal(1))
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "again")))["stopReason"]).To(Equal("end_turn"))
		Expect(p.requests()).To(HaveLen(1), "the crashed prompt never reached the model")
	})

	It("answers -32603 once a queued prompt it was starting as it crashed, after the turn before it", func() {
		release := make(chan struct{})
		p.then(func(ctx context.Context, emit func(llm.Event)) error {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			emit(llm.Event{Type: llm.EventTextDelta, Text: "first"})
			emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopEndTurn})
			return nil
		})
		sid := h.newSession(GinkgoT().TempDir())
		first := h.call("session/prompt", textPrompt(sid, "first"))
		second := h.call("session/prompt", textPrompt(sid, "second"))
		// Answered by the session after it queued the second prompt (one
		// mailbox, in the order the connection sent them).
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "default"}))
		st.armAfter("Append", 1) // the first turn's reply is written; the second prompt's start panics
		close(release)
		Expect(h.result(first)["stopReason"]).To(Equal("end_turn"))
		e := h.errorOf(second)
		Expect(e["code"]).To(Equal(-32603.0))
		Expect(e["message"]).To(ContainSubstring("store exploded in Append"))
		Consistently(func() []int { return []int{answers(first), answers(second)} }, 300*time.Millisecond, 10*time.Millisecond).
			Should(Equal([]int{1, 1}))
		Expect(p.requests()).To(HaveLen(1), "the second prompt never reached the model")
	})

	It("answers a prompt held for its MCP prompt, and the prompt queued behind it, cancelled once each", func() {
		server, err := mcptest.Build(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))
		sid := h.result(h.call("session/new", map[string]any{"cwd": GinkgoT().TempDir(), "mcpServers": []any{
			map[string]any{"name": "srv", "command": server, "args": []any{}, "env": []any{}}}}))["sessionId"].(string)
		held := h.call("session/prompt", textPrompt(sid, "/mcp__srv__slow 3"))
		queued := h.call("session/prompt", textPrompt(sid, "plain words"))
		Consistently(func() map[string]any { return h.out.response(held) }, 200*time.Millisecond).Should(BeNil(), "prompts/get runs")
		st.arm("SaveMeta")
		h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}) // its write panics
		Expect(h.result(held)["stopReason"]).To(Equal("cancelled"))
		Expect(h.result(queued)["stopReason"]).To(Equal("cancelled"))
		Consistently(func() []int { return []int{answers(held), answers(queued)} }, 300*time.Millisecond, 10*time.Millisecond).
			Should(Equal([]int{1, 1}))
		Expect(p.requests()).To(BeEmpty())
	})

	It("lets a closing connection go once the session crashed ending the turn the close waits for", func() {
		p.then(func(ctx context.Context, emit func(llm.Event)) error {
			emit(llm.Event{Type: llm.EventTextDelta, Text: "partial"})
			<-ctx.Done()
			return ctx.Err()
		})
		sid := h.newSession(GinkgoT().TempDir())
		id := h.call("session/prompt", textPrompt(sid, "crash as you stop"))
		Eventually(func() []map[string]any { return h.out.updates() }, 5*time.Second).Should(ContainElement(
			HaveKeyWithValue("sessionUpdate", "agent_message_chunk")), "the turn runs")
		st.arm("Sync") // the cancelled turn's end panics
		began := time.Now()
		h.conn.Close(4 * time.Second)
		Expect(time.Since(began)).To(BeNumerically("<", time.Second), "the close waited for a turn whose session was gone")
		Expect(answers(id)).To(Equal(1))
		Expect(h.errorOf(id)["code"]).To(Equal(-32603.0))
	})
})
