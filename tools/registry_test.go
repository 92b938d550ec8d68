package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
)

type fakeTool struct {
	name     string
	readOnly bool
}

func (f fakeTool) Name() string                                            { return f.name }
func (f fakeTool) Description() string                                     { return "fake" }
func (f fakeTool) Schema() json.RawMessage                                 { return json.RawMessage(`{"type":"object"}`) }
func (f fakeTool) Kind() tools.Kind                                        { return tools.KindOther }
func (f fakeTool) ReadOnly() bool                                          { return f.readOnly }
func (f fakeTool) Prepare(*tools.Env, json.RawMessage) (tools.Call, error) { return fakeCall(f), nil }

type fakeCall fakeTool

func (f fakeCall) Title() string               { return f.name }
func (f fakeCall) Locations() []tools.Location { return nil }
func (f fakeCall) Access() tools.Access        { return tools.Access{} }
func (f fakeCall) Run(context.Context, func(string)) tools.Result {
	return tools.Result{Output: f.name}
}

func names(r *tools.Registry) []string {
	var out []string
	for _, t := range r.List() {
		out = append(out, t.Name())
	}
	return out
}

var _ = Describe("Registry", func() {
	It("has the built-in tools with the spec's kinds and permission categories", func() {
		kinds := map[string]tools.Kind{}
		readOnly := map[string]bool{}
		for _, t := range tools.Builtin() {
			kinds[t.Name()] = t.Kind()
			readOnly[t.Name()] = t.ReadOnly()
		}
		Expect(kinds).To(Equal(map[string]tools.Kind{
			"read_file": tools.KindRead, "list_files": tools.KindRead,
			"glob": tools.KindSearch, "grep": tools.KindSearch,
			"write_file": tools.KindEdit, "edit_file": tools.KindEdit,
			"bash": tools.KindExecute, "agent": tools.KindExecute,
			"web_fetch": tools.KindFetch, "todo_write": tools.KindThink,
		}))
		Expect(readOnly).To(Equal(map[string]bool{
			"read_file": true, "list_files": true, "glob": true, "grep": true, "web_fetch": true, "todo_write": true,
			"write_file": false, "edit_file": false, "bash": false, "agent": false,
		}))
	})

	It("gives every tool a valid object schema whose required fields are declared", func() {
		for _, t := range tools.Builtin() {
			var s struct {
				Type                 string                     `json:"type"`
				Properties           map[string]json.RawMessage `json:"properties"`
				Required             []string                   `json:"required"`
				AdditionalProperties *bool                      `json:"additionalProperties"`
			}
			Expect(json.Unmarshal(t.Schema(), &s)).To(Succeed(), t.Name())
			Expect(s.Type).To(Equal("object"), t.Name())
			Expect(s.AdditionalProperties).NotTo(BeNil(), t.Name())
			for _, r := range s.Required {
				Expect(s.Properties).To(HaveKey(r), t.Name())
			}
			Expect(t.Description()).NotTo(BeEmpty(), t.Name())
		}
	})

	It("gives each tool's definition once, sorted by name, and a list of the caller's own", func() {
		r := tools.Default()
		defs := r.Defs()
		list := r.List()
		Expect(defs).To(HaveLen(len(list)))
		for i, t := range list {
			Expect(defs[i].Name).To(Equal(t.Name()))
			Expect(defs[i].Description).To(Equal(t.Description()))
			Expect(defs[i].InputSchema).To(MatchJSON(t.Schema()))
		}
		Expect(testing.AllocsPerRun(100, func() { _ = r.Defs() })).To(BeZero(), "definitions made again")
		list[0] = fakeTool{name: "zzz"}
		Expect(r.List()[0].Name()).To(Equal(defs[0].Name), "List shares its slice")
		with := r.With(fakeTool{name: "aaa"})
		Expect(with.Defs()[0].Name).To(Equal("aaa"))
		Expect(r.Defs()[0].Name).To(Equal(defs[0].Name))
	})

	It("Default returns the built-ins plus registered extras", func() {
		tools.RegisterExtra(fakeTool{name: "zz_extra_for_test"})
		r := tools.Default()
		Expect(names(r)).To(ContainElements("read_file", "list_files", "glob", "grep", "write_file",
			"edit_file", "bash", "web_fetch", "agent", "zz_extra_for_test"))
	})

	Describe("SubagentTools", func() {
		reg := tools.NewRegistry(append(tools.Builtin(), fakeTool{name: "ro_extra", readOnly: true}, fakeTool{name: "rw_extra"})...)

		It("explore = read-only tools + bash", func() {
			r, err := tools.SubagentTools(reg, "explore")
			Expect(err).NotTo(HaveOccurred())
			Expect(names(r)).To(ConsistOf("read_file", "list_files", "glob", "grep", "web_fetch", "ro_extra", "bash"))
		})
		It("plan = read-only tools", func() {
			r, err := tools.SubagentTools(reg, "plan")
			Expect(err).NotTo(HaveOccurred())
			Expect(names(r)).To(ConsistOf("read_file", "list_files", "glob", "grep", "web_fetch", "ro_extra"))
		})
		It("general-purpose = everything but agent and todo_write (the plan is the main agent's)", func() {
			r, err := tools.SubagentTools(reg, "general-purpose")
			Expect(err).NotTo(HaveOccurred())
			Expect(names(r)).To(ConsistOf("read_file", "list_files", "glob", "grep", "web_fetch", "ro_extra",
				"bash", "write_file", "edit_file", "rw_extra"))
		})
		It("rejects an unknown type", func() {
			_, err := tools.SubagentTools(reg, "wizard")
			Expect(err).To(MatchError(ContainSubstring("wizard")))
		})
	})
})

var _ = Describe("Input validation", func() {
	env := &tools.Env{Cwd: os.TempDir()}
	byName := map[string]tools.Tool{}
	for _, t := range tools.Builtin() {
		byName[t.Name()] = t
	}
	prefix := func(name string) string { return "Invalid input for tool '" + name + "': " }

	DescribeTable("returns the exact prefix and a reason, never a crash",
		func(name, input, reason string) {
			_, err := byName[name].Prepare(env, json.RawMessage(input))
			var ie *tools.InputError
			Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
			Expect(ie.Tool).To(Equal(name))
			res := tools.Execute(context.Background(), byName[name], env, json.RawMessage(input), nil)
			Expect(res.IsError).To(BeTrue())
			Expect(res.Output).To(HavePrefix(prefix(name)))
			Expect(res.Output).To(ContainSubstring(reason))
		},
		Entry("read_file missing path", "read_file", `{}`, "missing required field 'path'"),
		Entry("read_file wrong type", "read_file", `{"path":3}`, "field 'path' must be a string"),
		Entry("read_file bad range", "read_file", `{"path":"a","start_line":5,"end_line":2}`, "end_line (2) is before start_line (5)"),
		Entry("read_file zero start", "read_file", `{"path":"a","start_line":0}`, "start_line"),
		Entry("read_file fractional line", "read_file", `{"path":"a","start_line":1.5}`, "field 'start_line' must be an integer"),
		Entry("read_file unknown field", "read_file", `{"path":"a","file_path":"b"}`, "unknown field 'file_path'"),
		Entry("read_file not an object", "read_file", `["a"]`, "input must be a JSON object"),
		Entry("read_file malformed JSON", "read_file", `{"path":`, "malformed JSON"),
		Entry("list_files wrong type", "list_files", `{"path":true}`, "field 'path' must be a string"),
		Entry("glob missing pattern", "glob", `{"path":"."}`, "missing required field 'pattern'"),
		Entry("glob bad pattern", "glob", `{"pattern":"[a"}`, "invalid glob pattern"),
		Entry("grep missing pattern", "grep", `{}`, "missing required field 'pattern'"),
		Entry("grep bad regexp", "grep", `{"pattern":"(a"}`, "invalid regular expression"),
		Entry("grep bad enum", "grep", `{"pattern":"a","output_mode":"count"}`, "field 'output_mode' must be one of files_with_matches, content"),
		Entry("grep bad max_results", "grep", `{"pattern":"a","max_results":0}`, "max_results"),
		Entry("grep bool as string", "grep", `{"pattern":"a","case_insensitive":"yes"}`, "field 'case_insensitive' must be a boolean"),
		Entry("write_file missing content", "write_file", `{"path":"a"}`, "missing required field 'content'"),
		Entry("write_file empty path", "write_file", `{"path":"","content":"x"}`, "field 'path' must not be empty"),
		Entry("edit_file missing new_string", "edit_file", `{"path":"a","old_string":"x"}`, "missing required field 'new_string'"),
		Entry("edit_file empty old_string", "edit_file", `{"path":"a","old_string":"","new_string":"x"}`, "old_string"),
		Entry("edit_file identical", "edit_file", `{"path":"a","old_string":"x","new_string":"x"}`, "identical"),
		Entry("bash missing command", "bash", `{"timeout":5}`, "missing required field 'command'"),
		Entry("bash timeout too big", "bash", `{"command":"true","timeout":601}`, "field 'timeout'"),
		Entry("bash negative timeout", "bash", `{"command":"true","timeout":-1}`, "field 'timeout'"),
		Entry("bash timeout as string", "bash", `{"command":"true","timeout":"10"}`, "field 'timeout' must be a number"),
		Entry("web_fetch missing url", "web_fetch", `{}`, "missing required field 'url'"),
		Entry("web_fetch bad scheme", "web_fetch", `{"url":"file:///etc/passwd"}`, "unsupported URL scheme"),
		Entry("web_fetch bad max_length", "web_fetch", `{"url":"https://example.com","max_length":0}`, "max_length"),
		Entry("agent missing prompt", "agent", `{"description":"d","subagent_type":"plan"}`, "missing required field 'prompt'"),
		Entry("agent bad type", "agent", `{"prompt":"p","description":"d","subagent_type":"wizard"}`, "field 'subagent_type' must be one of general-purpose, explore, plan"),
	)

	It("agent validates, then needs the actor runtime", func() {
		res := tools.Execute(context.Background(), byName["agent"], env, raw(map[string]any{
			"prompt": "p", "description": "d", "subagent_type": "explore"}), nil)
		Expect(res).To(Equal(tools.Errorf("agent tool requires the actor runtime")))
		call, err := byName["agent"].Prepare(env, raw(map[string]any{"prompt": "p", "description": "d", "subagent_type": "plan"}))
		Expect(err).NotTo(HaveOccurred())
		Expect(call).To(BeAssignableToTypeOf(&tools.AgentCall{}))
		Expect(call.(*tools.AgentCall).Input).To(Equal(tools.AgentInput{Prompt: "p", Description: "d", SubagentType: "plan"}))
		_, err = byName["agent"].Prepare(env, json.RawMessage(`{}`))
		Expect(err).To(MatchError(HavePrefix(prefix("agent"))))
	})
})

var _ = Describe("Prepare", func() {
	env := &tools.Env{Cwd: "/work/proj"}
	byName := map[string]tools.Tool{}
	for _, t := range tools.Builtin() {
		byName[t.Name()] = t
	}

	DescribeTable("titles and locations come from the decoded, resolved input",
		func(name string, input any, title string, locs []tools.Location) {
			call, err := byName[name].Prepare(env, raw(input))
			Expect(err).NotTo(HaveOccurred())
			Expect(call.Title()).To(Equal(title))
			Expect(call.Locations()).To(Equal(locs))
		},
		Entry(nil, "read_file", map[string]any{"path": "src/a.go", "start_line": 10}, "Read src/a.go",
			[]tools.Location{{Path: "/work/proj/src/a.go", Line: 10}}),
		Entry(nil, "read_file", map[string]any{"path": "/etc/hostname"}, "Read /etc/hostname",
			[]tools.Location{{Path: "/etc/hostname"}}),
		Entry(nil, "list_files", map[string]any{}, "List .", []tools.Location{{Path: "/work/proj"}}),
		Entry(nil, "list_files", map[string]any{"path": "src"}, "List src", []tools.Location{{Path: "/work/proj/src"}}),
		Entry(nil, "glob", map[string]any{"pattern": "**/*.go"}, "Glob **/*.go", []tools.Location{{Path: "/work/proj"}}),
		Entry(nil, "glob", map[string]any{"pattern": "src/**/*.go"}, "Glob **/*.go in src", []tools.Location{{Path: "/work/proj/src"}}),
		Entry(nil, "glob", map[string]any{"pattern": "/usr/share/*.conf"}, "Glob *.conf in /usr/share", []tools.Location{{Path: "/usr/share"}}),
		Entry(nil, "grep", map[string]any{"pattern": "func main", "path": "cmd"}, "Grep func main in cmd",
			[]tools.Location{{Path: "/work/proj/cmd"}}),
		Entry(nil, "grep", map[string]any{"pattern": "func main"}, "Grep func main", []tools.Location{{Path: "/work/proj"}}),
		Entry(nil, "write_file", map[string]any{"path": "hello.txt", "content": "x"}, "Write hello.txt",
			[]tools.Location{{Path: "/work/proj/hello.txt"}}),
		Entry(nil, "edit_file", map[string]any{"path": "../other/x.go", "old_string": "a", "new_string": "b"}, "Edit /work/other/x.go",
			[]tools.Location{{Path: "/work/other/x.go"}}),
		Entry(nil, "bash", map[string]any{"command": "go test ./..."}, "go test ./...", []tools.Location(nil)),
		Entry("bash: the whole command, never a prefix", "bash", map[string]any{"command": strings.Repeat("x", 100) + "; rm -rf ~"},
			strings.Repeat("x", 100)+"; rm -rf ~", []tools.Location(nil)),
		Entry("bash: control and bidi characters are visible", "bash", map[string]any{"command": "echo ok\rrm -rf ~ \u202e"},
			`echo ok\rrm -rf ~ \u202e`, []tools.Location(nil)),
		Entry(nil, "bash", map[string]any{"command": strings.Repeat("y", 2100)},
			strings.Repeat("y", 2000)+"… (100 more characters)", []tools.Location(nil)),
		Entry(nil, "web_fetch", map[string]any{"url": "https://go.dev/doc"}, "Fetch from go.dev: https://go.dev/doc", []tools.Location(nil)),
		Entry("web_fetch: a look-alike host shows as punycode", "web_fetch", map[string]any{"url": "https://gіthub.com/x"},
			"Fetch from xn--gthub-n2e.com: https://xn--gthub-n2e.com/x", []tools.Location(nil)),
		Entry(nil, "agent", map[string]any{"description": "Find the bug", "prompt": "p", "subagent_type": "plan"}, "Agent: Find the bug", []tools.Location(nil)),
	)

	It("expands ~ to the home directory", func() {
		home, err := os.UserHomeDir()
		Expect(err).NotTo(HaveOccurred())
		real, err := tools.RealPath(filepath.Join(home, "notes.md"))
		Expect(err).NotTo(HaveOccurred())
		call, err := tools.ReadFile{}.Prepare(env, raw(map[string]any{"path": "~/notes.md"}))
		Expect(err).NotTo(HaveOccurred())
		Expect(call.Locations()).To(Equal([]tools.Location{{Path: real}}))
		Expect(call.Access().Paths).To(Equal([]tools.PathAccess{{Path: real, Place: tools.PlaceOutside}}))
	})

	It("never panics on malformed input and fails it as invalid input", func() {
		inputs := []string{`[]`, `"x"`, `{`, `{"path":5}`, `{"path":null,"start_line":"x"}`,
			`{"command":{}}`, `{"pattern":[1]}`, `{"url":1e400}`, `{"description":false}`, `{"start_line":-5,"path":"a"}`}
		for _, t := range tools.Builtin() {
			for _, in := range inputs {
				for _, e := range []*tools.Env{env, nil, {}} {
					var err error
					Expect(func() { _, err = t.Prepare(e, json.RawMessage(in)) }).NotTo(Panic(), t.Name()+" "+in)
					Expect(err).To(HaveOccurred(), t.Name()+" "+in)
				}
			}
		}
	})
})
