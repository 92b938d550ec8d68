package actors

import (
	"context"
	"fmt"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

func hangAfter(text string) func(context.Context, func(llm.Event)) error {
	return func(ctx context.Context, emit func(llm.Event)) error {
		emit(llm.Event{Type: llm.EventTextDelta, Text: text})
		<-ctx.Done()
		return ctx.Err()
	}
}

// sharedStores is one store's data shared by several processes: open gives
// another Store on it (another server process), holder how -32010 names a
// process holding a session through st, expire lapses a session's lease
// (nil: the store has none); betweenTurns: a holder lets go of an idle
// session at once (store.TurnMarker) and open waits for it.
type sharedStores struct {
	open         func() store.Store
	holder       func(st store.Store) map[string]any
	expire       func(id string)
	betweenTurns bool
	// dir is the file store's root ("" for another store).
	dir string
}

var _ = describeSharedSessions("FileStore", func() sharedStores {
	root := GinkgoT().TempDir()
	return sharedStores{
		open: func() store.Store {
			st, err := store.New(root, store.WithLockWait(time.Second))
			Expect(err).NotTo(HaveOccurred())
			return st
		},
		// the pid in the lock file: this test process
		holder:       func(store.Store) map[string]any { return map[string]any{"pid": float64(os.Getpid())} },
		betweenTurns: true,
	}
})

var _ = describeSharedSessions("PGStore", func() sharedStores {
	srv := requirePG()
	schema, dbURL, err := srv.NewSchema()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(srv.DropSchema, schema)
	return sharedStores{
		open: func() store.Store {
			// Leases outlive the spec unless it expires them.
			st, err := store.NewPostgres(dbURL, store.WithLeaseTTL(time.Hour), store.WithLeaseRenew(30*time.Minute))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(st.Close)
			return st
		},
		holder: func(st store.Store) map[string]any {
			return map[string]any{"incarnation": st.(*store.PGStore).Incarnation()}
		},
		expire: func(id string) {
			Expect(srv.Exec(context.Background(), fmt.Sprintf(
				"UPDATE %s.iac_sessions SET lease_expires = now() - interval '1 second' WHERE id = $1", schema), id)).To(Succeed())
		},
	}
})

func describeSharedSessions(name string, fresh func() sharedStores) bool {
	return Describe(name+": sessions shared with another process", func() {
		var (
			p      *scriptedProvider
			s      *sessionHarness
			stores sharedStores
			mine   store.Store
			cwd    string
		)
		BeforeEach(func() {
			p = &scriptedProvider{}
			stores = fresh()
			mine = stores.open()
			cwd = GinkgoT().TempDir()
		})
		AfterEach(func() { s.close() })

		start := func(cfg func(*Config)) *harness {
			s = newSessionHarnessOn(p, mine, cfg)
			return s.connect()
		}
		texts := func(call int) []string {
			var out []string
			for _, m := range p.requests()[call].Messages {
				out = append(out, m.TextOf())
			}
			return out
		}
		userEntry := func(text string) store.Entry {
			return store.MessageEntry(llm.Message{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: text}}})
		}
		assistantEntry := func(text string) store.Entry {
			return store.MessageEntry(llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockText, Text: text}}})
		}
		// openOnceReleased opens sid in other once the server's idle session
		// has let go of it.
		openOnceReleased := func(other store.Store, sid string) store.Session {
			GinkgoHelper()
			var o store.Session
			Eventually(func() error {
				var err error
				o, _, err = other.Open(sid)
				return err
			}, 5*time.Second, 10*time.Millisecond).Should(Succeed(), "the idle session is released")
			return o
		}
		inUseBy := func(e map[string]any, sid string, holder store.Store) {
			GinkgoHelper()
			Expect(e["code"]).To(Equal(float64(protocol.CodeSessionInUse)))
			Expect(e["message"]).To(ContainSubstring("Session is open in another iac-code process"))
			want := stores.holder(holder)
			want["reason"], want["sessionId"] = "session_in_use", sid
			Expect(e["data"]).To(Equal(want))
		}

		It("lets go of an idle session's store handle and reloads what another process wrote meanwhile", func() {
			h := start(func(c *Config) { c.SessionRelease = 50 * time.Millisecond })
			sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
			Expect(h.result(h.call("session/prompt", textPrompt(sid, "one")))["stopReason"]).To(Equal("end_turn"))

			other := stores.open()
			o := openOnceReleased(other, sid)
			Expect(o.Append(userEntry("from the other window"), assistantEntry("other answer"))).To(Succeed())
			Expect(o.Close()).To(Succeed())

			Expect(h.result(h.call("session/prompt", textPrompt(sid, "two")))["stopReason"]).To(Equal("end_turn"))
			Expect(texts(1)).To(Equal([]string{"one", "ok", "from the other window", "other answer", "two"}))

			h.result(h.call("session/close", map[string]any{"sessionId": sid}))
			_, es, err := other.Open(sid)
			Expect(err).NotTo(HaveOccurred())
			var seq []int64
			for _, e := range es {
				seq = append(seq, e.Seq)
			}
			Expect(seq).To(Equal([]int64{1, 2, 3, 4, 5, 6}))
		})

		It("answers requests for a session another process holds with -32010 naming it, and serves them once it is free", func() {
			h := start(func(c *Config) { c.SessionRelease = 50 * time.Millisecond })
			sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
			other := stores.open()
			o := openOnceReleased(other, sid)

			inUseBy(h.errorOf(h.call("session/prompt", textPrompt(sid, "mine?"))), sid, other)
			// a load on another connection of this process attaches to the
			// live session and meets the same holder
			h2 := s.connect()
			inUseBy(h2.errorOf(h2.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd})), sid, other)
			Expect(p.requests()).To(BeEmpty())

			Expect(o.Close()).To(Succeed())
			Expect(h.result(h.call("session/prompt", textPrompt(sid, "now")))["stopReason"]).To(Equal("end_turn"))
		})

		It("refuses to load a session held by another server, and the holder keeps it", func() {
			if stores.betweenTurns {
				Skip("a file store's holder lets go between turns (next spec)")
			}
			h := start(nil)
			sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)

			other := stores.open()
			b := newSessionHarnessOn(p, other, nil)
			defer b.close()
			hb := b.connect()
			for _, method := range []string{"session/load", "session/resume"} {
				inUseBy(hb.errorOf(hb.call(method, map[string]any{"sessionId": sid, "cwd": cwd})), sid, mine)
			}
			Expect(h.result(h.call("session/prompt", textPrompt(sid, "still mine")))["stopReason"]).To(Equal("end_turn"))
		})

		It("hands an idle session to another server at once, takes it back with that one's turn, and refuses it at once while a turn runs", func() {
			if !stores.betweenTurns {
				Skip("the shared store keeps a held session until handed over (cluster)")
			}
			h := start(nil)
			sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
			Expect(h.result(h.call("session/prompt", textPrompt(sid, "a1")))["stopReason"]).To(Equal("end_turn"))

			other := stores.open()
			b := newSessionHarnessOn(p, other, nil)
			defer b.close()
			hb := b.connect()
			began := time.Now()
			hb.result(hb.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))
			Expect(time.Since(began)).To(BeNumerically("<", time.Second))
			Expect(hb.result(hb.call("session/prompt", textPrompt(sid, "b1")))["stopReason"]).To(Equal("end_turn"))

			Expect(h.result(h.call("session/prompt", textPrompt(sid, "a2")))["stopReason"]).To(Equal("end_turn"))
			Expect(texts(2)).To(Equal([]string{"a1", "ok", "b1", "ok", "a2"}))

			gate := make(chan struct{})
			p.then(func(ctx context.Context, emit func(llm.Event)) error {
				<-gate
				return say("late")(ctx, emit)
			})
			running := h.call("session/prompt", textPrompt(sid, "a3"))
			Eventually(func() int { return len(p.requests()) }, 5*time.Second, 5*time.Millisecond).Should(Equal(4))
			began = time.Now()
			e := hb.errorOf(hb.call("session/prompt", textPrompt(sid, "b2")))
			Expect(time.Since(began)).To(BeNumerically("<", 500*time.Millisecond), "at once, not after the lock wait")
			Expect(e["code"]).To(Equal(float64(protocol.CodeSessionInUse)))
			Expect(e["message"]).To(ContainSubstring("a turn is running there"))
			Expect(e["data"]).To(HaveKeyWithValue("reason", "session_turn_running"))
			Expect(e["data"]).To(HaveKeyWithValue("pid", float64(os.Getpid())))
			close(gate)
			Expect(h.result(running)["stopReason"]).To(Equal("end_turn"))
		})

		It("answers a prompt whose writes were fenced with -32010 naming the new holder, writes nothing more, and takes the session back with what that one wrote", func() {
			if stores.expire == nil {
				Skip("no lease to lose: a held session is never taken over")
			}
			gate := make(chan struct{})
			p.then(say("one answer")).then(func(ctx context.Context, emit func(llm.Event)) error {
				select {
				case <-gate:
				case <-ctx.Done():
					return ctx.Err()
				}
				emit(llm.Event{Type: llm.EventTextDelta, Text: "late answer"})
				emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopEndTurn})
				return nil
			})
			h := start(nil)
			sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
			Expect(h.result(h.call("session/prompt", textPrompt(sid, "one")))["stopReason"]).To(Equal("end_turn"))

			// The second prompt is running when this process loses the
			// session: its lease lapses (a partition, a stall) and another
			// process takes it over.
			prompt := h.call("session/prompt", textPrompt(sid, "two"))
			Eventually(func() int { return len(p.requests()) }, 5*time.Second).Should(Equal(2))
			stores.expire(sid)
			other := stores.open()
			o, es, err := other.Open(sid)
			Expect(err).NotTo(HaveOccurred())
			Expect(es).To(HaveLen(3), "one, one answer, two")
			close(gate)

			e := h.errorOf(prompt)
			Expect(e["code"]).To(Equal(float64(protocol.CodeSessionInUse)))
			Expect(e["message"]).To(ContainSubstring("Session was taken over by another iac-code process"))
			want := stores.holder(other)
			want["reason"], want["sessionId"] = "session_taken_over", sid
			Expect(e["data"]).To(Equal(want))

			// While the other process holds it, requests are refused by name.
			inUseBy(h.errorOf(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"})), sid, other)
			inUseBy(h.errorOf(h.call("session/prompt", textPrompt(sid, "three?"))), sid, other)
			Expect(o.Append(assistantEntry("answered elsewhere"))).To(Succeed())
			Expect(o.Close()).To(Succeed())

			// Free again: the session comes back as the other process left it
			// ("late answer" was never written), and goes on after it.
			Expect(h.result(h.call("session/prompt", textPrompt(sid, "three")))["stopReason"]).To(Equal("end_turn"))
			Expect(texts(2)).To(Equal([]string{"one", "one answer", "two", "answered elsewhere", "three"}))
			h.result(h.call("session/close", map[string]any{"sessionId": sid}))
			_, es, err = other.Open(sid)
			Expect(err).NotTo(HaveOccurred())
			Expect(es).To(HaveLen(6))
		})
	})
}

var _ = Describe("connection limits and cancellation", func() {
	var (
		p   *scriptedProvider
		h   *harness
		cwd string
	)
	BeforeEach(func() {
		p = &scriptedProvider{}
		cwd = GinkgoT().TempDir()
	})
	AfterEach(func() { h.close() })

	It("caps live sessions per connection with -32011 until one is closed", func() {
		h = newHarnessWith(Config{MaxSessions: 2}, p)
		first := h.newSession(cwd)
		h.result(h.call("session/new", map[string]any{"cwd": cwd}))
		e := h.errorOf(h.call("session/new", map[string]any{"cwd": cwd}))
		Expect(e["code"]).To(Equal(float64(protocol.CodeLimit)))
		Expect(e["data"]).To(Equal(map[string]any{"reason": "too_many_sessions", "limit": 2.0}))
		Expect(h.errorOf(h.call("session/fork", map[string]any{"sessionId": first, "cwd": cwd}))["code"]).
			To(Equal(float64(protocol.CodeLimit)))
		// loading a session that is live here does not count twice
		h.result(h.call("session/load", map[string]any{"sessionId": first, "cwd": cwd}))
		h.result(h.call("session/close", map[string]any{"sessionId": first}))
		h.result(h.call("session/new", map[string]any{"cwd": cwd}))
	})

	It("cancels the prompt named by $/cancel_request; the prompt answers cancelled and an id form gets {}", func() {
		p.then(hangAfter("partial"))
		h = newHarness(p)
		sid := h.newSession(cwd)
		prompt := h.call("session/prompt", textPrompt(sid, "long"))
		Eventually(h.out.updates, 5*time.Second).ShouldNot(BeEmpty())
		// another id cancels nothing
		Expect(h.result(h.call("$/cancel_request", map[string]any{"requestId": 999}))).To(BeEmpty())
		Consistently(func() map[string]any { return h.out.response(prompt) }, 100*time.Millisecond).Should(BeNil())
		h.notify("$/cancel_request", map[string]any{"requestId": prompt})
		Expect(h.result(prompt)["stopReason"]).To(Equal("cancelled"))
		Expect(h.errorOf(h.call("$/cancel_request", map[string]any{}))["code"]).To(Equal(-32602.0))
		// the partial answer is kept
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "next")))["stopReason"]).To(Equal("end_turn"))
		var texts []string
		for _, m := range p.requests()[1].Messages {
			texts = append(texts, m.TextOf())
		}
		Expect(texts).To(Equal([]string{"long", "partial", "next"}))
	})

	It("matches $/cancel_request's requestId with the prompt's id as read, not as spelled: \"\\u0061\" cancels \"a\"", func() {
		p.then(hangAfter("partial"))
		h = newHarness(p)
		sid := h.newSession(cwd)
		params := protocol.MustMarshal(textPrompt(sid, "long"))
		h.conn.Deliver(&protocol.Message{JSONRPC: "2.0", ID: protocol.RawMessage(`"a"`), Method: "session/prompt", Params: params})
		answer := func() map[string]any {
			for _, f := range h.out.all() {
				if f["id"] == "a" && f["method"] == nil {
					return f
				}
			}
			return nil
		}
		Eventually(h.out.updates, 5*time.Second).ShouldNot(BeEmpty())
		h.conn.Deliver(&protocol.Message{JSONRPC: "2.0", Method: "$/cancel_request",
			Params: protocol.RawMessage(`{"requestId":"\u0041"}`)}) // "A": another id
		Consistently(answer, 100*time.Millisecond).Should(BeNil())
		h.conn.Deliver(&protocol.Message{JSONRPC: "2.0", Method: "$/cancel_request",
			Params: protocol.RawMessage(`{"requestId":"\u0061"}`)})
		Eventually(answer, 5*time.Second).ShouldNot(BeNil())
		Expect(answer()["result"]).To(HaveKeyWithValue("stopReason", "cancelled"))
	})

	It("cancels the connection's running turns on CancelTurns and keeps serving", func() {
		p.then(hangAfter("x"))
		h = newHarness(p)
		sid := h.newSession(cwd)
		prompt := h.call("session/prompt", textPrompt(sid, "long"))
		Eventually(h.out.updates, 5*time.Second).ShouldNot(BeEmpty())
		h.conn.CancelTurns()
		Expect(h.result(prompt)["stopReason"]).To(Equal("cancelled"))
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "again")))["stopReason"]).To(Equal("end_turn"))
	})
})
