package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
)

// Durable turns (issue 29): a turn pauses at its next step boundary
// (Server.PauseTurns) and another server over the same store resumes it
// (Server.Adopt). The model is the scripted HTTP server, the tool the real
// bash tool, whose side effects (a line appended to a file per step) are
// counted.

var _ = describeDurableTurns("FileStore", durableFileStores)

var _ = describeDurableTurns("PGStore", durablePGStores)

// durableFileStores are file stores on one root (dir).
func durableFileStores() sharedStores {
	root := GinkgoT().TempDir()
	return sharedStores{dir: root, open: func() store.Store {
		st, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		return st
	}}
}

// durablePGStores are stores on one PostgreSQL schema, whose leases last
// unless a spec expires them.
func durablePGStores() sharedStores {
	srv := requirePG()
	schema, dbURL, err := srv.NewSchema()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(srv.DropSchema, schema)
	return sharedStores{
		open: func() store.Store {
			st, err := store.NewPostgres(dbURL, store.WithLeaseTTL(time.Hour), store.WithLeaseRenew(30*time.Minute))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(st.Close)
			return st
		},
		expire: func(id string) {
			Expect(srv.Exec(context.Background(), fmt.Sprintf(
				"UPDATE %s.iac_sessions SET lease_expires = now() - interval '1 second' WHERE id = $1", schema), id)).To(Succeed())
		},
	}
}

// durableServer is a server over st whose model is the scripted server m
// and whose one tool is bash.
func durableServer(st store.Store, m *llmtest.Server) *Server {
	p, err := llm.New(llm.Config{BaseURL: m.URL(), APIKey: "k", Model: "m", Retry: llm.RetryPolicy{Attempts: 1}})
	Expect(err).NotTo(HaveOccurred())
	srv := NewServer(Deps{
		Store:    st,
		Config:   Config{Version: "test", LLM: llm.Config{APIKey: "k", Model: "m"}},
		Provider: p,
		Tools:    tools.NewRegistry(tools.Bash{}),
		Log:      zerolog.New(GinkgoWriter).Level(zerolog.WarnLevel),
	})
	DeferCleanup(srv.Shutdown)
	return srv
}

// connectTo opens an initialized connection to srv.
func connectTo(srv *Server) *harness {
	out := &recorder{}
	h := &harness{srv: srv, conn: srv.Connect(out), out: out}
	h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))
	return h
}

func describeDurableTurns(name string, fresh func() sharedStores) bool {
	return Describe(name+": durable turns", func() {
		var (
			stores sharedStores
			open   func() store.Store
			model  *llmtest.Server
			a      *Server
			h      *harness
			cwd    string
			log    string
		)
		BeforeEach(func() {
			stores = fresh()
			open = stores.open
			model = llmtest.NewServer()
			DeferCleanup(model.Close)
			a = durableServer(open(), model)
			h = connectTo(a)
			cwd = GinkgoT().TempDir()
			log = filepath.Join(GinkgoT().TempDir(), "steps")
		})

		// step is a bash call appending line to the log (then sleeping).
		step := func(id, line string, sleep float64) llmtest.ToolCall {
			cmd := "echo " + line + " >> " + log
			if sleep > 0 {
				cmd += fmt.Sprintf("; sleep %g", sleep)
			}
			args, _ := json.Marshal(map[string]string{"command": cmd})
			return llmtest.ToolCall{ID: id, Name: "bash", Arguments: string(args)}
		}
		lines := func() []string {
			data, err := os.ReadFile(log)
			if os.IsNotExist(err) {
				return nil
			}
			Expect(err).NotTo(HaveOccurred())
			return strings.Fields(string(data))
		}
		newSession := func(mode string) string {
			sid := h.result(h.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))["sessionId"].(string)
			if mode != "" {
				h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": mode}))
			}
			return sid
		}
		pause := func(d time.Duration) []string {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			return a.PauseTurns(ctx, nil)
		}
		// left reads the session from the store as the next holder finds
		// it: its history, and the turn left recorded in it.
		left := func(sid string) ([]store.Entry, *store.RunningTurn) {
			GinkgoHelper()
			o, es, err := open().Open(sid)
			Expect(err).NotTo(HaveOccurred(), "the paused session's lease is free")
			prior := o.(store.TurnKeeper).PriorTurn()
			Expect(o.(store.TurnKeeper).Pause()).To(Succeed(), "let go of keeping the turn")
			Expect(o.Close()).To(Succeed())
			return es, prior
		}
		kinds := func(es []store.Entry, from int64) []string {
			var out []string
			for _, e := range es {
				if e.Seq >= from {
					out = append(out, string(e.Kind)+":"+string(e.Message.Role)+":"+e.CallID)
				}
			}
			return out
		}
		chunkSeen := func() bool {
			for _, u := range h.out.allUpdates() {
				if u["sessionUpdate"] == "agent_message_chunk" {
					return true
				}
			}
			return false
		}
		toolStatus := func(id, status string) func() bool {
			return func() bool {
				for _, u := range h.out.allUpdates() {
					if u["toolCallId"] == id && u["status"] == status {
						return true
					}
				}
				return false
			}
		}

		It("pauses mid model reply: the reply is recorded when it ends, its calls are not started, the lease is let go of keeping the turn", func() {
			sid := newSession("bypass")
			model.Script(llmtest.Reply{Text: "I will run the first step now", Split: 8, Delay: 60 * time.Millisecond,
				ToolCalls: []llmtest.ToolCall{step("c1", "one", 0)}})
			id := h.call("session/prompt", textPrompt(sid, "run the steps"))
			Eventually(chunkSeen, 5*time.Second, 5*time.Millisecond).Should(BeTrue())

			Expect(pause(10 * time.Second)).To(Equal([]string{sid}))
			Consistently(func() map[string]any { return h.out.response(id) }, 300*time.Millisecond).Should(BeNil(), "the prompt is not answered")
			Expect(lines()).To(BeEmpty(), "no tool started")
			Expect(model.Requests()).To(HaveLen(1))
			Expect(toolUpdates(h, "tool_call", "c1")).To(Equal(1), "its calls announced by the holder that recorded them")

			es, prior := left(sid)
			Expect(prior).NotTo(BeNil(), "the turn stays recorded")
			Expect(string(prior.PromptRequest)).To(Equal(itoa(int(id))))
			Expect(prior.Conn).To(Equal(h.conn.ID))
			Expect(prior.ID).NotTo(BeEmpty())
			Expect(kinds(es, prior.FirstSeq)).To(Equal([]string{"message:user:", "message:assistant:"}))
			next := store.NextStep(es, prior.FirstSeq)
			Expect(next.Call).NotTo(BeNil())
			Expect(next.Results).To(BeEmpty())
			Expect(next.Started).To(BeEmpty())
			Expect(next.Call.TextOf()).To(Equal("I will run the first step now"))
			Expect(a.Metrics().TurnsPaused.Load()).To(Equal(int64(1)))
		})

		It("pauses while a tool runs: the tool ends, its result is recorded, the model is not asked again", func() {
			sid := newSession("bypass")
			model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c1", "one", 0.5)}}, llmtest.Reply{Text: "never asked"})
			id := h.call("session/prompt", textPrompt(sid, "run the steps"))
			Eventually(toolStatus("c1", "in_progress"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())

			Expect(pause(10 * time.Second)).To(Equal([]string{sid}))
			Expect(lines()).To(Equal([]string{"one"}))
			Expect(model.Requests()).To(HaveLen(1))
			Expect(h.out.response(id)).To(BeNil())

			es, prior := left(sid)
			Expect(prior).NotTo(BeNil())
			Expect(kinds(es, prior.FirstSeq)).To(Equal([]string{"message:user:", "message:assistant:", "tool_start::c1", "tool_result:tool:c1"}))
			Expect(store.NextStep(es, prior.FirstSeq).Ask).To(BeTrue())
		})

		It("cuts a turn still mid-step at the deadline: the cut reply is not recorded, the turn is paused anyway", func() {
			sid := newSession("bypass")
			model.Script(llmtest.Reply{Text: "a long answer that never ends", Hang: true, AfterChunks: 3})
			id := h.call("session/prompt", textPrompt(sid, "run the steps"))
			Eventually(chunkSeen, 5*time.Second, 5*time.Millisecond).Should(BeTrue())

			start := time.Now()
			Expect(pause(300 * time.Millisecond)).To(Equal([]string{sid}))
			Expect(time.Since(start)).To(BeNumerically("<", 3*time.Second))
			Expect(h.out.response(id)).To(BeNil())

			es, prior := left(sid)
			Expect(prior).NotTo(BeNil())
			Expect(kinds(es, prior.FirstSeq)).To(Equal([]string{"message:user:"}))
			Expect(store.NextStep(es, prior.FirstSeq).Ask).To(BeTrue())
		})

		It("lets go of a call still waiting for its permission: it never started, its request is withdrawn", func() {
			sid := newSession("")
			model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c1", "one", 0)}})
			h.call("session/prompt", textPrompt(sid, "run the steps"))
			Eventually(func() int { return len(h.out.requests("session/request_permission")) }, 5*time.Second, 5*time.Millisecond).Should(Equal(1))

			start := time.Now()
			Expect(pause(10 * time.Second)).To(Equal([]string{sid}))
			Expect(time.Since(start)).To(BeNumerically("<", 3*time.Second), "the pause does not wait for the answer")
			Eventually(func() []map[string]any {
				var out []map[string]any
				for _, f := range h.out.all() {
					if f["method"] == "$/cancel_request" {
						out = append(out, f)
					}
				}
				return out
			}).Should(HaveLen(1))
			Expect(lines()).To(BeEmpty())

			es, prior := left(sid)
			Expect(prior).NotTo(BeNil())
			Expect(kinds(es, prior.FirstSeq)).To(Equal([]string{"message:user:", "message:assistant:"}))
			next := store.NextStep(es, prior.FirstSeq)
			Expect(next.Call).NotTo(BeNil())
			Expect(next.Started).To(BeEmpty())
		})

		It("lets a turn whose reply has no calls end as usual: answered, not listed", func() {
			sid := newSession("bypass")
			model.Script(llmtest.Reply{Text: "the whole answer in a few words", Split: 6, Delay: 60 * time.Millisecond})
			id := h.call("session/prompt", textPrompt(sid, "say it"))
			Eventually(chunkSeen, 5*time.Second, 5*time.Millisecond).Should(BeTrue())

			Expect(pause(10 * time.Second)).To(BeEmpty())
			Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
			_, prior := left(sid)
			Expect(prior).To(BeNil())
		})

		// ended waits until the session is let go of with its turn over,
		// and returns its history from the turn's first entry.
		ended := func(sid string, first int64) []store.Entry {
			GinkgoHelper()
			var es []store.Entry
			Eventually(func(g Gomega) {
				o, all, err := open().Open(sid)
				g.Expect(err).NotTo(HaveOccurred())
				prior := o.(store.TurnKeeper).PriorTurn()
				g.Expect(o.Close()).To(Succeed())
				g.Expect(prior).To(BeNil(), "the turn's end cleared its mark")
				es = all
			}, 15*time.Second, 50*time.Millisecond).Should(Succeed())
			var out []store.Entry
			for _, e := range es {
				if e.Seq >= first {
					out = append(out, e)
				}
			}
			return out
		}
		results := func(req llmtest.RecordedRequest) map[string]string {
			out := map[string]string{}
			for _, r := range req.ToolResults() {
				out[r.ID] = r.Content
			}
			return out
		}

		It("is adopted by another server, which goes on from the history to end_turn: a completed call is not run again, the model streams never overlap", func() {
			sid := newSession("bypass")
			model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c1", "one", 0.4)}},
				llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c2", "two", 0)}},
				llmtest.Reply{Text: "all done"})
			h.call("session/prompt", textPrompt(sid, "run the steps"))
			Eventually(toolStatus("c1", "in_progress"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())
			Expect(pause(10 * time.Second)).To(Equal([]string{sid}))
			_, prior := left(sid)

			b := durableServer(open(), model)
			Expect(b.Adopt(sid)).To(Succeed())
			es := ended(sid, prior.FirstSeq)
			Expect(lines()).To(Equal([]string{"one", "two"}), "each step ran once")
			reqs := model.Requests()
			Expect(reqs).To(HaveLen(3))
			Expect(results(reqs[1])).To(HaveKey("c1"))
			Expect(results(reqs[2])).To(HaveKey("c2"))
			Expect(model.MaxConcurrent()).To(Equal(int64(1)))
			last := es[len(es)-1]
			Expect(last.Message.Role).To(Equal(llm.RoleAssistant))
			Expect(last.Message.TextOf()).To(Equal("all done"))
			Expect(b.Metrics().TurnsResumed.Load()).To(Equal(int64(1)))
		})

		It("runs the calls a pause let go of before they started: asked again of a client that attaches", func() {
			sid := newSession("")
			model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c1", "one", 0)}}, llmtest.Reply{Text: "done"})
			id := h.call("session/prompt", textPrompt(sid, "run the steps"))
			Eventually(func() int { return len(h.out.requests("session/request_permission")) }, 5*time.Second, 5*time.Millisecond).Should(Equal(1))
			Expect(pause(10 * time.Second)).To(Equal([]string{sid}))

			By("adopted by the same server, where the prompt's connection is")
			Expect(a.Adopt(sid)).To(Succeed())
			Consistently(lines, 200*time.Millisecond).Should(BeEmpty(), "it waits for a client to answer")
			loaded := h.result(h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
			Expect(loaded["_meta"]).To(HaveKeyWithValue("activeTurn", HaveKeyWithValue("state", "running")), "the load shows the resumed turn running")
			Eventually(func() int { return len(h.out.requests("session/request_permission")) }, 5*time.Second, 5*time.Millisecond).Should(Equal(2))
			ask := h.out.requests("session/request_permission")[1]
			h.answer(ask["id"], map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}})
			Expect(h.result(id)["stopReason"]).To(Equal("end_turn"), "answered on its connection, here")
			Expect(lines()).To(Equal([]string{"one"}))
		})

		It("reports a call cut midway as cut, and never runs it again", func() {
			sid := newSession("bypass")
			model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c1", "one", 5)}}, llmtest.Reply{Text: "noted"})
			h.call("session/prompt", textPrompt(sid, "run the steps"))
			Eventually(lines, 5*time.Second, 5*time.Millisecond).Should(Equal([]string{"one"}))
			Expect(pause(200 * time.Millisecond)).To(Equal([]string{sid}))
			_, prior := left(sid)

			b := durableServer(open(), model)
			Expect(b.Adopt(sid)).To(Succeed())
			es := ended(sid, prior.FirstSeq)
			reqs := model.Requests()
			Expect(reqs).To(HaveLen(2))
			Expect(results(reqs[1])).To(HaveKeyWithValue("c1", store.ToolCutText))
			Expect(lines()).To(Equal([]string{"one"}))
			Expect(model.MaxConcurrent()).To(Equal(int64(1)))
			Expect(es[len(es)-1].Message.TextOf()).To(Equal("noted"))
		})

		It("asks the model again for a reply cut before it was recorded", func() {
			sid := newSession("bypass")
			model.Script(llmtest.Reply{Text: "an answer cut midway", Hang: true, AfterChunks: 3}, llmtest.Reply{Text: "the whole answer"})
			h.call("session/prompt", textPrompt(sid, "answer"))
			Eventually(chunkSeen, 5*time.Second, 5*time.Millisecond).Should(BeTrue())
			Expect(pause(200 * time.Millisecond)).To(Equal([]string{sid}))
			_, prior := left(sid)

			b := durableServer(open(), model)
			Expect(b.Adopt(sid)).To(Succeed())
			es := ended(sid, prior.FirstSeq)
			Expect(kinds(es, 0)).To(Equal([]string{"message:user:", "message:assistant:"}))
			Expect(es[1].Message.TextOf()).To(Equal("the whole answer"))
			Expect(model.Requests()[1].Chat.Messages[len(model.Requests()[1].Chat.Messages)-1].Text()).To(Equal("answer"))
		})

		It("fails to adopt a session a live holder has: ErrInUse", func() {
			sid := newSession("bypass")
			model.Script(llmtest.Reply{Text: "still going", Hang: true, AfterChunks: 2})
			id := h.call("session/prompt", textPrompt(sid, "answer"))
			Eventually(chunkSeen, 5*time.Second, 5*time.Millisecond).Should(BeTrue())

			b := durableServer(open(), model)
			err := b.Adopt(sid)
			Expect(errors.Is(err, store.ErrInUse)).To(BeTrue(), "%v", err)
			var inUse *store.InUseError
			Expect(errors.As(err, &inUse)).To(BeTrue())
			h.notify("session/cancel", map[string]any{"sessionId": sid})
			Expect(h.result(id)["stopReason"]).To(Equal("cancelled"))
		})

		It("adopts a session with no turn left and lets go of it again", func() {
			sid := newSession("bypass")
			h.result(h.call("session/close", map[string]any{"sessionId": sid}))
			b := durableServer(open(), model)
			Expect(b.Adopt(sid)).To(Succeed())
			Expect(b.Metrics().TurnsResumed.Load()).To(BeZero())
			ended(sid, 0)
		})

		It("refuses the late writes of a holder whose lease lapsed: the turn goes on once, at the new holder", func() {
			if stores.expire == nil {
				Skip("the file store has no lease to lapse")
			}
			sid := newSession("bypass")
			model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c1", "one", 1)}}, llmtest.Reply{Text: "noted"})
			id := h.call("session/prompt", textPrompt(sid, "run the steps"))
			Eventually(lines, 5*time.Second, 5*time.Millisecond).Should(Equal([]string{"one"}))
			stores.expire(sid)

			b := durableServer(open(), model)
			Expect(b.Adopt(sid)).To(Succeed())
			Expect(h.errorOf(id)["code"]).To(Equal(float64(protocol.CodeSessionInUse)), "the old holder's result was refused")
			es := ended(sid, 0)
			var c1 []string
			for _, e := range es {
				for _, bl := range e.Message.Content {
					if bl.Type == llm.BlockToolResult && bl.ToolCallID == "c1" {
						c1 = append(c1, bl.Text)
					}
				}
			}
			Expect(c1).To(Equal([]string{store.ToolCutText}), "one result: the new holder's")
			Expect(model.Requests()).To(HaveLen(2))
			Expect(model.MaxConcurrent()).To(Equal(int64(1)))
			Expect(lines()).To(Equal([]string{"one"}))
		})
	})
}
