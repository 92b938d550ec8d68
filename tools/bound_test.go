package tools_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
)

var savedPath = regexp.MustCompile(`saved to (\S+\.txt)`)

var _ = Describe("Bound", func() {
	It("leaves small results alone", func() {
		res := tools.Result{Output: "small", IsError: true, Raw: 1}
		Expect(tools.Bound(res, GinkgoT().TempDir(), 100)).To(Equal(res))
		exact := tools.Result{Output: strings.Repeat("é", 100)}
		Expect(tools.Bound(exact, GinkgoT().TempDir(), 100)).To(Equal(exact))
	})

	It("spills a large output under Home and keeps the head and tail", func() {
		home := GinkgoT().TempDir()
		var b strings.Builder
		for i := 1; i <= 20000; i++ {
			b.WriteString("line " + strconv.Itoa(i) + "\n")
		}
		full := b.String()
		diff := &tools.Diff{Path: "/x", NewText: "n"}
		res := tools.Bound(tools.Result{Output: full, IsError: true, Diff: diff, Raw: "r"}, home, 50_000)
		Expect(res.IsError).To(BeTrue())
		Expect(res.Diff).To(Equal(diff))
		Expect(res.Raw).To(Equal("r"))
		Expect(utf8.RuneCountInString(res.Output)).To(BeNumerically("<=", 50_000))
		Expect(res.Output).To(HavePrefix("line 1\nline 2\n"))
		Expect(res.Output).To(HaveSuffix("line 19999\nline 20000\n"))
		Expect(res.Output).To(ContainSubstring("characters omitted"))
		Expect(res.Output).To(ContainSubstring("20000 lines"))
		m := savedPath.FindStringSubmatch(res.Output)
		Expect(m).To(HaveLen(2))
		Expect(filepath.Dir(m[1])).To(Equal(filepath.Join(home, "tool-outputs")))
		Expect(os.ReadFile(m[1])).To(Equal([]byte(full)))
	})

	It("uses the default limit of 50,000 characters and never splits UTF-8", func() {
		full := strings.Repeat("日本語", 30_000) // no newlines, 90,000 characters
		res := tools.Bound(tools.Result{Output: full}, GinkgoT().TempDir(), 0)
		Expect(utf8.ValidString(res.Output)).To(BeTrue())
		Expect(utf8.RuneCountInString(res.Output)).To(BeNumerically("<=", 50_000))
		Expect(res.Output).To(HavePrefix(strings.Repeat("日本語", 1000)))
		Expect(res.Output).To(HaveSuffix(strings.Repeat("日本語", 1000)))
	})
})
