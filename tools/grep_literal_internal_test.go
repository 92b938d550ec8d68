package tools

import (
	"regexp"

	. "github.com/onsi/ginkgo/v2"
	gm "github.com/onsi/gomega"
)

var _ = Describe("grep literal prefilter", func() {
	DescribeTable("extracts a required literal",
		func(expr, lit string, fold bool) {
			f := newLiteralFilter(expr)
			if lit == "" {
				gm.Expect(f).To(gm.BeNil())
				return
			}
			gm.Expect(f).NotTo(gm.BeNil())
			gm.Expect(string(f.lit)).To(gm.Equal(lit))
			gm.Expect(f.fold).To(gm.Equal(fold))
		},
		Entry(nil, "(?m)needle", "needle", false),
		Entry(nil, `(?m)func\s+\w+Handler\(`, "Handler(", false),
		Entry(nil, "(?mi)needle", "needle", true),
		Entry(nil, "(?mi)NeedleS", "needle", true),
		Entry(nil, "(?mi)desk", "de", true),
		Entry(nil, "(?m)a|b", "", false),
		Entry(nil, "(?m)(foo)+bar?", "foo", false),
		Entry(nil, "(?m)x*", "", false),
		Entry(nil, "(?mi)ks", "", false),
		Entry(nil, "(?m)héllo", "héllo", false),
	)

	It("never rejects text the regexp matches", func() {
		cases := []struct{ expr, text string }{
			{"(?mi)needle", "xx NeEdLe yy"},
			{"(?mi)kelvin", "\u212Aelvin"},
			{"(?mi)mask", "MA\u017FK"},
			{`(?m)^\d+ items$`, "a\n12 items\n"},
			{"(?mi)ab", "aAB"},
			{"(?mi)2ab", "x2AB"},
			{"(?mi)zz", "zZ"},
			{"(?mi)zy", "zzY"},
		}
		for _, c := range cases {
			gm.Expect(regexp.MustCompile(c.expr).MatchString(c.text)).To(gm.BeTrue(), c.expr)
			gm.Expect(newLiteralFilter(c.expr).match([]byte(c.text))).To(gm.BeTrue(), c.expr)
		}
		gm.Expect(newLiteralFilter("(?mi)needle").match([]byte("no match here, needl"))).To(gm.BeFalse())
		gm.Expect(indexFoldASCII([]byte("aaAB"), []byte("ab"))).To(gm.Equal(2))
		gm.Expect(indexFoldASCII([]byte("1x2"), []byte("2"))).To(gm.Equal(2))
	})
})
