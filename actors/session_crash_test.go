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
	// acquiring, when set, holds every Acquire until it is closed.
	acquiring chan struct{}
}

func (c *crashingStore) arm(method string) { c.armAfter(method, 0) }

// armAfter arms method to panic in its call after the next skip.
func (c *crashingStore) armAfter(method string, skip int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.skip = method, skip
}

// holdAcquires makes every later Acquire wait until the returned func is
// called: the session's requests wait in its stash meanwhile.
func (c *crashingStore) holdAcquires() (let func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gate := make(chan struct{})
	c.acquiring = gate
	return func() { close(gate) }
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

func (s crashingSession) Close() error {
	s.c.crashIn("Close")
	return s.fileHandle.Close()
}

func (s crashingSession) Acquire() ([]store.Entry, bool, error) {
	s.c.mu.Lock()
	gate := s.c.acquiring
	s.c.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return s.fileHandle.Acquire()
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

var _ = Describe("a session actor that crashes serving a message (a bug in its store)", func() {
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
		setMode := h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}) // its write panics
		Expect(h.result(held)["stopReason"]).To(Equal("cancelled"))
		Expect(h.result(queued)["stopReason"]).To(Equal("cancelled"))
		Expect(h.errorOf(setMode)["code"]).To(Equal(-32603.0))
		Consistently(func() []int { return []int{answers(held), answers(queued), answers(setMode)} }, 300*time.Millisecond, 10*time.Millisecond).
			Should(Equal([]int{1, 1, 1}))
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

	// A request other than a prompt is the session's to answer from the
	// message serving it until it is answered or kept by what answers it
	// later (requestInHand).
	DescribeTable("answers a request whose handler panics -32603 once, with an error id, and the connection goes on",
		func(method string, params func(sid string) map[string]any) {
			sid := h.newSession(GinkgoT().TempDir())
			st.arm("SaveMeta")
			id := h.call(method, params(sid))
			e := h.errorOf(id)
			Expect(e["code"]).To(Equal(-32603.0))
			Expect(e["message"]).To(ContainSubstring("store exploded in SaveMeta"))
			Expect(e["data"]).To(HaveKey("error_id"))
			Consistently(func() int { return answers(id) }, 300*time.Millisecond, 10*time.Millisecond).Should(Equal(1))

			Expect(h.result(h.call("session/new", map[string]any{"cwd": GinkgoT().TempDir(), "mcpServers": []any{}}))).
				To(HaveKey("sessionId"))
			Expect(h.result(h.call("session/prompt", textPrompt(sid, "again")))["stopReason"]).To(Equal("end_turn"))
		},
		Entry("session/set_mode", "session/set_mode", func(sid string) map[string]any {
			return map[string]any{"sessionId": sid, "modeId": "plan"}
		}),
		Entry("session/set_config_option", "session/set_config_option", func(sid string) map[string]any {
			return map[string]any{"sessionId": sid, "configId": "mode", "value": "plan"}
		}),
	)

	It("answers once each a request answered before another one of the same message panicked, and that one", func() {
		sid := h.newSession(GinkgoT().TempDir())
		// The handle was let go of after session/new: the two set_modes wait
		// for it in the stash and are served in one message, once it is back.
		let := st.holdAcquires()
		first := h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"})
		second := h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "default"})
		// Served at once, after the set_modes were stashed (one mailbox).
		h.result(h.call("session/cancel", map[string]any{"sessionId": sid}))
		st.armAfter("SaveMeta", 1) // the first one's write goes through, the second one's panics
		let()
		Expect(h.result(first)).To(BeEmpty())
		e := h.errorOf(second)
		Expect(e["code"]).To(Equal(-32603.0))
		Expect(e["message"]).To(ContainSubstring("store exploded in SaveMeta"))
		Consistently(func() []int { return []int{answers(first), answers(second)} }, 300*time.Millisecond, 10*time.Millisecond).
			Should(Equal([]int{1, 1}))
	})

	It("answers once a session/close whose handling panicked after the session kept it for its stop", func() {
		sid := h.newSession(GinkgoT().TempDir())
		st.arm("Close") // the close lets go of the store entry, and panics
		id := h.call("session/close", map[string]any{"sessionId": sid})
		h.await(id)
		Consistently(func() int { return answers(id) }, 300*time.Millisecond, 10*time.Millisecond).Should(Equal(1))
		Expect(h.result(h.call("session/load", map[string]any{"sessionId": sid, "cwd": GinkgoT().TempDir(), "mcpServers": []any{}}))).
			NotTo(BeNil(), "the session was let go of")
	})
})
