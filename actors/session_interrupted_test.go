package actors

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
)

var _ = Describe("a turn whose process died (a stale running-turn mark)", func() {
	var (
		root, cwd string
		started   = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	)
	// killedMidTurn leaves session sid as a process killed with -9 during
	// its second turn leaves it: the prompt, a completed bash call, a
	// second one started without its result, the lock file's mark.
	killedMidTurn := func(sid string) {
		st, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		s, err := st.Create(store.Meta{ID: sid, Cwd: cwd, Mode: "default"})
		Expect(err).NotTo(HaveOccurred())
		text := func(role llm.Role, t string) store.Entry {
			return store.MessageEntry(llm.Message{Role: role, Content: []llm.Block{{Type: llm.BlockText, Text: t}}})
		}
		call := func(id string) store.Entry {
			return store.MessageEntry(llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockToolUse,
				ToolCallID: id, Name: "bash", Input: []byte(`{"command":"echo ` + id + ` >> steps"}`)}}})
		}
		Expect(s.Append(text(llm.RoleUser, "first"), text(llm.RoleAssistant, "done"), text(llm.RoleUser, "append two lines"),
			call("b1"), store.MessageEntry(llm.Message{Role: llm.RoleTool, Content: []llm.Block{{Type: llm.BlockToolResult,
				ToolCallID: "b1", Name: "bash", Text: "[exit code: 0]"}}}), call("b2"))).To(Succeed())
		Expect(s.(store.TurnRecorder).RecordTurn(&store.RunningTurn{StartedAt: started, PromptRequest: []byte(`"p-2"`), FirstSeq: 3})).To(Succeed())
		lock := filepath.Join(root, "sessions", sid, "lock")
		left, err := os.ReadFile(lock)
		Expect(err).NotTo(HaveOccurred())
		Expect(s.Close()).To(Succeed())
		Expect(os.WriteFile(lock, left, 0o600)).To(Succeed()) // the lines stay, the lock goes
		Expect(st.Close()).To(Succeed())
	}
	history := func(sid string) []store.Entry {
		st, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		defer st.Close()
		s, es, err := st.Open(sid)
		Expect(err).NotTo(HaveOccurred())
		Expect(s.Close()).To(Succeed())
		return es
	}
	BeforeEach(func() { root, cwd = GinkgoT().TempDir(), GinkgoT().TempDir() })

	It("is recorded once on load, shown as activeTurn interrupted until the next turn starts, and told to the model", func() {
		killedMidTurn("s1")
		p := &scriptedProvider{}
		st, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		h := newHarnessOn(st, Config{}, p)
		DeferCleanup(h.close)
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))

		By("the list does not show it before anyone loaded it")
		listed := func() any {
			for _, e := range h.result(h.call("session/list", map[string]any{}))["sessions"].([]any) {
				if e := e.(map[string]any); e["sessionId"] == "s1" {
					meta, _ := e["_meta"].(map[string]any)
					return meta["activeTurn"]
				}
			}
			return nil
		}
		want := map[string]any{"state": "interrupted", "startedAt": "2026-12-01T10:00:00Z", "promptRequest": "p-2"}
		Expect(listed()).To(BeNil(), "a turn left recorded shows once recorded as interrupted")

		By("load: the answer says so, the replay shows the interrupted call failed and the record")
		res := h.result(h.call("session/load", map[string]any{"sessionId": "s1", "cwd": cwd, "mcpServers": []any{}}))
		Expect(res["_meta"]).To(HaveKeyWithValue("activeTurn", want))
		Expect(h.srv.Metrics().TurnsInterrupted.Load()).To(Equal(int64(1)))
		ups := h.out.updates()
		Expect(ups[len(ups)-2]).To(And(HaveKeyWithValue("toolCallId", "b2"), HaveKeyWithValue("status", "failed")))
		Expect(ups[len(ups)-1]).To(HaveKeyWithValue("sessionUpdate", "agent_message_chunk"))
		Expect(ups[len(ups)-1]["content"]).To(HaveKeyWithValue("text", interruptedReplayText))
		Expect(listed()).To(Equal(want))

		By("the history: b2's interrupted result, then the record; the lock's mark is gone")
		h.result(h.call("session/close", map[string]any{"sessionId": "s1"}))
		es := history("s1")
		Expect(es).To(HaveLen(8))
		Expect(es[6].Message.Content[0]).To(And(HaveField("ToolCallID", "b2"), HaveField("Text", store.InterruptedText), HaveField("IsError", true)))
		Expect(es[7].Kind).To(Equal(store.KindInterrupted))
		Expect(es[7].Turn).To(Equal(&store.InterruptedTurn{StartedAt: started, PromptRequest: []byte(`"p-2"`)}))
		note := es[7].Message.TextOf()
		Expect(note).To(ContainSubstring("bash (b1)"))
		Expect(note).To(ContainSubstring("cut midway or never finished: bash (b2)"))
		Expect(note).To(ContainSubstring("not run again"))
		lock, err := os.ReadFile(filepath.Join(root, "sessions", "s1", "lock"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(lock)).NotTo(ContainSubstring("turn"))
		Expect(string(lock)).NotTo(ContainSubstring("stale"))

		By("loaded again: not recorded twice, still shown")
		res = h.result(h.call("session/load", map[string]any{"sessionId": "s1", "cwd": cwd, "mcpServers": []any{}}))
		Expect(res["_meta"]).To(HaveKeyWithValue("activeTurn", want))
		Expect(h.srv.Metrics().TurnsInterrupted.Load()).To(Equal(int64(1)), "counted once")
		Expect(h.result(h.call("session/resume", map[string]any{"sessionId": "s1", "cwd": cwd}))["_meta"]).To(HaveKeyWithValue("activeTurn", want))

		By("the next prompt: the model gets both results, then the record, then the prompt; no interrupted turn any more")
		h.result(h.call("session/prompt", map[string]any{"sessionId": "s1", "prompt": []any{map[string]any{"type": "text", "text": "go on"}}}))
		reqs := p.requests()
		msgs := reqs[len(reqs)-1].Messages
		roles := make([]llm.Role, len(msgs))
		for i := range msgs {
			roles[i] = msgs[i].Role
		}
		Expect(roles).To(Equal([]llm.Role{llm.RoleUser, llm.RoleAssistant, llm.RoleUser, llm.RoleAssistant, llm.RoleTool,
			llm.RoleAssistant, llm.RoleTool, llm.RoleUser, llm.RoleUser}))
		Expect(msgs[7].TextOf()).To(Equal(note))
		Expect(listed()).To(BeNil())
		h.result(h.call("session/close", map[string]any{"sessionId": "s1"}))
		n := 0
		for _, e := range history("s1") {
			if e.Kind == store.KindInterrupted {
				n++
			}
		}
		Expect(n).To(Equal(1))
	})

	It("is told as a notice, after the load or resume answer, to a client that shows notices; not to one that does not", func() {
		killedMidTurn("s1")
		st, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		h := newHarnessOn(st, Config{}, &scriptedProvider{})
		DeferCleanup(h.close)
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1,
			"clientCapabilities": map[string]any{"session": map[string]any{"notices": map[string]any{}}}}))
		notices := func() []map[string]any {
			var out []map[string]any
			for _, u := range h.out.updates() {
				if u["sessionUpdate"] == "notice" {
					out = append(out, u)
				}
			}
			return out
		}
		h.result(h.call("session/load", map[string]any{"sessionId": "s1", "cwd": cwd, "mcpServers": []any{}}))
		Eventually(notices).Should(HaveLen(1))
		Expect(notices()[0]).To(And(HaveKeyWithValue("severity", "warning"), HaveKeyWithValue("title", "The last turn was interrupted"),
			HaveKeyWithValue("description", ContainSubstring("started 2026-12-01T10:00:00Z"))))
		h.result(h.call("session/resume", map[string]any{"sessionId": "s1", "cwd": cwd}))
		Eventually(notices).Should(HaveLen(2), "told again at a resume, as activeTurn is")

		By("a client without the capability gets the activeTurn only")
		plain := newHarnessOn(st, Config{}, &scriptedProvider{})
		DeferCleanup(plain.close)
		plain.result(plain.call("initialize", map[string]any{"protocolVersion": 1}))
		h.result(h.call("session/close", map[string]any{"sessionId": "s1"}))
		res := plain.result(plain.call("session/load", map[string]any{"sessionId": "s1", "cwd": cwd, "mcpServers": []any{}}))
		Expect(res["_meta"]).To(HaveKeyWithValue("activeTurn", HaveKeyWithValue("state", "interrupted")))
		Consistently(func() []map[string]any { return plain.out.updates() }, 200*time.Millisecond).ShouldNot(
			ContainElement(HaveKeyWithValue("sessionUpdate", "notice")))
	})

	It("is recorded once when the recording process died before clearing the mark", func() {
		killedMidTurn("s1")
		st, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		s, es, err := st.Open("s1")
		Expect(err).NotTo(HaveOccurred())
		es, _, err = store.RepairSession(s, es)
		Expect(err).NotTo(HaveOccurred())
		turn := s.(store.TurnKeeper).PriorTurn().Interrupted()
		Expect(s.Append(store.InterruptedEntry(turn, interruptedNote(es, turn)))).To(Succeed())
		lock := filepath.Join(root, "sessions", "s1", "lock")
		left, err := os.ReadFile(lock)
		Expect(err).NotTo(HaveOccurred())
		Expect(s.Close()).To(Succeed())
		Expect(os.WriteFile(lock, left, 0o600)).To(Succeed()) // killed here: the turn stays recorded
		Expect(st.Close()).To(Succeed())

		st2, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		h := newHarnessOn(st2, Config{}, &scriptedProvider{})
		DeferCleanup(h.close)
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))
		res := h.result(h.call("session/load", map[string]any{"sessionId": "s1", "cwd": cwd, "mcpServers": []any{}}))
		Expect(res["_meta"]).To(HaveKeyWithValue("activeTurn", HaveKeyWithValue("state", "interrupted")))
		h.result(h.call("session/close", map[string]any{"sessionId": "s1"}))
		var kinds []string
		for _, e := range history("s1") {
			kinds = append(kinds, string(e.Kind))
		}
		Expect(strings.Count(strings.Join(kinds, " "), "interrupted")).To(Equal(1))
	})
})
