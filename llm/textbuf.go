package llm

import (
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

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
// string then shares. Blocks and buffers of 64 KiB or more have their pages
// mapped in one call before they are filled (prefault).
type textBuf struct {
	full [][]byte // filled blocks, in order
	cur  []byte   // the block being filled
	n    int
}

// WriteString appends s: to the block being filled while it has room
// (nearly every delta), else across new blocks (writeMore).
func (t *textBuf) WriteString(s string) {
	if len(s) <= cap(t.cur)-len(t.cur) {
		t.cur = append(t.cur, s...)
		t.n += len(s)
		return
	}
	t.writeMore(s)
}

// writeMore appends s across new blocks.
func (t *textBuf) writeMore(s string) {
	t.n += len(s)
	for len(s) > 0 {
		if len(t.cur) == cap(t.cur) {
			size := minTextBlock
			if c := cap(t.cur); c > 0 {
				t.full = append(t.full, t.cur)
				size = min(2*c, maxTextBlock)
			}
			t.cur = make([]byte, 0, max(size, min(len(s), maxTextBlock)))
			prefault(t.cur)
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
		prefault(b)
		for _, f := range t.full {
			b = append(b, f...)
		}
		b = append(b, t.cur...)
		t.full, t.cur = nil, b
	}
	return unsafe.String(unsafe.SliceData(t.cur), len(t.cur))
}

// Sizes of textSlab.
const (
	slabSize     = 4 << 10
	maxSlabPiece = 256 // longer pieces get a string of their own
)

// textSlab makes the short strings of a stream's deltas (a token or a few:
// nearly every delta) out of shared blocks, one allocation per slabSize
// bytes instead of one per delta. A block is only ever appended to, so
// the bytes under a string never change; a string kept after the stream
// keeps its block alive (at most slabSize).
type textSlab struct {
	buf []byte
	// borrow: the stream's emit copies delta text itself (BorrowText), so
	// string returns b's own bytes.
	borrow bool
}

// string returns b as a string that does not alias b, or that does when
// borrowing.
func (t *textSlab) string(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if t.borrow {
		return unsafe.String(&b[0], len(b))
	}
	if len(b) > maxSlabPiece {
		return string(b)
	}
	if cap(t.buf)-len(t.buf) < len(b) {
		t.buf = make([]byte, 0, slabSize)
	}
	start := len(t.buf)
	t.buf = append(t.buf, b...)
	return unsafe.String(&t.buf[start], len(b))
}

// own is llm.own for a delta's JSON string value: unescaped text (the
// value aliases the read buffer) goes through the slab.
func (t *textSlab) own(v gjson.Result) string {
	if v.Type != gjson.String || v.Str == "" {
		return ""
	}
	if strings.IndexByte(v.Raw, '\\') >= 0 {
		return v.Str // unescaped into a fresh string already
	}
	return t.string(unsafe.Slice(unsafe.StringData(v.Str), len(v.Str)))
}
