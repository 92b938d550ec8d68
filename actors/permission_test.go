package actors

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/tools"
)

// The permission policy of docs/tools.md's table, on the real built-in tools:
// tool × mode × where the call's resolved paths (or host) lie.
var _ = Describe("the permission policy", Label("security"), func() {
	const (
		runs  = "runs without asking"
		asks  = "asks"
		never = "refused without asking"
	)
	var (
		cwd, outside, page string
	)
	BeforeEach(func() {
		var err error
		cwd, err = filepath.EvalSymlinks(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		outside, err = filepath.EvalSymlinks(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(cwd, "in.txt"), []byte("inside\n"), 0o644)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(outside, "secret"), []byte("secret\n"), 0o644)).To(Succeed())
		Expect(os.Symlink(outside, filepath.Join(cwd, "vendor"))).To(Succeed())
		Expect(os.Symlink(filepath.Join(outside, "secret"), filepath.Join(cwd, "note.txt"))).To(Succeed())
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "page")
		}))
		DeferCleanup(srv.Close)
		page = srv.URL
		GinkgoT().Setenv(tools.EnvWebFetchAllowPrivate, "1")
	})

	// decide runs one call in a fresh session of the given mode and says
	// what the policy did; an asked call is rejected and must not have run.
	decide := func(mode, name string, args map[string]any) string {
		for k, v := range args {
			if s, ok := v.(string); ok {
				args[k] = strings.NewReplacer("$OUT", outside, "$PAGE", page).Replace(s)
			}
		}
		in, _ := json.Marshal(args)
		p := &scriptedProvider{}
		p.then(callTool("c1", name, string(in))).then(say("done"))
		h := newHarness(p, tools.Builtin()...)
		defer h.close()
		sid := h.newSession(cwd)
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": mode}))
		id := h.call("session/prompt", textPrompt(sid, "go"))
		var outcome string
		Eventually(func() bool {
			if reqs := h.out.requests("session/request_permission"); len(reqs) > 0 {
				h.answer(reqs[0]["id"], map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "reject_once"}})
				outcome = asks
				return true
			}
			return h.out.response(id) != nil
		}, 5*time.Second, 2*time.Millisecond).Should(BeTrue())
		h.result(id)
		msgs := p.requests()[1].Messages
		res := msgs[len(msgs)-1].Content[0]
		switch {
		case outcome == asks:
			Expect(res.Text).To(Equal("Permission denied."))
		case res.IsError && (strings.Contains(res.Text, "plan mode") || strings.HasPrefix(res.Text, "Unknown tool")):
			outcome = never
		default:
			outcome = runs
		}
		return outcome
	}

	type row struct{ def, acceptEdits, plan, bypass string }
	DescribeTable("tool × mode × inside/outside the cwd",
		func(name string, args map[string]any, want row) {
			got := row{}
			for mode, into := range map[string]*string{"default": &got.def, "accept_edits": &got.acceptEdits, "plan": &got.plan, "bypass": &got.bypass} {
				a := map[string]any{}
				for k, v := range args {
					a[k] = v
				}
				*into = decide(mode, name, a)
			}
			Expect(got).To(Equal(want))
		},
		Entry("read_file inside", "read_file", map[string]any{"path": "in.txt"}, row{runs, runs, runs, runs}),
		Entry("read_file through a symlinked directory", "read_file", map[string]any{"path": "vendor/secret"}, row{asks, asks, asks, runs}),
		Entry("read_file of a symlinked file", "read_file", map[string]any{"path": "note.txt"}, row{asks, asks, asks, runs}),
		Entry("read_file with ..", "read_file", map[string]any{"path": "$OUT/../" + "x"}, row{asks, asks, asks, runs}),
		Entry("list_files of a symlinked directory", "list_files", map[string]any{"path": "vendor"}, row{asks, asks, asks, runs}),
		Entry("grep outside", "grep", map[string]any{"pattern": "secret", "path": "$OUT"}, row{asks, asks, asks, runs}),
		Entry("glob inside", "glob", map[string]any{"pattern": "*.txt"}, row{runs, runs, runs, runs}),
		Entry("glob through a symlink", "glob", map[string]any{"pattern": "vendor/*"}, row{asks, asks, asks, runs}),
		Entry("write_file inside", "write_file", map[string]any{"path": "new.txt", "content": "x"}, row{asks, runs, never, runs}),
		Entry("write_file through a symlinked directory", "write_file", map[string]any{"path": "vendor/x", "content": "x"}, row{asks, asks, never, runs}),
		Entry("write_file outside", "write_file", map[string]any{"path": "$OUT/y", "content": "x"}, row{asks, asks, never, runs}),
		Entry("edit_file of a symlinked file", "edit_file", map[string]any{"path": "note.txt", "old_string": "secret", "new_string": "s"}, row{asks, asks, never, runs}),
		Entry("edit_file inside", "edit_file", map[string]any{"path": "in.txt", "old_string": "inside", "new_string": "in"}, row{asks, runs, never, runs}),
		Entry("bash", "bash", map[string]any{"command": "true"}, row{asks, asks, never, runs}),
		Entry("web_fetch", "web_fetch", map[string]any{"url": "$PAGE"}, row{asks, asks, asks, runs}),
	)

	It("fails duplicate and case-variant keys as invalid input without asking, in every mode", func() {
		for _, mode := range []string{"default", "bypass"} {
			p := &scriptedProvider{}
			p.then(callTool("c1", "bash", `{"command":"echo harmless","Command":"touch pwned"}`)).
				then(callTool("c2", "write_file", `{"path":"ok.txt","path":"`+outside+`/pwned","content":"x"}`)).
				then(say("done"))
			h := newHarness(p, tools.Builtin()...)
			sid := h.newSession(cwd)
			h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": mode}))
			Expect(h.result(h.call("session/prompt", textPrompt(sid, "go")))["stopReason"]).To(Equal("end_turn"))
			Expect(h.out.requests("session/request_permission")).To(BeEmpty())
			reqs := p.requests()
			Expect(lastResult(reqs[1])).To(Equal("Invalid input for tool 'bash': unknown field 'Command' (field names are case-sensitive)"))
			Expect(lastResult(reqs[2])).To(Equal("Invalid input for tool 'write_file': duplicate field 'path'"))
			Expect(filepath.Join(cwd, "pwned")).NotTo(BeAnExistingFile())
			Expect(filepath.Join(outside, "pwned")).NotTo(BeAnExistingFile())
			h.close()
		}
	})

	It("remembers web_fetch per host and names that scope in the options", func() {
		p := &scriptedProvider{}
		other := strings.Replace(page, "127.0.0.1", "localhost", 1)
		p.then(callTool("c1", "web_fetch", `{"url":"`+page+`/a"}`)).
			then(callTool("c2", "web_fetch", `{"url":"`+page+`/b"}`)).
			then(callTool("c3", "web_fetch", `{"url":"`+other+`/c"}`)).
			then(say("done"))
		h := newHarness(p, tools.Builtin()...)
		defer h.close()
		sid := h.newSession(cwd)
		id := h.call("session/prompt", textPrompt(sid, "go"))
		Eventually(func() int { return len(h.out.requests("session/request_permission")) }).Should(Equal(1))
		req := h.out.requests("session/request_permission")[0]
		params := req["params"].(map[string]any)
		Expect(params["toolCall"]).To(HaveKeyWithValue("title", "Fetch from 127.0.0.1: "+page+"/a"))
		Expect(params["options"]).To(ContainElement(HaveKeyWithValue("name", "Always allow web_fetch for 127.0.0.1 in this session")))
		h.answer(req["id"], map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_always"}})
		// the same host is not asked again; another host is
		Eventually(func() int { return len(h.out.requests("session/request_permission")) }).Should(Equal(2))
		second := h.out.requests("session/request_permission")[1]
		Expect(second["params"].(map[string]any)["toolCall"]).To(HaveKeyWithValue("toolCallId", "c3"))
		h.answer(second["id"], map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "reject_once"}})
		Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
		reqs := p.requests()
		Expect(lastResult(reqs[2])).To(ContainSubstring("page"))
		Expect(lastResult(reqs[3])).To(Equal("Permission denied."))
	})
})

// lastResult is the text of the last tool result the model was sent.
func lastResult(r *llm.Request) string {
	m := r.Messages[len(r.Messages)-1]
	return m.Content[len(m.Content)-1].Text
}
