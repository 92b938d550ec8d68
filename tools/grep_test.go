package tools_test

import (
	"fmt"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
)

var _ = Describe("grep", func() {
	var env *tools.Env
	BeforeEach(func() {
		env = tempEnv()
		files := map[string]string{
			".gitignore":            "*.log\n/build/\nnode_modules/\n!keep.log\ntmp*\n# comment\n\\#hash\nsub/gen/\n",
			"main.go":               "package main\n\nfunc main() {\n\tprintln(\"TODO: hello\")\n}\n",
			"util/util.go":          "package util\n// todo lower\nfunc Helper() {}\n",
			"util/.gitignore":       "gen_*.go\n!gen_keep.go\n",
			"util/gen_x.go":         "TODO generated\n",
			"util/gen_keep.go":      "TODO kept\n",
			"app.log":               "TODO in log\n",
			"keep.log":              "TODO in keep\n",
			"build/out.txt":         "TODO built\n",
			"sub/build/out.txt":     "TODO not root build\n",
			"sub/gen/g.txt":         "TODO anchored ignore\n",
			"web/node_modules/m.js": "TODO dep\n",
			"tmpfile.txt":           "TODO tmp\n",
			"#hash":                 "TODO hash\n", // ignored by the escaped \#hash line
			".git/config":           "TODO git\n",
			"bin/tool":              "TODO\x00binary\n",
			"docs/a.md":             "TODO doc\nno\nTODO again\n",
		}
		// Many files so that the worker pool has something to do.
		for i := range 300 {
			files[fmt.Sprintf("gen/d%d/f%d.txt", i%17, i)] = fmt.Sprintf("line one\nneedle %d\nline three\n", i)
		}
		writeFiles(env.Cwd, files)
	})

	It("lists matching files sorted, respecting root and nested .gitignore, skipping .git and binaries", func() {
		res := run(tools.Grep{}, env, map[string]any{"pattern": "TODO"})
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).To(Equal(strings.Join([]string{
			"docs/a.md", "keep.log", "main.go", "sub/build/out.txt", "util/gen_keep.go",
		}, "\n") + "\n"))
	})

	It("prints path:line:text in content mode, sorted by path then line", func() {
		res := run(tools.Grep{}, env, map[string]any{"pattern": "TODO", "output_mode": "content", "path": "docs"})
		Expect(res.Output).To(Equal("docs/a.md:1:TODO doc\ndocs/a.md:3:TODO again\n"))
		res = run(tools.Grep{}, env, map[string]any{"pattern": `^needle 1\d$`, "output_mode": "content"})
		lines := strings.Split(strings.TrimSpace(res.Output), "\n")
		Expect(lines).To(HaveLen(10))
		for _, l := range lines {
			Expect(l).To(MatchRegexp(`^gen/d\d+/f1\d\.txt:2:needle 1\d$`))
		}
		Expect(isSorted(lines)).To(BeTrue())
	})

	It("is case-insensitive on request", func() {
		res := run(tools.Grep{}, env, map[string]any{"pattern": "todo", "path": "util"})
		Expect(res.Output).To(Equal("util/util.go\n"))
		res = run(tools.Grep{}, env, map[string]any{"pattern": "todo", "path": "util", "case_insensitive": true})
		Expect(res.Output).To(Equal("util/gen_keep.go\nutil/util.go\n"))
	})

	It("filters by glob", func() {
		res := run(tools.Grep{}, env, map[string]any{"pattern": "TODO", "glob": "*.go"})
		Expect(res.Output).To(Equal("main.go\nutil/gen_keep.go\n"))
		res = run(tools.Grep{}, env, map[string]any{"pattern": "TODO", "glob": "util/**"})
		Expect(res.Output).To(Equal("util/gen_keep.go\n"))
	})

	It("caps results at max_results deterministically with a note", func() {
		var first string
		for range 3 {
			res := run(tools.Grep{}, env, map[string]any{"pattern": "needle", "max_results": 5})
			lines := strings.Split(strings.TrimSpace(res.Output), "\n")
			Expect(lines).To(HaveLen(6))
			Expect(lines[5]).To(ContainSubstring("showing the first 5 of 300 matching files"))
			if first == "" {
				first = res.Output
			}
			Expect(res.Output).To(Equal(first))
		}
		res := run(tools.Grep{}, env, map[string]any{"pattern": "needle|line", "output_mode": "content", "max_results": 4})
		Expect(strings.Split(res.Output, "\n")[:4]).To(Equal([]string{
			"gen/d0/f0.txt:1:line one", "gen/d0/f0.txt:2:needle 0", "gen/d0/f0.txt:3:line three", "gen/d0/f102.txt:1:line one",
		}))
		Expect(res.Output).To(ContainSubstring("showing the first 4 of 900 matching lines"))
	})

	It("searches a single file and reports no matches plainly", func() {
		res := run(tools.Grep{}, env, map[string]any{"pattern": "func", "path": "main.go", "output_mode": "content"})
		Expect(res.Output).To(Equal("main.go:3:func main() {\n"))
		res = run(tools.Grep{}, env, map[string]any{"pattern": "zzz_nothing"})
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).To(ContainSubstring("No matches"))
		res = run(tools.Grep{}, env, map[string]any{"pattern": "x", "path": "missing"})
		Expect(res.IsError).To(BeTrue())
	})

	It("applies the repository's .gitignore files when searching a subdirectory", func() {
		writeFiles(env.Cwd, map[string]string{".git/HEAD": "ref", "util/x.log": "TODO log\n", "util/y.txt": "TODO y\n"})
		res := run(tools.Grep{}, env, map[string]any{"pattern": "TODO", "path": filepath.Join(env.Cwd, "util")})
		Expect(res.Output).To(Equal("util/gen_keep.go\nutil/y.txt\n"))
		// Anchored rules of the top .gitignore keep their meaning below it.
		res = run(tools.Grep{}, env, map[string]any{"pattern": "TODO", "path": "sub", "output_mode": "content"})
		Expect(res.Output).To(Equal("sub/build/out.txt:1:TODO not root build\n"))
	})

	It("matches anchors per line and multi-line files correctly", func() {
		writeFiles(env.Cwd, map[string]string{"m/a.txt": "foo\nbar foo\nfoo bar\n\nfoo"})
		res := run(tools.Grep{}, env, map[string]any{"pattern": "^foo$", "path": "m", "output_mode": "content"})
		Expect(res.Output).To(Equal("m/a.txt:1:foo\nm/a.txt:5:foo\n"))
		res = run(tools.Grep{}, env, map[string]any{"pattern": `foo\s+bar`, "path": "m", "output_mode": "content"})
		Expect(res.Output).To(Equal("m/a.txt:3:foo bar\n"))
		res = run(tools.Grep{}, env, map[string]any{"pattern": `^$`, "path": "m", "output_mode": "content"})
		Expect(res.Output).To(Equal("m/a.txt:4:\n"))
	})
})

func isSorted(s []string) bool {
	for i := 1; i < len(s); i++ {
		if s[i-1] > s[i] {
			return false
		}
	}
	return true
}
