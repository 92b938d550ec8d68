package actors

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
)

var _ = Describe("plans (todo_write)", func() {
	var (
		h   *harness
		p   *scriptedProvider
		sid string
		cwd string
	)
	AfterEach(func() { h.close() })
	todos := `{"todos":[{"content":"Read","status":"completed","priority":"high"},{"content":"Write","status":"in_progress"}]}`
	want := map[string]any{"sessionUpdate": "plan", "entries": []any{
		map[string]any{"content": "Read", "priority": "high", "status": "completed"},
		map[string]any{"content": "Write", "priority": "medium", "status": "in_progress"},
	}}

	DescribeTable("sends the whole list as a plan update without asking, and replays it on load",
		func(mode string) {
			p = &scriptedProvider{}
			p.then(callTool("t1", "todo_write", todos)).then(say("planned"))
			cwd = GinkgoT().TempDir()
			h = newHarness(p, tools.Builtin()...)
			sid = h.newSession(cwd)
			h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": mode}))
			id := h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "plan it"}}})
			Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
			Expect(h.out.requests("session/request_permission")).To(BeEmpty())

			var kinds []any
			for _, u := range h.out.updates() {
				if u["toolCallId"] == "t1" || u["sessionUpdate"] == "plan" {
					kinds = append(kinds, []any{u["sessionUpdate"], u["status"]})
				}
			}
			Expect(kinds).To(Equal([]any{[]any{"tool_call", "pending"}, []any{"tool_call_update", "in_progress"},
				[]any{"plan", nil}, []any{"tool_call_update", "completed"}}))
			Expect(h.out.updates()).To(ContainElement(Equal(want)))
			Expect(h.out.updates()).To(ContainElement(And(HaveKeyWithValue("sessionUpdate", "tool_call"),
				HaveKeyWithValue("kind", "think"), HaveKeyWithValue("title", "Update the plan (2 tasks)"))))

			before := len(h.out.allUpdates())
			h.result(h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
			Expect(h.out.allUpdates()[before:]).To(ContainElement(Equal(want)))
		},
		Entry("default mode", "default"),
		Entry("plan mode (read-only tools)", "plan"),
	)
})
