package tools_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
)

var _ = Describe("read_file", func() {
	var env *tools.Env
	BeforeEach(func() {
		env = tempEnv()
		writeFiles(env.Cwd, map[string]string{
			"five.txt":   "one\ntwo\nthree\nfour\nfive\n",
			"nonl.txt":   "a\nb",
			"empty.txt":  "",
			"utf8.txt":   "héllo wörld ✓\n",
			"sub/x.txt":  "x\n",
			"latin1.txt": "caf\xe9\n",
			"nul.bin":    "abc\x00def",
			"crlf.txt":   "a\r\nb\r\n",
			"big/lines.txt": func() string {
				var b strings.Builder
				for i := 1; i <= 120; i++ {
					fmt.Fprintf(&b, "line %d\n", i)
				}
				return b.String()
			}(),
		})
	})

	It("numbers lines like cat -n", func() {
		res := run(tools.ReadFile{}, env, map[string]any{"path": "five.txt"})
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).To(Equal("     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n     5\tfive\n"))
	})

	It("reads an inclusive 1-based range", func() {
		res := run(tools.ReadFile{}, env, map[string]any{"path": "five.txt", "start_line": 2, "end_line": 4})
		Expect(res.Output).To(Equal("     2\ttwo\n     3\tthree\n     4\tfour\n"))
		res = run(tools.ReadFile{}, env, map[string]any{"path": "five.txt", "start_line": 4})
		Expect(res.Output).To(Equal("     4\tfour\n     5\tfive\n"))
		res = run(tools.ReadFile{}, env, map[string]any{"path": "five.txt", "end_line": 1})
		Expect(res.Output).To(Equal("     1\tone\n"))
		res = run(tools.ReadFile{}, env, map[string]any{"path": "five.txt", "start_line": 5, "end_line": 50})
		Expect(res.Output).To(Equal("     5\tfive\n"))
	})

	It("reports a start_line past the end", func() {
		res := run(tools.ReadFile{}, env, map[string]any{"path": "five.txt", "start_line": 9})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(ContainSubstring("past the end"))
		Expect(res.Output).To(ContainSubstring("5 lines"))
	})

	It("handles a last line without newline, empty files, UTF-8, CRLF and absolute paths", func() {
		Expect(run(tools.ReadFile{}, env, map[string]any{"path": "nonl.txt"}).Output).To(Equal("     1\ta\n     2\tb\n"))
		res := run(tools.ReadFile{}, env, map[string]any{"path": "empty.txt"})
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).To(ContainSubstring("empty"))
		Expect(run(tools.ReadFile{}, env, map[string]any{"path": "utf8.txt"}).Output).To(Equal("     1\théllo wörld ✓\n"))
		Expect(run(tools.ReadFile{}, env, map[string]any{"path": "crlf.txt"}).Output).To(Equal("     1\ta\r\n     2\tb\r\n"))
		abs := filepath.Join(env.Cwd, "sub", "x.txt")
		Expect(run(tools.ReadFile{}, env, map[string]any{"path": abs}).Output).To(Equal("     1\tx\n"))
	})

	It("truncates at the line cap with a note", func() {
		rf := tools.ReadFile{Limits: tools.Limits{MaxReadLines: 50}}
		res := tools.Execute(ctx(), rf, env, raw(map[string]any{"path": "big/lines.txt"}), nil)
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).To(ContainSubstring("    50\tline 50\n"))
		Expect(res.Output).NotTo(ContainSubstring("line 51\n"))
		Expect(res.Output).To(ContainSubstring("[Truncated: showing lines 1-50"))
		Expect(res.Output).To(ContainSubstring("start_line=51"))
		res = tools.Execute(ctx(), rf, env, raw(map[string]any{"path": "big/lines.txt", "start_line": 100}), nil)
		Expect(res.Output).To(HavePrefix("   100\tline 100\n"))
		Expect(res.Output).To(HaveSuffix("   120\tline 120\n"))
	})

	It("truncates at the byte cap without splitting UTF-8", func() {
		writeFiles(env.Cwd, map[string]string{"wide.txt": strings.Repeat("é", 100) + "\nnext\n"})
		rf := tools.ReadFile{Limits: tools.Limits{MaxReadBytes: 51}}
		res := tools.Execute(ctx(), rf, env, raw(map[string]any{"path": "wide.txt"}), nil)
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).To(HavePrefix("     1\t" + strings.Repeat("é", 25) + "\n"))
		Expect(res.Output).To(ContainSubstring("[Truncated"))
		Expect(res.Output).NotTo(ContainSubstring("next"))
	})

	It("applies the default 50,000-line cap", func() {
		var b strings.Builder
		for i := 1; i <= 50_010; i++ {
			b.WriteString("x\n")
		}
		writeFiles(env.Cwd, map[string]string{"huge.txt": b.String()})
		res := run(tools.ReadFile{}, env, map[string]any{"path": "huge.txt"})
		Expect(res.Output).To(ContainSubstring(" 50000\tx\n"))
		Expect(res.Output).NotTo(ContainSubstring(" 50001\t"))
		Expect(res.Output).To(ContainSubstring("50000 lines"))
	})

	It("gives clear errors for missing files, directories and binary files", func() {
		res := run(tools.ReadFile{}, env, map[string]any{"path": "nope.txt"})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(Equal("File not found: nope.txt"))
		res = run(tools.ReadFile{}, env, map[string]any{"path": "sub"})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(ContainSubstring("sub is a directory"))
		res = run(tools.ReadFile{}, env, map[string]any{"path": "nul.bin"})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(ContainSubstring("binary"))
		res = run(tools.ReadFile{}, env, map[string]any{"path": "latin1.txt"})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(ContainSubstring("binary"))
	})
})

var _ = Describe("list_files", func() {
	It("lists sorted entries, marking directories and giving file sizes", func() {
		env := tempEnv()
		writeFiles(env.Cwd, map[string]string{"b.txt": "12345", "a.txt": "", "c/d.txt": "x", ".hidden": "hi", "Z.md": "zz"})
		Expect(os.Symlink("c", filepath.Join(env.Cwd, "link"))).To(Succeed())
		res := run(tools.ListFiles{}, env, map[string]any{})
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).To(Equal(".hidden (2 bytes)\nZ.md (2 bytes)\na.txt (0 bytes)\nb.txt (5 bytes)\nc/\nlink/ -> c\n"))
		Expect(run(tools.ListFiles{}, env, map[string]any{"path": "c"}).Output).To(Equal("d.txt (1 bytes)\n"))
	})

	It("errors on a missing path or a file, and reports empty directories", func() {
		env := tempEnv()
		writeFiles(env.Cwd, map[string]string{"f": "x"})
		Expect(os.Mkdir(filepath.Join(env.Cwd, "empty"), 0o755)).To(Succeed())
		res := run(tools.ListFiles{}, env, map[string]any{"path": "missing"})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(ContainSubstring("not found"))
		res = run(tools.ListFiles{}, env, map[string]any{"path": "f"})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(ContainSubstring("is a file"))
		res = run(tools.ListFiles{}, env, map[string]any{"path": "empty"})
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).To(ContainSubstring("empty"))
	})
})

var _ = Describe("glob", func() {
	var env *tools.Env
	BeforeEach(func() {
		env = tempEnv()
		writeFiles(env.Cwd, map[string]string{
			"main.go":          "",
			"a/b/deep.go":      "",
			"a/mid.go":         "",
			"a/readme.md":      "",
			".git/hooks/x.go":  "",
			"vendor/v.go":      "",
			"dir.go/inner.txt": "",
		})
		base := time.Now().Add(-time.Hour)
		setMtime(filepath.Join(env.Cwd, "main.go"), base.Add(1*time.Minute))
		setMtime(filepath.Join(env.Cwd, "a/b/deep.go"), base.Add(3*time.Minute))
		setMtime(filepath.Join(env.Cwd, "a/mid.go"), base.Add(2*time.Minute))
		setMtime(filepath.Join(env.Cwd, "vendor/v.go"), base)
	})

	It("matches ** patterns, files only, newest first, skipping .git", func() {
		res := run(tools.Glob{}, env, map[string]any{"pattern": "**/*.go"})
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).To(Equal("a/b/deep.go\na/mid.go\nmain.go\nvendor/v.go\n"))
	})

	It("honours path, a directory prefix in the pattern and single-level patterns", func() {
		Expect(run(tools.Glob{}, env, map[string]any{"pattern": "**/*.go", "path": "a"}).Output).To(Equal("a/b/deep.go\na/mid.go\n"))
		Expect(run(tools.Glob{}, env, map[string]any{"pattern": "a/**/*.{go,md}"}).Output).To(ContainSubstring("a/readme.md"))
		Expect(run(tools.Glob{}, env, map[string]any{"pattern": "*.go"}).Output).To(Equal("main.go\n"))
		abs := filepath.Join(env.Cwd, "a")
		Expect(run(tools.Glob{}, env, map[string]any{"pattern": abs + "/*.go"}).Output).To(Equal("a/mid.go\n"))
	})

	It("says when nothing matches", func() {
		res := run(tools.Glob{}, env, map[string]any{"pattern": "**/*.rs"})
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).To(ContainSubstring("No files found"))
	})
})

var _ = Describe("write_file", func() {
	It("creates parent directories and reports a diff with no old text", func() {
		env := tempEnv()
		res := run(tools.WriteFile{}, env, map[string]any{"path": "new/dir/hello.txt", "content": "hi\nthere\n"})
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).To(ContainSubstring("2 lines"))
		abs := filepath.Join(env.Cwd, "new/dir/hello.txt")
		Expect(os.ReadFile(abs)).To(Equal([]byte("hi\nthere\n")))
		Expect(res.Diff).NotTo(BeNil())
		Expect(res.Diff.Path).To(Equal(abs))
		Expect(res.Diff.OldText).To(BeNil())
		Expect(res.Diff.NewText).To(Equal("hi\nthere\n"))
	})

	It("overwrites keeping the mode, with the old text in the diff", func() {
		env := tempEnv()
		abs := filepath.Join(env.Cwd, "run.sh")
		Expect(os.WriteFile(abs, []byte("old\n"), 0o755)).To(Succeed())
		res := run(tools.WriteFile{}, env, map[string]any{"path": "run.sh", "content": "new"})
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).To(ContainSubstring("1 line "))
		Expect(*res.Diff.OldText).To(Equal("old\n"))
		Expect(res.Diff.NewText).To(Equal("new"))
		fi, err := os.Stat(abs)
		Expect(err).NotTo(HaveOccurred())
		Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o755)))
	})

	It("refuses to overwrite a directory", func() {
		env := tempEnv()
		Expect(os.Mkdir(filepath.Join(env.Cwd, "d"), 0o755)).To(Succeed())
		res := run(tools.WriteFile{}, env, map[string]any{"path": "d", "content": "x"})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(ContainSubstring("is a directory"))
	})
})

var _ = Describe("edit_file", func() {
	var env *tools.Env
	var abs string
	BeforeEach(func() {
		env = tempEnv()
		abs = filepath.Join(env.Cwd, "f.go")
		Expect(os.WriteFile(abs, []byte("a := 1\nb := 2\na := 1\nc := 3\n"), 0o600)).To(Succeed())
	})

	It("errors when old_string is not found", func() {
		res := run(tools.EditFile{}, env, map[string]any{"path": "f.go", "old_string": "zzz", "new_string": "y"})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(ContainSubstring("old_string not found"))
	})

	It("errors naming the count when old_string matches twice", func() {
		res := run(tools.EditFile{}, env, map[string]any{"path": "f.go", "old_string": "a := 1", "new_string": "a := 9"})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(ContainSubstring("old_string matches 2 times"))
		Expect(res.Output).To(ContainSubstring("provide more context"))
		Expect(os.ReadFile(abs)).To(Equal([]byte("a := 1\nb := 2\na := 1\nc := 3\n")))
	})

	It("replaces exactly one match and returns the whole-file diff", func() {
		res := run(tools.EditFile{}, env, map[string]any{"path": "f.go", "old_string": "a := 1\nc", "new_string": "a := 7\nc"})
		Expect(res.IsError).To(BeFalse(), res.Output)
		Expect(res.Output).To(ContainSubstring("line 3"))
		want := "a := 1\nb := 2\na := 7\nc := 3\n"
		Expect(os.ReadFile(abs)).To(Equal([]byte(want)))
		Expect(*res.Diff.OldText).To(Equal("a := 1\nb := 2\na := 1\nc := 3\n"))
		Expect(res.Diff.NewText).To(Equal(want))
		Expect(res.Diff.Path).To(Equal(abs))
		fi, _ := os.Stat(abs)
		Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	})

	It("errors for a missing file", func() {
		res := run(tools.EditFile{}, env, map[string]any{"path": "nope.go", "old_string": "a", "new_string": "b"})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(ContainSubstring("File not found"))
	})
})
