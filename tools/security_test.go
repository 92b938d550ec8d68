package tools_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
)

// realTemp is a fresh temp dir with its symlinks resolved.
func realTemp() string {
	d, err := filepath.EvalSymlinks(GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	return d
}

func prepare(t tools.Tool, env *tools.Env, v any) tools.Call {
	c, err := t.Prepare(env, raw(v))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return c
}

func places(c tools.Call) []tools.PathAccess { return c.Access().Paths }

var _ = Describe("paths are decided on what they resolve to", Label("security"), func() {
	var env *tools.Env
	var cwd, out string
	BeforeEach(func() {
		env = tempEnv()
		cwd, out = env.Cwd, realTemp()
		writeFiles(cwd, map[string]string{"in.txt": "inside\n", "sub/f.txt": "sub\n"})
		writeFiles(out, map[string]string{"secret": "SECRET\n", "dir/f.txt": "SECRET\n"})
		Expect(os.Symlink(out, filepath.Join(cwd, "vendor"))).To(Succeed())
		Expect(os.Symlink(filepath.Join(out, "secret"), filepath.Join(cwd, "note.txt"))).To(Succeed())
		Expect(os.Symlink("/etc", filepath.Join(cwd, "etc"))).To(Succeed())
		Expect(os.Symlink("sub", filepath.Join(cwd, "alias"))).To(Succeed())
	})

	DescribeTable("Resolve",
		func(p string, wantPath func() string, want tools.Place) {
			r, err := tools.Resolve(env, p)
			Expect(err).NotTo(HaveOccurred())
			Expect(r.Path).To(Equal(wantPath()))
			Expect(r.Place).To(Equal(want))
		},
		Entry("a plain inside path", "in.txt", func() string { return filepath.Join(cwd, "in.txt") }, tools.PlaceCwd),
		Entry("a symlinked directory leading out", "vendor/secret", func() string { return filepath.Join(out, "secret") }, tools.PlaceOutside),
		Entry("a symlinked file leading out", "note.txt", func() string { return filepath.Join(out, "secret") }, tools.PlaceOutside),
		Entry("a link to /etc", "etc/hostname", func() string { return "/etc/hostname" }, tools.PlaceOutside),
		Entry("a link that stays inside", "alias/f.txt", func() string { return filepath.Join(cwd, "sub", "f.txt") }, tools.PlaceCwd),
		Entry("a missing tail under a link", "vendor/new/x.txt", func() string { return filepath.Join(out, "new", "x.txt") }, tools.PlaceOutside),
		Entry("..", "../x", func() string { return filepath.Join(filepath.Dir(cwd), "x") }, tools.PlaceOutside),
		Entry(".. back inside", "sub/../in.txt", func() string { return filepath.Join(cwd, "in.txt") }, tools.PlaceCwd),
		Entry(".. after a link climbs from its target, as the kernel does", "vendor/../x",
			func() string { return filepath.Join(filepath.Dir(out), "x") }, tools.PlaceOutside),
		Entry("an absolute path into the cwd", "/", func() string { return "/" }, tools.PlaceOutside),
		Entry("~", "~", func() string { h, _ := os.UserHomeDir(); r, _ := filepath.EvalSymlinks(h); return r }, tools.PlaceOutside),
	)

	It("treats an additional directory as inside, on what paths resolve to", func() {
		extra := realTemp()
		writeFiles(extra, map[string]string{"lib/a.go": "package a\n"})
		Expect(os.Symlink(filepath.Join(out, "secret"), filepath.Join(extra, "leak"))).To(Succeed())
		env.AdditionalDirs = []string{extra}
		r, err := tools.Resolve(env, filepath.Join(extra, "lib", "a.go"))
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Place).To(Equal(tools.PlaceCwd))
		Expect(r.Location()).To(Equal(filepath.Join(extra, "lib", "a.go")))
		r, err = tools.Resolve(env, filepath.Join(extra, "leak"))
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Place).To(Equal(tools.PlaceOutside), "a symlink out of the additional directory leads outside")
		r, err = tools.Resolve(env, "vendor/secret")
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Place).To(Equal(tools.PlaceOutside))
		c := prepare(tools.ReadFile{}, env, map[string]any{"path": filepath.Join(extra, "lib", "a.go")})
		Expect(c.Access().Local()).To(BeTrue())
		Expect(c.Run(ctx(), nil).Output).To(ContainSubstring("package a"))
	})

	It("agrees with the kernel (EvalSymlinks) on every existing path", func() {
		for _, p := range []string{"in.txt", "vendor/secret", "note.txt", "alias/f.txt", "vendor/../" + filepath.Base(out), "sub/../in.txt", "etc/hostname"} {
			want, err := filepath.EvalSymlinks(cwd + "/" + p)
			if err != nil {
				continue
			}
			r, err := tools.Resolve(env, p)
			Expect(err).NotTo(HaveOccurred())
			Expect(r.Path).To(Equal(want), p)
		}
	})

	It("refuses a symlink loop and a NUL byte", func() {
		Expect(os.Symlink("b", filepath.Join(cwd, "a"))).To(Succeed())
		Expect(os.Symlink("a", filepath.Join(cwd, "b"))).To(Succeed())
		_, err := tools.Resolve(env, "a/x")
		Expect(err).To(MatchError(ContainSubstring("too many levels of symbolic links")))
		_, err = tools.Resolve(env, "in\x00.txt")
		Expect(err).To(HaveOccurred())
		_, err = tools.ReadFile{}.Prepare(env, raw(map[string]any{"path": "a/x"}))
		Expect(err).To(BeAssignableToTypeOf(&tools.InputError{}))
	})

	It("places a cwd given through a symlink, and shows locations in the client's spelling", func() {
		link := filepath.Join(out, "cwdlink")
		Expect(os.Symlink(cwd, link)).To(Succeed())
		e := &tools.Env{Cwd: link, Home: env.Home}
		c := prepare(tools.ReadFile{}, e, map[string]any{"path": "in.txt"})
		Expect(c.Access().Paths).To(Equal([]tools.PathAccess{{Path: filepath.Join(cwd, "in.txt"), Place: tools.PlaceCwd}}))
		Expect(c.Locations()).To(Equal([]tools.Location{{Path: filepath.Join(link, "in.txt")}}))
		Expect(c.Title()).To(Equal("Read in.txt"))
	})

	It("lets spilled outputs be read without asking, but not through a symlink leading elsewhere", func() {
		spill := filepath.Join(env.Home, tools.SpillDir)
		writeFiles(spill, map[string]string{"x.txt": "spilled\n"})
		Expect(os.Symlink(filepath.Join(out, "secret"), filepath.Join(spill, "evil.txt"))).To(Succeed())
		c := prepare(tools.ReadFile{}, env, map[string]any{"path": filepath.Join(spill, "x.txt")})
		Expect(c.Access().Local()).To(BeTrue())
		c = prepare(tools.ReadFile{}, env, map[string]any{"path": filepath.Join(spill, "evil.txt")})
		Expect(c.Access().Local()).To(BeFalse())
		Expect(c.Title()).To(Equal("Read " + filepath.Join(out, "secret")))
		// writing there is not a read
		c = prepare(tools.WriteFile{}, env, map[string]any{"path": filepath.Join(spill, "y.txt"), "content": "x"})
		Expect(c.Access().Local()).To(BeFalse())
	})

	It("titles and accesses show the resolved target", func() {
		c := prepare(tools.ReadFile{}, env, map[string]any{"path": "vendor/secret"})
		Expect(c.Title()).To(Equal("Read " + filepath.Join(out, "secret")))
		Expect(places(c)).To(Equal([]tools.PathAccess{{Path: filepath.Join(out, "secret"), Place: tools.PlaceOutside}}))
		c = prepare(tools.WriteFile{}, env, map[string]any{"path": "note.txt", "content": "x"})
		Expect(places(c)).To(Equal([]tools.PathAccess{{Path: filepath.Join(out, "secret"), Place: tools.PlaceOutside, Write: true}}))
		Expect(c.Access().WritesInsideCwd()).To(BeFalse())
		c = prepare(tools.Glob{}, env, map[string]any{"pattern": "vendor/**"})
		Expect(c.Title()).To(Equal("Glob ** in " + out))
		c = prepare(tools.Grep{}, env, map[string]any{"pattern": "x", "path": "etc"})
		Expect(c.Title()).To(Equal("Grep x in /etc"))
		Expect(c.Access().Local()).To(BeFalse())
	})

	Describe("operating on what was checked", func() {
		swap := func(name, target string) {
			Expect(os.RemoveAll(filepath.Join(cwd, name))).To(Succeed())
			Expect(os.Symlink(target, filepath.Join(cwd, name))).To(Succeed())
		}
		It("a read inside the cwd does not follow a directory swapped for a link out", func() {
			c := prepare(tools.ReadFile{}, env, map[string]any{"path": "sub/f.txt"})
			Expect(c.Access().Local()).To(BeTrue())
			swap("sub", filepath.Join(out, "dir"))
			res := c.Run(ctx(), nil)
			Expect(res.IsError).To(BeTrue())
			Expect(res.Output).NotTo(ContainSubstring("SECRET"))
		})
		It("a write inside the cwd does not follow a directory swapped for a link out", func() {
			c := prepare(tools.WriteFile{}, env, map[string]any{"path": "sub/new.txt", "content": "x"})
			Expect(c.Access().WritesInsideCwd()).To(BeTrue())
			swap("sub", filepath.Join(out, "dir"))
			Expect(c.Run(ctx(), nil).IsError).To(BeTrue())
			Expect(filepath.Join(out, "dir", "new.txt")).NotTo(BeAnExistingFile())
		})
		It("an edit inside the cwd does not follow a file swapped for a link out", func() {
			c := prepare(tools.EditFile{}, env, map[string]any{"path": "in.txt", "old_string": "SECRET", "new_string": "gone"})
			swap("in.txt", filepath.Join(out, "secret"))
			Expect(c.Run(ctx(), nil).IsError).To(BeTrue())
			Expect(os.ReadFile(filepath.Join(out, "secret"))).To(Equal([]byte("SECRET\n")))
		})
		It("an approved outside path is opened without following a final link swapped in", func() {
			writeFiles(out, map[string]string{"plain.txt": "plain\n"})
			c := prepare(tools.ReadFile{}, env, map[string]any{"path": filepath.Join(out, "plain.txt")})
			Expect(os.Remove(filepath.Join(out, "plain.txt"))).To(Succeed())
			Expect(os.Symlink(filepath.Join(out, "secret"), filepath.Join(out, "plain.txt"))).To(Succeed())
			res := c.Run(ctx(), nil)
			Expect(res.IsError).To(BeTrue())
			Expect(res.Output).NotTo(ContainSubstring("SECRET"))
		})
	})

	Describe("walks do not follow a symlink out of the cwd, and say so", func() {
		It("grep", func() {
			res := run(tools.Grep{}, env, map[string]any{"pattern": "SECRET|inside"})
			Expect(res.IsError).To(BeFalse())
			Expect(res.Output).To(ContainSubstring("in.txt\n"))
			Expect(res.Output).NotTo(ContainSubstring("secret\n"))
			Expect(res.Output).To(ContainSubstring("[Not followed: 3 symlinks leading outside the working directory: "))
			Expect(res.Output).To(ContainSubstring("vendor -> " + out))
			Expect(res.Output).To(ContainSubstring("etc -> /etc"))
		})
		It("glob, which still finds files through links that stay inside", func() {
			Expect(os.Symlink("in.txt", filepath.Join(cwd, "same.txt"))).To(Succeed())
			res := run(tools.Glob{}, env, map[string]any{"pattern": "**/*"})
			Expect(res.IsError).To(BeFalse())
			Expect(res.Output).To(ContainSubstring("same.txt\n"))
			Expect(res.Output).NotTo(ContainSubstring("note.txt\n"))
			Expect(res.Output).To(ContainSubstring("note.txt -> " + filepath.Join(out, "secret")))
		})
		It("list_files", func() {
			res := run(tools.ListFiles{}, env, map[string]any{})
			Expect(res.Output).To(ContainSubstring("vendor -> " + out + " (outside the working directory; not followed)\n"))
			Expect(res.Output).To(ContainSubstring("alias/ -> sub\n"))
		})
	})
})

var _ = Describe("tool input is read once, exactly", Label("security"), func() {
	env := &tools.Env{Cwd: "/work/proj"}
	// one valid input per tool; each gets a duplicate and a case variant
	valid := map[string]string{
		"read_file":  `{"path":"a.txt","start_line":1}`,
		"list_files": `{"path":"src"}`,
		"glob":       `{"pattern":"*.go","path":"src"}`,
		"grep":       `{"pattern":"x","path":"src"}`,
		"write_file": `{"path":"a.txt","content":"x"}`,
		"edit_file":  `{"path":"a.txt","old_string":"a","new_string":"b"}`,
		"bash":       `{"command":"echo harmless"}`,
		"web_fetch":  `{"url":"https://example.com/"}`,
		"agent":      `{"prompt":"p","description":"d","subagent_type":"plan"}`,
		"todo_write": `{"todos":[{"content":"c","status":"pending"}]}`,
	}
	It("covers every built-in tool", func() {
		var names []string
		for _, t := range tools.Builtin() {
			names = append(names, t.Name())
		}
		var have []string
		for n := range valid {
			have = append(have, n)
		}
		sort.Strings(have)
		Expect(names).To(ConsistOf(have))
	})
	for _, t := range tools.Builtin() {
		It("fails duplicate and case-variant keys of "+t.Name()+" as invalid input", func() {
			in := valid[t.Name()]
			_, err := t.Prepare(env, json.RawMessage(in))
			Expect(err).NotTo(HaveOccurred())
			var first string
			var m map[string]json.RawMessage
			Expect(json.Unmarshal([]byte(in), &m)).To(Succeed())
			for k := range m {
				first = k
				break
			}
			body := strings.TrimSuffix(in, "}")
			for _, hostile := range []string{
				body + `,"` + first + `":"/etc/shadow"}`,                        // duplicate
				body + `,"` + strings.ToUpper(first[:1]) + first[1:] + `":"x"}`, // case variant
				`{"` + strings.ToUpper(first) + `":"x"` + strings.TrimPrefix(body, "{") + `}`,
			} {
				_, err := t.Prepare(env, json.RawMessage(hostile))
				var ie *tools.InputError
				Expect(errors.As(err, &ie)).To(BeTrue(), "%s: %v", hostile, err)
				Expect(err.Error()).To(HavePrefix("Invalid input for tool '" + t.Name() + "': "))
				Expect(err.Error()).To(Or(ContainSubstring("duplicate field"), ContainSubstring("unknown field")))
			}
		})
	}
})

var _ = Describe("web_fetch is a network egress", Label("security"), func() {
	It("names the host it contacts", func() {
		c := prepare(tools.WebFetch{}, nil, map[string]any{"url": "https://Docs.Example.COM./a?b=1"})
		Expect(c.Access()).To(Equal(tools.Access{Host: "docs.example.com"}))
		Expect(c.Title()).To(Equal("Fetch from docs.example.com: https://docs.example.com/a?b=1"))
	})
	It("refuses a user@host URL, which can look like another host", func() {
		_, err := tools.WebFetch{}.Prepare(nil, raw(map[string]any{"url": "https://docs.python.org@evil.example/"}))
		Expect(err).To(MatchError(ContainSubstring("user name or password")))
	})
	It("does not follow a redirect to another host", func() {
		GinkgoT().Setenv(tools.EnvWebFetchAllowPrivate, "1")
		hit := false
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hit = true }))
		DeferCleanup(evil.Close)
		evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1) + "/?data=secret"
		open := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, evilURL, http.StatusFound)
		}))
		DeferCleanup(open.Close)
		res := run(tools.WebFetch{}, nil, map[string]any{"url": open.URL + "/go"})
		Expect(hit).To(BeFalse())
		Expect(res.Output).To(ContainSubstring("Redirected to another host: " + evilURL))
		Expect(res.Output).To(ContainSubstring("not followed"))
	})
})
