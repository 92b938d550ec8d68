// Package tools holds the agent's tools. Each Tool is run by its own tool
// actor; this package knows nothing about actors or ACP framing.
package tools

import (
	"context"
	"encoding/json"
	"sort"
	"sync"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/tools/sandbox"
)

// Kind is the ACP ToolKind shown by clients.
type Kind string

const (
	KindRead    Kind = "read"
	KindEdit    Kind = "edit"
	KindSearch  Kind = "search"
	KindExecute Kind = "execute"
	KindFetch   Kind = "fetch"
	KindThink   Kind = "think"
	KindOther   Kind = "other"
)

// Tool is one capability offered to the model.
//
// A call happens in two phases so that what is shown and asked about is
// exactly what runs: Prepare decodes the model's input once (strictly) and
// resolves what it will touch; the permission request, the tool_call update
// and the policy are built from the Call it returns, and that same Call runs.
type Tool interface {
	Name() string
	Description() string
	// Schema is the JSON Schema of the input object, sent to the model.
	Schema() json.RawMessage
	Kind() Kind
	// ReadOnly tools never change anything; they run without asking when
	// everything they touch is inside the session cwd (Access).
	ReadOnly() bool
	// Prepare decodes and validates input — exact, case-sensitive names; a
	// duplicate or unknown name, a wrong type or malformed JSON is an error —
	// and resolves paths (symlinks, .., ~). It has no side effect. Its error
	// is the message for the model (an *InputError for bad input); the call
	// is then failed without being asked about.
	Prepare(env *Env, input json.RawMessage) (Call, error)
}

// Call is one prepared tool invocation: decoded, validated, resolved.
type Call interface {
	// Title is the human title shown for the call and in its permission
	// request; it shows the values that will be used.
	Title() string
	// Locations are the files the call touches, for clients to follow.
	Locations() []Location
	// Access is what the call reaches; the permission policy decides on it.
	Access() Access
	// Run executes the call. It must return when ctx is done. progress
	// (may be nil) streams partial output; it is not called after Run returns.
	Run(ctx context.Context, progress func(text string)) Result
}

// Previewer is a Call that can show its change before it runs, for the
// permission request (nil when the call would fail): the diff against the
// text the run will change — the client's buffer when the run goes
// through cl (RunVia's rule), else the file on disk — so the user approves
// the change that is made, unless the text changes meanwhile. cl is nil
// for a local run.
type Previewer interface {
	Preview(ctx context.Context, cl Client) *Diff
}

// Access is what a call reaches, decided on resolved values.
type Access struct {
	// Paths are the file-system paths the call reads or writes.
	Paths []PathAccess
	// Host is the network host the call contacts ("" for none), in ASCII
	// (IDNA) lower case.
	Host string
}

// PathAccess is one resolved path a call uses.
type PathAccess struct {
	// Path is absolute and clean, with every symlink of its existing part
	// resolved.
	Path  string
	Place Place
	// Write is set when the call creates or changes the path.
	Write bool
}

// Local reports whether the call stays inside the session cwd (reading a
// spilled tool output counts as inside) and contacts no host.
func (a Access) Local() bool {
	if a.Host != "" {
		return false
	}
	for _, p := range a.Paths {
		if p.Place == PlaceCwd || (p.Place == PlaceToolOutputs && !p.Write) {
			continue
		}
		return false
	}
	return true
}

// WritesInsideCwd reports whether the call writes, and only inside the cwd.
func (a Access) WritesInsideCwd() bool {
	if a.Host != "" || len(a.Paths) == 0 {
		return false
	}
	for _, p := range a.Paths {
		if p.Place != PlaceCwd {
			return false
		}
	}
	return true
}

// FuncCall is a Call made of plain values and a function, for tools whose
// input needs no resolution (generic and test tools).
type FuncCall struct {
	TitleText string
	Locs      []Location
	Reach     Access
	RunFunc   func(ctx context.Context, progress func(text string)) Result
}

func (c *FuncCall) Title() string         { return c.TitleText }
func (c *FuncCall) Locations() []Location { return c.Locs }
func (c *FuncCall) Access() Access        { return c.Reach }
func (c *FuncCall) Run(ctx context.Context, progress func(string)) Result {
	return c.RunFunc(ctx, progress)
}

// Execute prepares and runs a call without any permission check: for tests
// and tools that run tools. A Prepare error becomes an error result.
func Execute(ctx context.Context, t Tool, env *Env, input json.RawMessage, progress func(string)) Result {
	c, err := t.Prepare(env, input)
	if err != nil {
		return Errorf(err.Error())
	}
	return c.Run(ctx, progress)
}

// Env is what a tool invocation may use of its session.
type Env struct {
	// Cwd is the session's working directory, as the client gave it.
	Cwd string
	// Home is the state root (IAC_CODE_HOME), for spilled large outputs.
	Home string
	// AdditionalDirs are more workspace roots (ACP additionalDirectories):
	// a path in one of them is inside, as in Cwd. Absolute, as the client
	// gave them; the connection checked that they exist.
	AdditionalDirs []string
	// Jail is the session's sandbox for the processes tools start (nil:
	// not sandboxed).
	Jail *sandbox.Jail
}

// Contained is a call whose process runs in the session's sandbox.
// Sandbox is the sandbox's _meta entry when the call would run contained
// for a client with caps (nil when not: no jail, or the command runs in the
// client's terminal).
type Contained interface {
	Sandbox(caps ClientCaps) map[string]any
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
	// Plan is set by todo_write: the whole task list, shown as a plan.
	Plan *Plan
	// Raw is reported to the client as rawOutput (may be nil).
	Raw any
	// Content, when set, is what the client is shown instead of Output:
	// rich blocks one to one (MCP results). Output stays the model's text.
	Content []ContentBlock
}

// ContentBlock is a content block of a tool result, in the shape MCP and
// ACP share: "text" (Text), "image" and "audio" (Data, base64, and
// MimeType), "resource_link" (URI, Name, Title, Description, MimeType,
// Size) or "resource" (Resource).
type ContentBlock struct {
	Type        string
	Text        string
	Data        string
	MimeType    string
	URI         string
	Name        string
	Title       string
	Description string
	Size        *int64
	Resource    *ResourceContents
}

// ResourceContents is an embedded resource: Text, or Blob (base64) when
// IsBlob.
type ResourceContents struct {
	URI      string
	MimeType string
	Text     string
	Blob     string
	IsBlob   bool
}

// Diff is a whole-file change.
type Diff struct {
	Path    string
	OldText *string // nil for a new file
	NewText string
}

// Errorf builds an error result.
func Errorf(msg string) Result { return Result{Output: msg, IsError: true} }

// Registry is a set of tools by name. It never changes once built, so
// its sorted list and the tools' definitions are made once (listed), not
// at every model call: a call sends every definition, and the built-in
// tools' descriptions are formatted from their limits (~50 µs a turn).
type Registry struct {
	byName map[string]Tool

	listOnce sync.Once
	sorted   []Tool
	defs     []llm.ToolSpec
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

// List returns the tools sorted by name (a slice of the caller's own).
func (r *Registry) List() []Tool {
	if r == nil {
		return nil
	}
	r.list()
	return append([]Tool(nil), r.sorted...)
}

// Defs returns the tools' definitions sorted by name, as a model request
// offers them. The slice and the schemas are shared: read them, never
// change them.
func (r *Registry) Defs() []llm.ToolSpec {
	if r == nil {
		return nil
	}
	r.list()
	return r.defs
}

// list makes the sorted list and the definitions, once.
func (r *Registry) list() {
	r.listOnce.Do(func() {
		out := make([]Tool, 0, len(r.byName))
		for _, t := range r.byName {
			out = append(out, t)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
		defs := make([]llm.ToolSpec, len(out))
		for i, t := range out {
			defs[i] = llm.ToolSpec{Name: t.Name(), Description: t.Description(), InputSchema: t.Schema()}
		}
		r.sorted, r.defs = out, defs
	})
}

// With returns a registry with ts added (a tool of r keeps its name).
func (r *Registry) With(ts ...Tool) *Registry {
	if len(ts) == 0 {
		return r
	}
	out := &Registry{byName: make(map[string]Tool, len(r.byName)+len(ts))}
	for _, t := range ts {
		out.byName[t.Name()] = t
	}
	for k, v := range r.byName {
		out.byName[k] = v
	}
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
