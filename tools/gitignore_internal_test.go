package tools

import (
	. "github.com/onsi/ginkgo/v2"
	gm "github.com/onsi/gomega"
)

var _ = Describe("gitignore matching", func() {
	root := &ignoreNode{rules: parseGitignore([]byte(
		"# comment\n\n*.log\n!important.log\n/rootonly\nbuild/\ndoc/*.txt\n**/logs\nfoo/**\na/**/b\ntrail   \n\\!bang\n[Tt]mp?\n{x,y}\n"))}
	nested := &ignoreNode{parent: root, base: "pkg", rules: parseGitignore([]byte("*.gen\n!keep.log\n/local\n"))}

	DescribeTable("decides like git",
		func(n *ignoreNode, path string, isDir, want bool) {
			gm.Expect(n.ignored(path, isDir)).To(gm.Equal(want))
		},
		Entry("basename glob at any depth", root, "x/y/z.log", false, true),
		Entry("negation", root, "x/important.log", false, false),
		Entry("leading slash anchors to the root", root, "rootonly", false, true),
		Entry("anchored does not match deeper", root, "x/rootonly", false, false),
		Entry("dir-only matches dirs", root, "x/build", true, true),
		Entry("dir-only does not match files", root, "x/build", false, false),
		Entry("middle slash anchors", root, "doc/a.txt", false, true),
		Entry("middle slash anchored, not deeper", root, "x/doc/a.txt", false, false),
		Entry("* does not cross /", root, "doc/sub/a.txt", false, false),
		Entry("leading **/", root, "deep/er/logs", true, true),
		Entry("leading **/ at the top", root, "logs", false, true),
		Entry("trailing /** matches inside", root, "foo/bar", false, true),
		Entry("trailing /** does not match the dir itself", root, "foo", true, false),
		Entry("inner /**/ zero dirs", root, "a/b", false, true),
		Entry("inner /**/ several dirs", root, "a/x/y/b", false, true),
		Entry("trailing spaces trimmed", root, "trail", false, true),
		Entry("escaped !", root, "!bang", false, true),
		Entry("character class and ?", root, "tmp1", false, true),
		Entry("class other case", root, "Tmpz", false, true),
		Entry("braces are literal", root, "{x,y}", false, true),
		Entry("braces are not alternation", root, "x", false, false),
		Entry("unrelated", root, "main.go", false, false),
		Entry("nested file rules apply below it", nested, "pkg/a.gen", false, true),
		Entry("nested rules do not apply elsewhere", nested, "other/a.gen", false, false),
		Entry("deeper file overrides", nested, "pkg/keep.log", false, false),
		Entry("parent rules still apply", nested, "pkg/x.log", false, true),
		Entry("nested anchored", nested, "pkg/local", false, true),
		Entry("nested anchored not deeper", nested, "pkg/sub/local", false, false),
	)
})
