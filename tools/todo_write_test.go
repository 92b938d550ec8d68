package tools_test

import (
	"errors"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
)

var _ = Describe("todo_write", func() {
	env := &tools.Env{Cwd: "/work/proj"}

	It("reports the whole list as a plan, priority medium by default, and tells the model where it stands", func() {
		c, err := tools.TodoWrite{}.Prepare(env, raw(map[string]any{"todos": []any{
			map[string]any{"content": "Read the config", "status": "completed", "priority": "high"},
			map[string]any{"content": "Change\nthe handler", "status": "in_progress"},
			map[string]any{"content": "Run the tests", "status": "pending", "priority": "low"},
		}}))
		Expect(err).NotTo(HaveOccurred())
		Expect(c.Title()).To(Equal("Update the plan (3 tasks)"))
		Expect(c.Access().Local()).To(BeTrue())
		res := c.Run(ctx(), nil)
		Expect(res.IsError).To(BeFalse())
		Expect(res.Plan.Entries).To(Equal([]tools.PlanEntry{
			{Content: "Read the config", Status: "completed", Priority: "high"},
			{Content: "Change the handler", Status: "in_progress", Priority: "medium"},
			{Content: "Run the tests", Status: "pending", Priority: "low"},
		}))
		Expect(res.Output).To(Equal("Plan updated: 3 tasks (1 completed, 1 in progress, 1 pending).\n" +
			"[x] Read the config (high)\n[~] Change the handler (medium)\n[ ] Run the tests (low)"))
	})

	It("clears the plan with an empty list", func() {
		res := run(tools.TodoWrite{}, env, map[string]any{"todos": []any{}})
		Expect(res.Output).To(Equal("Plan cleared."))
		Expect(res.Plan).NotTo(BeNil())
		Expect(res.Plan.Entries).To(BeEmpty())
	})

	DescribeTable("refuses malformed lists",
		func(input string, reason string) {
			_, err := tools.TodoWrite{}.Prepare(env, []byte(input))
			var ie *tools.InputError
			Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(reason))
		},
		Entry("no list", `{}`, "missing required field 'todos'"),
		Entry("a bad status", `{"todos":[{"content":"x","status":"done"}]}`, "todos[0]: 'status' must be one of pending, in_progress, completed"),
		Entry("a bad priority", `{"todos":[{"content":"x","status":"pending","priority":"urgent"}]}`, "'priority' must be one of high, medium, low"),
		Entry("empty content", `{"todos":[{"content":" ","status":"pending"}]}`, "'content' must be a non-empty string"),
		Entry("an unknown field", `{"todos":[{"content":"x","status":"pending","activeForm":"x"}]}`, "unknown field"),
		Entry("too long a task", `{"todos":[{"content":"`+strings.Repeat("x", 501)+`","status":"pending"}]}`, "keep it under 500"),
		Entry("too many tasks", `{"todos":[`+strings.TrimSuffix(strings.Repeat(`{"content":"x","status":"pending"},`, 101), ",")+`]}`, "at most 100 tasks"),
	)
})
