// Package tools holds the agent's tools. Each Tool is run by its own tool
// actor; this package knows nothing about actors or ACP framing.
package tools

import (
	"context"
	"encoding/json"
	"sort"
)

// Kind is the ACP ToolKind shown by clients.
type Kind string

const (
	KindRead    Kind = "read"
	KindEdit    Kind = "edit"
	KindSearch  Kind = "search"
	KindExecute Kind = "execute"
	KindFetch   Kind = "fetch"
	KindOther   Kind = "other"
)

// Tool is one capability offered to the model.
type Tool interface {
	Name() string
	Description() string
	// Schema is the JSON Schema of the input object, sent to the model.
	Schema() json.RawMessage
	Kind() Kind
	// ReadOnly tools never change anything; they run without asking when
	// they stay inside the session cwd.
	ReadOnly() bool
	// Describe gives a human title and the file locations an input touches.
	Describe(env *Env, input json.RawMessage) (title string, locations []Location)
	// Run executes the tool. It must return when ctx is done.
	Run(ctx context.Context, env *Env, input json.RawMessage) Result
}

// Env is what a tool invocation may use of its session.
type Env struct {
	Cwd string
	// Home is the state root (IAC_CODE_HOME), for spilled large outputs.
	Home string
	// Progress streams partial output to the client (may be nil).
	Progress func(text string)
}

// Location is a file a tool call touches.
type Location struct {
	Path string
	Line int
}

// Result is a finished tool invocation.
type Result struct {
	// Output is the text the model receives.
	Output  string
	IsError bool
	// Diff is set by file-editing tools so clients can review the change.
	Diff *Diff
	// Raw is reported to the client as rawOutput (may be nil).
	Raw any
}

// Diff is a whole-file change.
type Diff struct {
	Path    string
	OldText *string // nil for a new file
	NewText string
}

// Errorf builds an error result.
func Errorf(msg string) Result { return Result{Output: msg, IsError: true} }

// Registry is a set of tools by name.
type Registry struct {
	byName map[string]Tool
}

// NewRegistry builds a registry of the given tools.
func NewRegistry(ts ...Tool) *Registry {
	r := &Registry{byName: make(map[string]Tool, len(ts))}
	for _, t := range ts {
		r.byName[t.Name()] = t
	}
	return r
}

// Get looks a tool up by name.
func (r *Registry) Get(name string) (Tool, bool) {
	if r == nil {
		return nil, false
	}
	t, ok := r.byName[name]
	return t, ok
}

// List returns the tools sorted by name.
func (r *Registry) List() []Tool {
	if r == nil {
		return nil
	}
	out := make([]Tool, 0, len(r.byName))
	for _, t := range r.byName {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// Without returns a registry lacking the named tools (sub-agents, plan mode).
func (r *Registry) Without(names ...string) *Registry {
	out := &Registry{byName: make(map[string]Tool, len(r.byName))}
	for k, v := range r.byName {
		out.byName[k] = v
	}
	for _, n := range names {
		delete(out.byName, n)
	}
	return out
}

var extra []Tool

// RegisterExtra adds a tool to every default registry. Test builds use it to
// add tools (e.g. one that panics) that the shipped binary does not have.
func RegisterExtra(t Tool) { extra = append(extra, t) }

// Default returns the registry of built-in tools plus registered extras
// (an extra with a built-in's name replaces it).
func Default() *Registry {
	ts := append(Builtin(), extra...)
	return NewRegistry(ts...)
}
