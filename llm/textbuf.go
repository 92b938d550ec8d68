package llm

import "unsafe"

// Block sizes of textBuf: the first block is small (most texts are), each
// next one twice the size, up to maxTextBlock.
const (
	minTextBlock = 256
	maxTextBlock = 64 << 10
)

// textBuf accumulates a streamed text without ever copying what it holds:
// pieces go into blocks that are never regrown, so a long answer costs its
// own size while it streams (a strings.Builder regrows by doubling, copying
// everything each time and holding up to twice the text). String joins
// the blocks once, into a buffer of exactly the text's size that the
// string then shares.
type textBuf struct {
	full [][]byte // filled blocks, in order
	cur  []byte   // the block being filled
	n    int
}

// WriteString appends s.
func (t *textBuf) WriteString(s string) {
	t.n += len(s)
	for len(s) > 0 {
		if len(t.cur) == cap(t.cur) {
			size := minTextBlock
			if c := cap(t.cur); c > 0 {
				t.full = append(t.full, t.cur)
				size = min(2*c, maxTextBlock)
			}
			t.cur = make([]byte, 0, max(size, min(len(s), maxTextBlock)))
		}
		k := min(len(s), cap(t.cur)-len(t.cur))
		t.cur = append(t.cur, s[:k]...)
		s = s[k:]
	}
}

// Len is the length of the text.
func (t *textBuf) Len() int { return t.n }

// String returns the text. The blocks are replaced by one buffer of
// exactly the text's length, which the returned string shares: a later
// WriteString starts a new block (the buffer is full), so the string's
// bytes never change, and calling String again without writes in between
// copies nothing.
func (t *textBuf) String() string {
	if t.n == 0 {
		return ""
	}
	if len(t.full) > 0 || len(t.cur) != cap(t.cur) {
		b := make([]byte, 0, t.n)
		for _, f := range t.full {
			b = append(b, f...)
		}
		b = append(b, t.cur...)
		t.full, t.cur = nil, b
	}
	return unsafe.String(unsafe.SliceData(t.cur), len(t.cur))
}
