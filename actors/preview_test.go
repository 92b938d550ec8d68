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

	"github.com/iac-code/iac-code/llm"
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

func (c countedCall) Preview() *tools.Diff {
	c.n.Add(1)
	if c.gate != nil {
		<-c.gate
	}
	return c.Call.(tools.Previewer).Preview()
}

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
