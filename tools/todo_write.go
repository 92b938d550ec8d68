package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// NameTodoWrite is the todo_write tool's name.
const NameTodoWrite = "todo_write"

// Plan limits: a short list of short tasks.
const (
	maxPlanEntries      = 100
	maxPlanContentRunes = 500
)

// Plan entry statuses and priorities (the ACP PlanEntry values).
var (
	planStatuses   = []string{"pending", "in_progress", "completed"}
	planPriorities = []string{"high", "medium", "low"}
)

// TodoWrite keeps the session's task list. The whole list is sent each
// time and replaces the previous one; the client shows it as a plan. It
// touches nothing outside the session, so it is read-only for the
// permission policy.
type TodoWrite struct{}

func (TodoWrite) Name() string { return NameTodoWrite }
func (TodoWrite) Description() string {
	return "Keep a short task list for work of several steps and show it to the user as a plan. Send the whole list " +
		"every time: it replaces the previous one. Each task has content (what to do, one line), status (pending, " +
		"in_progress or completed) and priority (high, medium or low; default medium). Keep exactly one task " +
		"in_progress while working and mark a task completed as soon as it is done. An empty list clears the plan."
}
func (TodoWrite) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"todos":{"type":"array","maxItems":` + fmt.Sprint(maxPlanEntries) +
		`,"items":{"type":"object","properties":{` +
		`"content":{"type":"string","description":"The task, one line"},` +
		`"status":{"type":"string","enum":["pending","in_progress","completed"]},` +
		`"priority":{"type":"string","enum":["high","medium","low"]}},` +
		`"required":["content","status"],"additionalProperties":false},` +
		`"description":"The complete task list"}},"required":["todos"],"additionalProperties":false}`)
}
func (TodoWrite) Kind() Kind     { return KindThink }
func (TodoWrite) ReadOnly() bool { return true }

type todoInput struct {
	Todos *[]todoItem `json:"todos"`
}

type todoItem struct {
	Content  *string `json:"content"`
	Status   *string `json:"status"`
	Priority *string `json:"priority"`
}

// PlanEntry is one task of a plan.
type PlanEntry struct {
	Content, Status, Priority string
}

// Plan is a task list a call reports; the actor layer sends it to the
// client (an ACP plan update) and keeps it for replay.
type Plan struct{ Entries []PlanEntry }

type todoCall struct{ plan Plan }

func (TodoWrite) Prepare(_ *Env, input json.RawMessage) (Call, error) {
	var in todoInput
	if err := decodeInput(NameTodoWrite, input, &in); err != nil {
		return nil, err
	}
	if in.Todos == nil {
		return nil, inputError(NameTodoWrite, "missing required field 'todos'")
	}
	if len(*in.Todos) > maxPlanEntries {
		return nil, inputError(NameTodoWrite, fmt.Sprintf("at most %d tasks, got %d", maxPlanEntries, len(*in.Todos)))
	}
	c := &todoCall{plan: Plan{Entries: make([]PlanEntry, 0, len(*in.Todos))}}
	for i, t := range *in.Todos {
		at := fmt.Sprintf("todos[%d]", i)
		if t.Content == nil || strings.TrimSpace(*t.Content) == "" {
			return nil, inputError(NameTodoWrite, at+": 'content' must be a non-empty string")
		}
		if n := utf8.RuneCountInString(*t.Content); n > maxPlanContentRunes {
			return nil, inputError(NameTodoWrite, fmt.Sprintf("%s: 'content' is %d characters; keep it under %d", at, n, maxPlanContentRunes))
		}
		if t.Status == nil || !oneOf(*t.Status, planStatuses) {
			return nil, inputError(NameTodoWrite, at+": 'status' must be one of "+strings.Join(planStatuses, ", "))
		}
		priority := "medium"
		if t.Priority != nil {
			if !oneOf(*t.Priority, planPriorities) {
				return nil, inputError(NameTodoWrite, at+": 'priority' must be one of "+strings.Join(planPriorities, ", "))
			}
			priority = *t.Priority
		}
		c.plan.Entries = append(c.plan.Entries, PlanEntry{Content: oneLine(*t.Content), Status: *t.Status, Priority: priority})
	}
	return c, nil
}

func oneOf(s string, set []string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

func (c *todoCall) Title() string {
	n := len(c.plan.Entries)
	if n == 0 {
		return "Clear the plan"
	}
	return fmt.Sprintf("Update the plan (%d %s)", n, plural(n, "task", "tasks"))
}
func (c *todoCall) Locations() []Location { return nil }
func (c *todoCall) Access() Access        { return Access{} }

// Run reports the plan; the model reads it back, counted by status.
func (c *todoCall) Run(context.Context, func(string)) Result {
	count := map[string]int{}
	var b strings.Builder
	for _, e := range c.plan.Entries {
		count[e.Status]++
		mark := map[string]string{"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}[e.Status]
		fmt.Fprintf(&b, "%s %s (%s)\n", mark, e.Content, e.Priority)
	}
	head := fmt.Sprintf("Plan updated: %d %s (%d completed, %d in progress, %d pending).",
		len(c.plan.Entries), plural(len(c.plan.Entries), "task", "tasks"), count["completed"], count["in_progress"], count["pending"])
	if len(c.plan.Entries) == 0 {
		head = "Plan cleared."
	}
	plan := c.plan
	return Result{Output: strings.TrimRight(head+"\n"+b.String(), "\n"), Plan: &plan}
}
