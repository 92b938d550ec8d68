package llm

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// maxRunText bounds the text takeRun joins into one delta: a client's
// chunk notification is at most a few of them (modelCall joins up to
// 64 KiB), and the join buffer stays small.
const maxRunText = 16 << 10

// takeRun is the OpenAI decoder's fast path on the SSE read buffer
// (sseFastPath): the chunks of a learned shape (see chunkShape) that lie
// whole at the start of b, one after another, are matched straight on the
// buffer — "data: " + head, one string token, tail, a blank line — without
// looking for their line ends first, and the text of a run of them is
// emitted as one delta (Buffered as the run's last chunk would have it).
// That is what the common reading gives, the deltas joined: the token is
// checked for raw line ends, which would end the data line inside it
// (FuzzOpenAIRun compares both ways).
//
// Between two tokens of a run lie the first chunk's tail and the next
// one's head, compared as one: a plain token (printable ASCII without '"'
// or '\\', told by a word test that also finds its end) costs that test,
// one comparison and the copy of its text. A delta joined from plain
// tokens says so (Event.PlainText): the client's notification copies it
// unescaped.
func (s *oaStream) takeRun(b []byte) (n, firstNL int) {
	sh := &s.shapes[0]
	if !sh.startsEvent(b) {
		// The thinking shape, unless an event can match both: then
		// shapeChunk's order decides, and the common reading takes it.
		if sh = &s.shapes[1]; s.shapesOverlap || !sh.startsEvent(b) {
			return 0, -2
		}
	}
	h, t, between := sh.eventHead, sh.eventTail, sh.between
	p := len(h) // where the token's text starts
	var first []byte
	firstEsc, plain, count := false, true, 0
	s.join = s.join[:0]
	for {
		// b[:p] is this chunk's head; its text starts at p.
		q := p + plainPrefix(b[p:])
		text, esc, end := b[p:q], false, q // end: where the tail starts
		// The common chunk: a plain token, and the tail and the next
		// chunk's head after it, compared as one.
		next := len(b)-q >= len(between) && string(b[q:q+len(between)]) == string(between)
		if !next && (len(b)-q < len(t) || string(b[q:q+len(t)]) != string(t)) {
			// Not a plain token followed by the tail: read as jscan
			// reads it, refused with a raw line end.
			sc := jscan{d: b[p-1:]}
			tok, e, ok := sc.str()
			end = p - 1 + sc.i - 1
			if !ok || bytes.IndexByte(tok, '\n') >= 0 || len(b)-end < len(t) || string(b[end:end+len(t)]) != string(t) {
				break
			}
			text, esc, plain = tok, e, false
			if !esc {
				text = tok[1 : len(tok)-1]
			}
			next = len(b)-end >= len(between) && string(b[end:end+len(between)]) == string(between)
		}
		if end == p {
			// No text: it ends a run, alone, as it would make the delta
			// before say Buffered where the run's end may not.
			if count == 0 {
				count, n = 1, end+len(t)
			}
			break
		}
		switch count {
		case 0:
			first, firstEsc = text, esc
		case 1:
			s.join = appendTokenText(s.join, first, firstEsc)
			s.join = appendTokenText(s.join, text, esc)
		default:
			if esc {
				s.join = appendTokenText(s.join, text, esc)
			} else {
				s.join = append(s.join, text...)
			}
		}
		count++
		n = end + len(t)
		if !next || len(s.join) >= maxRunText {
			break
		}
		p = end + len(between)
	}
	if count == 0 {
		return 0, -2
	}
	firstNL, more := eventEnd(b[n:])
	var out string
	if count == 1 {
		if firstEsc {
			out = own(parseJSON(first))
		} else {
			out = s.slab.string(first)
		}
	} else {
		out = s.slab.string(s.join)
		if cap(s.join) > 2*maxRunText {
			s.join = nil // one very long token: not kept for the stream
		}
	}
	if out != "" {
		s.out(Event{Type: sh.kind, Text: out, Buffered: more, PlainText: plain})
	}
	return n, firstNL
}

// appendTokenText appends a token's text to b: text itself, or when esc
// the whole token (quotes included) unescaped as gjson does (textOf).
func appendTokenText(b, text []byte, esc bool) []byte {
	if !esc {
		return append(b, text...)
	}
	return append(b, parseJSON(text).Str...)
}

// startsEvent reports whether b starts with the shape's event head.
func (sh *chunkShape) startsEvent(b []byte) bool {
	h := sh.eventHead
	return len(h) > 0 && len(b) >= len(h) && string(b[:len(h)]) == string(h)
}

// plainPrefix returns the length of b's leading run of plain bytes:
// printable ASCII other than '"' and '\\' (which needs no JSON escaping
// and holds no line end). Eight bytes at a time; the first flagged byte of
// a word is exact (a borrow runs only upward from a byte that is flagged
// itself).
func plainPrefix(b []byte) int {
	n := len(b)
	for len(b) >= 8 {
		if bad := notPlain8(binary.LittleEndian.Uint64(b)); bad != 0 {
			return n - len(b) + bits.TrailingZeros64(bad)>>3
		}
		b = b[8:]
	}
	for i, c := range b {
		if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return n - len(b) + i
		}
	}
	return n
}

// notPlain8 has the high bit set of each byte of x (little-endian) that
// is below 0x20, 0x80 or above, '"' or '\\' (protocol's plainASCII8), and
// perhaps of bytes above the first such one. x^0x02 takes '"' to 0x20 and
// keeps the control bytes below it, so one "below 0x21" test takes both;
// x^'\\' is zero at a backslash; a byte of 0x80 or above is flagged by
// x itself, so neither test needs to exclude one.
func notPlain8(x uint64) uint64 {
	const ones = 0x0101010101010101
	lowOrQuote := (x ^ (ones * 0x02)) - ones*0x21
	backslash := (x ^ (ones * '\\')) - ones
	return (lowOrQuote | backslash | x) & (ones * 0x80)
}
