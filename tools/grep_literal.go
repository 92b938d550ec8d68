package tools

import (
	"bytes"
	"regexp/syntax"
	"unicode/utf8"
)

// literalFilter is a cheap file-level prefilter for grep: a byte string
// that every match of the regexp contains (exactly, or ASCII
// case-insensitively). Files without it are skipped without running the
// regexp, which matters for patterns without a literal prefix and for
// case-insensitive ones, where Go's regexp cannot use its fast
// literal-prefix scan.
type literalFilter struct {
	lit  []byte // lower-case when fold
	fold bool
}

// newLiteralFilter derives a filter from expr (compiled with syntax.Perl
// flags, like regexp.Compile); nil when there is no useful literal.
func newLiteralFilter(expr string) *literalFilter {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil
	}
	lit, fold := requiredLiteral(re)
	if len(lit) == 0 {
		return nil
	}
	if !fold {
		b := make([]byte, 0, len(lit))
		for _, r := range lit {
			b = utf8.AppendRune(b, r)
		}
		return &literalFilter{lit: b}
	}
	// Case folding: only ASCII letters whose fold orbit is ASCII-only can
	// be searched byte-wise ('k' also folds to U+212A KELVIN SIGN and 's'
	// to U+017F LONG S), so use the longest run of such runes.
	var best, cur []byte
	for _, r := range lit {
		if r >= utf8.RuneSelf || r == 'k' || r == 'K' || r == 's' || r == 'S' {
			cur = nil
			continue
		}
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		cur = append(cur, byte(r))
		if len(cur) > len(best) {
			best = append(best[:0:0], cur...)
		}
	}
	if len(best) < 2 {
		return nil
	}
	return &literalFilter{lit: best, fold: true}
}

// requiredLiteral returns the longest literal that every match of re
// contains, and whether it is case-folded.
func requiredLiteral(re *syntax.Regexp) ([]rune, bool) {
	switch re.Op {
	case syntax.OpLiteral:
		return re.Rune, re.Flags&syntax.FoldCase != 0
	case syntax.OpCapture, syntax.OpPlus:
		return requiredLiteral(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return requiredLiteral(re.Sub[0])
		}
	case syntax.OpConcat:
		var best []rune
		var bestFold bool
		for _, sub := range re.Sub {
			lit, fold := requiredLiteral(sub)
			if len(lit) > len(best) || (len(lit) == len(best) && bestFold && !fold) {
				best, bestFold = lit, fold
			}
		}
		return best, bestFold
	}
	return nil, false
}

// match reports whether data may contain a match.
func (f *literalFilter) match(data []byte) bool {
	if f == nil {
		return true
	}
	if !f.fold {
		return bytes.Contains(data, f.lit)
	}
	return indexFoldASCII(data, f.lit) >= 0
}

// indexFoldASCII finds lit (lower-case ASCII) in data ignoring ASCII case.
func indexFoldASCII(data, lit []byte) int {
	n := len(lit)
	c0 := lit[0]
	if c0 < 'a' || c0 > 'z' {
		for i := 0; i+n <= len(data); {
			j := bytes.IndexByte(data[i:len(data)-n+1], c0)
			if j < 0 {
				return -1
			}
			i += j
			if bytes.EqualFold(data[i:i+n], lit) {
				return i
			}
			i++
		}
		return -1
	}
	lo, up := c0, c0-('a'-'A')
	end := len(data) - n + 1
	if end <= 0 {
		return -1
	}
	nextLo, nextUp := -2, -2 // -2: not searched yet; -1: none left
	for i := 0; i < end; {
		if nextLo != -1 && nextLo < i {
			if j := bytes.IndexByte(data[i:end], lo); j >= 0 {
				nextLo = i + j
			} else {
				nextLo = -1
			}
		}
		if nextUp != -1 && nextUp < i {
			if j := bytes.IndexByte(data[i:end], up); j >= 0 {
				nextUp = i + j
			} else {
				nextUp = -1
			}
		}
		switch {
		case nextLo < 0 && nextUp < 0:
			return -1
		case nextUp < 0 || (nextLo >= 0 && nextLo < nextUp):
			i = nextLo
		default:
			i = nextUp
		}
		if bytes.EqualFold(data[i:i+n], lit) {
			return i
		}
		i++
	}
	return -1
}
