package actors

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools"
)

// countedPreviews is a real tool whose calls count their Preview (the file
// read for the permission request's diff).
type countedPreviews struct {
	tools.Tool
	n *atomic.Int32
	// gate, when set, holds every Preview until it is closed.
	gate chan struct{}
}

func (t countedPreviews) Prepare(env *tools.Env, input json.RawMessage) (tools.Call, error) {
	c, err := t.Tool.Prepare(env, input)
	if err != nil {
		return nil, err
	}
	return countedCall{c, t.n, t.gate}, nil
}

type countedCall struct {
	tools.Call
	n    *atomic.Int32
	gate chan struct{}
}

func (c countedCall) Preview(ctx context.Context, cl tools.Client) *tools.Diff {
	c.n.Add(1)
	if c.gate != nil {
		<-c.gate
	}
	return c.Call.(tools.Previewer).Preview(ctx, cl)
}

// panickyPreviews is a real tool whose calls panic reading their diff.
type panickyPreviews struct{ tools.Tool }

func (t panickyPreviews) Prepare(env *tools.Env, input json.RawMessage) (tools.Call, error) {
	c, err := t.Tool.Prepare(env, input)
	if err != nil {
		return nil, err
	}
	return panickyCall{c}, nil
}

type panickyCall struct{ tools.Call }

func (panickyCall) Preview(context.Context, tools.Client) *tools.Diff { panic("preview broke") }

// noDiff is a Previewer whose diff is empty.
type noDiff struct{}

func (noDiff) Preview(context.Context, tools.Client) *tools.Diff { return nil }

// callTools is a model answer calling the tools named in calls at once,
// each with its args.
func callTools(calls ...[3]string) func(context.Context, func(llm.Event)) error {
	return func(_ context.Context, emit func(llm.Event)) error {
		for i, c := range calls {
			emit(llm.Event{Type: llm.EventToolCallStart, Index: i, ID: c[0], Name: c[1]})
			emit(llm.Event{Type: llm.EventToolCallArgs, Index: i, ArgsDelta: c[2]})
			emit(llm.Event{Type: llm.EventToolCallEnd, Index: i})
		}
		emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopToolUse})
		return nil
	}
}

var _ = Describe("the diff of a write or an edit", func() {
	var (
		cwd      string
		previews *atomic.Int32
		p        *scriptedProvider
		h        *harness
		sid      string
	)
	BeforeEach(func() {
		cwd = GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(cwd, "a.txt"), []byte("one\n"), 0o644)).To(Succeed())
		previews = &atomic.Int32{}
		p = &scriptedProvider{}
		h = newHarness(p, countedPreviews{tools.EditFile{}, previews, nil}, countedPreviews{tools.WriteFile{}, previews, nil})
		DeferCleanup(h.close)
		sid = h.newSession(cwd)
	})
	edit := func(id, from, to string) [3]string {
		args, _ := json.Marshal(map[string]any{"path": "a.txt", "old_string": from, "new_string": to})
		return [3]string{id, "edit_file", string(args)}
	}
	write := func(id, content string) [3]string {
		args, _ := json.Marshal(map[string]any{"path": "b.txt", "content": content})
		return [3]string{id, "write_file", string(args)}
	}
	run := func(calls ...[3]string) float64 {
		p.then(callTools(calls...)).then(say("done"))
		return h.call("session/prompt", textPrompt(sid, "go"))
	}
	answerPermission := func(n int, option string) map[string]any {
		var req map[string]any
		Eventually(func() int { return len(h.out.requests("session/request_permission")) }, 5*time.Second).Should(BeNumerically(">=", n))
		req = h.out.requests("session/request_permission")[n-1]
		h.answer(req["id"], map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": option}})
		return req["params"].(map[string]any)["toolCall"].(map[string]any)
	}

	It("is read for the request the user is asked, and shown in it", func() {
		id := run(edit("e1", "one", "two"))
		toolCall := answerPermission(1, "allow_once")
		Expect(toolCall["content"]).To(ContainElement(And(HaveKeyWithValue("type", "diff"),
			HaveKeyWithValue("oldText", "one\n"), HaveKeyWithValue("newText", "two\n"))))
		Expect(h.result(id)).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(os.ReadFile(filepath.Join(cwd, "a.txt"))).To(Equal([]byte("two\n")))
		Expect(previews.Load()).To(BeEquivalentTo(1))
	})

	It("is not read when the mode lets the call through without asking", func() {
		for _, mode := range []string{"accept_edits", "bypass"} {
			h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": mode}))
			Expect(h.result(run(write("w-"+mode, mode)))).To(HaveKeyWithValue("stopReason", "end_turn"))
			Expect(os.ReadFile(filepath.Join(cwd, "b.txt"))).To(Equal([]byte(mode)))
		}
		Expect(h.out.requests("session/request_permission")).To(BeEmpty())
		Expect(previews.Load()).To(BeZero())
	})

	It("is not read for a call an always rule answers, nor for one queued behind the request that made the rule", func() {
		id := run(edit("e1", "one", "two"), write("w1", "x"), write("w2", "y"))
		// The three ask at once; one is asked, the others queue behind it.
		// Its always rule lets the calls of its tool through; the call of
		// the other tool is asked (its own diff read then).
		first := answerPermission(1, "allow_always")
		second := answerPermission(2, "allow_always")
		Expect([]any{first["toolCallId"], second["toolCallId"]}).To(ContainElement("e1"), "one request per tool")
		Expect(first["content"]).To(ContainElement(HaveKeyWithValue("type", "diff")))
		Expect(second["content"]).To(ContainElement(HaveKeyWithValue("type", "diff")))
		Expect(h.result(id)).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(h.out.requests("session/request_permission")).To(HaveLen(2))
		Expect(previews.Load()).To(BeEquivalentTo(2))

		Expect(h.result(run(edit("e2", "two", "three"), write("w3", "z")))).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(os.ReadFile(filepath.Join(cwd, "a.txt"))).To(Equal([]byte("three\n")))
		Expect(h.out.requests("session/request_permission")).To(HaveLen(2), "remembered: not asked again")
		Expect(previews.Load()).To(BeEquivalentTo(2))
	})

	It("is not asked when the turn is cancelled while it is read", func() {
		gate := make(chan struct{})
		g := newHarness(p, countedPreviews{tools.EditFile{}, previews, gate})
		defer g.close()
		sid := g.newSession(cwd)
		p.then(callTools(edit("e1", "one", "two"))).then(say("done"))
		id := g.call("session/prompt", textPrompt(sid, "go"))
		Eventually(previews.Load, 5*time.Second).Should(BeEquivalentTo(1), "the diff is being read")
		g.result(g.call("session/cancel", map[string]any{"sessionId": sid}))
		close(gate)
		Expect(g.result(id)).To(HaveKeyWithValue("stopReason", "cancelled"))
		Consistently(func() []map[string]any { return g.out.requests("session/request_permission") }, 100*time.Millisecond).
			Should(BeEmpty(), "no dialog for the ended turn")
		Expect(os.ReadFile(filepath.Join(cwd, "a.txt"))).To(Equal([]byte("one\n")))
	})

	It("is shown to a client that joins the session while it is read, in one request", func() {
		gate := make(chan struct{})
		s := newSessionHarness(p, GinkgoT().TempDir(), nil, countedPreviews{tools.EditFile{}, previews, gate})
		defer s.close()
		a, b := s.connect(), s.connect()
		sid := a.result(a.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))["sessionId"].(string)
		p.then(callTools(edit("e1", "one", "two"))).then(say("done"))
		id := a.call("session/prompt", textPrompt(sid, "go"))
		Eventually(previews.Load, 5*time.Second).Should(BeEquivalentTo(1), "the diff is being read")
		b.result(b.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
		close(gate)
		for _, x := range []*harness{a, b} {
			Eventually(func() int { return len(x.out.requests("session/request_permission")) }, 5*time.Second).Should(Equal(1))
			req := x.out.requests("session/request_permission")[0]
			Expect(req["params"].(map[string]any)["toolCall"].(map[string]any)["content"]).
				To(ContainElement(HaveKeyWithValue("type", "diff")))
		}
		a.answer(a.out.requests("session/request_permission")[0]["id"],
			map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}})
		Expect(a.result(id)).To(HaveKeyWithValue("stopReason", "end_turn"))
		Consistently(func() int { return len(b.out.requests("session/request_permission")) }, 100*time.Millisecond).Should(Equal(1))
	})
})

var _ = Describe("a permission request whose diff cannot be read", func() {
	It("is asked without the diff when reading it panics, and the requests behind it follow", func() {
		cwd := GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(cwd, "a.txt"), []byte("one\n"), 0o644)).To(Succeed())
		previews := &atomic.Int32{}
		p := &scriptedProvider{}
		h := newHarness(p, panickyPreviews{tools.EditFile{}}, countedPreviews{tools.WriteFile{}, previews, nil})
		defer h.close()
		sid := h.newSession(cwd)
		editArgs, _ := json.Marshal(map[string]any{"path": "a.txt", "old_string": "one", "new_string": "two"})
		writeArgs, _ := json.Marshal(map[string]any{"path": "b.txt", "content": "x"})
		p.then(callTools([3]string{"e1", "edit_file", string(editArgs)}, [3]string{"w1", "write_file", string(writeArgs)})).then(say("done"))
		id := h.call("session/prompt", textPrompt(sid, "go"))
		asked := map[any][]any{}
		for n := 1; n <= 2; n++ {
			Eventually(func() int { return len(h.out.requests("session/request_permission")) }, 5*time.Second).Should(BeNumerically(">=", n))
			req := h.out.requests("session/request_permission")[n-1]
			tc := req["params"].(map[string]any)["toolCall"].(map[string]any)
			content, _ := tc["content"].([]any)
			asked[tc["toolCallId"]] = content
			h.answer(req["id"], map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}})
		}
		Expect(h.result(id)).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(asked).To(HaveKey("e1"))
		Expect(asked["e1"]).NotTo(ContainElement(HaveKeyWithValue("type", "diff")), "asked without it")
		Expect(asked["w1"]).To(ContainElement(HaveKeyWithValue("type", "diff")))
		Expect(os.ReadFile(filepath.Join(cwd, "a.txt"))).To(Equal([]byte("two\n")), "the allowed edit ran")
		Expect(os.ReadFile(filepath.Join(cwd, "b.txt"))).To(Equal([]byte("x")))
	})

	It("lets the requests behind it go on when the tool's actor stops before it answers (a crash, a sub-agent's turn ending)", func() {
		h := newHarness(&scriptedProvider{})
		defer h.close()
		sid := h.newSession(GinkgoT().TempDir())
		root := h.srv.sys.Root
		session := actor.NewPID(h.srv.sys.Address(), sessionActorName(sid))
		// The stand-in of a tool's actor that dies reading its diff.
		dying := root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			if _, ok := ctx.Message().(*previewWanted); ok {
				ctx.Stop(ctx.Self())
			}
		}))
		decided := make(chan *permissionDecision, 1)
		waiting := root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			if d, ok := ctx.Message().(*permissionDecision); ok {
				decided <- d
			}
		}))
		ask := func(id string, replyTo *actor.PID, preview tools.Previewer) *permissionAsk {
			return &permissionAsk{toolName: "edit_file", key: "edit_file", kind: tools.KindEdit, replyTo: replyTo, preview: preview,
				toolCall: protocol.ToolCallUpdate{ToolCallID: id, Title: "edit " + id, Kind: string(tools.KindEdit), Status: protocol.ToolPending}}
		}
		root.Send(session, ask("first", dying, noDiff{}))
		root.Send(session, ask("second", waiting, nil))
		Eventually(func() int { return len(h.out.requests("session/request_permission")) }, 5*time.Second).Should(Equal(1))
		req := h.out.requests("session/request_permission")[0]
		Expect(req["params"].(map[string]any)["toolCall"]).To(HaveKeyWithValue("toolCallId", "second"))
		h.answer(req["id"], map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}})
		var d *permissionDecision
		Eventually(decided, 5*time.Second).Should(Receive(&d))
		Expect(d.allow).To(BeTrue())
	})
})
