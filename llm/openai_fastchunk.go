package llm

import (
	"bytes"
)

// fastChunk handles the chunk that makes up nearly all of a stream: one
// choice with index 0 whose delta carries content and/or reasoning, no
// tool_calls, no finish_reason, no usage object, no error. It scans the
// payload once, strictly, and emits only after the whole payload matched;
// on anything else (other keys' values are skipped as gjson skips them, but
// escaped keys, malformed JSON, trailing bytes, more choices, ... ) it
// returns false having done nothing, and fullChunk decides. So both paths
// give the same events for every payload (FuzzOpenAIFastChunk checks this).
// It halves the decoder's cost per chunk (BenchmarkOpenAIDecode ~0.7µs with
// gjson's ForEach walking every key of every level, ~0.35µs here).
func (s *oaStream) fastChunk(data []byte) bool {
	sc := jscan{d: data}
	if !sc.open('{') {
		return false
	}
	var d fastDelta
	choices := false
	for more := !sc.close('}'); more; {
		k, ok := sc.key()
		if !ok {
			return false
		}
		switch string(k) {
		case "choices":
			if choices || !sc.choices(&d) {
				return false // a second "choices" is processed too: full path
			}
			choices = true
		case "usage":
			if sc.peek() == '{' || !sc.skip() {
				return false
			}
		case "error":
			if !sc.null() {
				return false
			}
		default:
			if !sc.skip() {
				return false
			}
		}
		if more, ok = sc.next('}'); !ok {
			return false
		}
	}
	sc.ws()
	if sc.i != len(data) {
		return false // gjson would look for keys after the object
	}
	s.learnShape(data, &d)
	if t := s.text(d.reasoning); t != "" {
		s.emit(Event{Type: EventThinkingDelta, Text: t})
	}
	if t := s.text(d.content); t != "" {
		s.emit(Event{Type: EventTextDelta, Text: t})
	}
	return true
}

// chunkShape is a chunk fastChunk took, cut around the string token that
// made its one event: head is everything before the token, tail everything
// after. The chunks of a stream differ only in that token (id, created,
// model and fingerprint repeat), so the next chunk is usually head + token
// + tail.
//
// Why that is exact: jscan reads left to right and nothing it decides
// depends on a string token's bytes beyond where the token ends. A chunk
// head + t + tail, with t one whole string token, is therefore scanned as
// the learned chunk was, step for step, except that the delta's field
// holds t; and as the learned chunk's field still held its own token at
// the end (no later key replaced it, checked when learning), fastChunk
// would emit exactly one event of the same kind with text(t). So
// shapeChunk gives what fastChunk gives, and fastChunk what fullChunk
// gives (FuzzOpenAIShapeChunk, FuzzOpenAIFastChunk).
type chunkShape struct {
	head, tail []byte
	kind       EventType
	// eventHead and eventTail are head and tail as the SSE event holds
	// them, with the token's quotes: "data: " + head + `"`, `"` + tail +
	// "\n\n"; between is eventTail + eventHead, what lies between two
	// tokens of a run (takeRun).
	eventHead, eventTail, between []byte
}

// learnShape keeps data's shape when fastChunk took it and it carries one
// non-empty string in the delta: content, or reasoning with content null or
// absent.
func (s *oaStream) learnShape(data []byte, d *fastDelta) {
	tok, kind := d.content, EventTextDelta
	switch {
	case len(d.content) > 2 && d.reasoning == nil:
	case len(d.reasoning) > 2 && d.content == nil:
		tok, kind = d.reasoning, EventThinkingDelta
	default:
		return
	}
	// tok is a slice of data: where it starts (slices share the end of
	// their backing array).
	at := cap(data) - cap(tok)
	if at < 0 || at+len(tok) > len(data) {
		return
	}
	sh := &s.shapes[0]
	if kind == EventThinkingDelta {
		sh = &s.shapes[1]
	}
	sh.head = append(sh.head[:0], data[:at]...)
	sh.tail = append(sh.tail[:0], data[at+len(tok):]...)
	sh.kind = kind
	sh.eventHead = append(append(append(sh.eventHead[:0], "data: "...), sh.head...), '"')
	sh.eventTail = append(append(append(sh.eventTail[:0], '"'), sh.tail...), "\n\n"...)
	sh.between = append(append(sh.between[:0], sh.eventTail...), sh.eventHead...)
	// An event can match both shapes only if one's head starts the
	// other's.
	h0, h1 := s.shapes[0].eventHead, s.shapes[1].eventHead
	s.shapesOverlap = len(h0) > 0 && len(h1) > 0 && (bytes.HasPrefix(h0, h1) || bytes.HasPrefix(h1, h0))
}

// shapeChunk takes a chunk of a learned shape: it checks the head and tail
// bytes and scans only the token between them.
func (s *oaStream) shapeChunk(data []byte) bool {
	for i := range s.shapes {
		sh := &s.shapes[i]
		if len(sh.head) == 0 || len(data) < len(sh.head)+len(sh.tail)+2 ||
			!bytes.HasPrefix(data, sh.head) || !bytes.HasSuffix(data, sh.tail) {
			continue
		}
		tok, esc, ok := shapeToken(data[len(sh.head) : len(data)-len(sh.tail)])
		if !ok {
			continue // not one whole string token between them
		}
		if t := s.textOf(tok, esc); t != "" {
			s.emit(Event{Type: sh.kind, Text: t})
		}
		return true
	}
	return false
}

// shapeToken reports whether b is one whole JSON string token (jscan.str
// taking all of it) and whether it holds a backslash. The common token,
// with neither a quote nor a backslash inside, is told by two searches
// (fewer instructions than str's, or than a word test per 8 bytes); the
// rest by str.
func shapeToken(b []byte) (tok []byte, esc, ok bool) {
	if len(b) < 2 || b[0] != '"' {
		return nil, false, false
	}
	if in := b[1 : len(b)-1]; b[len(b)-1] == '"' && bytes.IndexByte(in, '"') < 0 && bytes.IndexByte(in, '\\') < 0 {
		return b, false, true
	}
	sc := jscan{d: b}
	tok, esc, ok = sc.str()
	return tok, esc, ok && sc.i == len(b)
}

// fastDelta holds string tokens (quotes included; nil for null or absent)
// of the last delta, with choice's last-key-wins rules.
type fastDelta struct {
	content, reasoning []byte
	reasoningIsString  bool
}

// text is own for a string token from fastChunk: unescaped text goes
// through the stream's slab (one allocation per few hundred deltas).
func (s *oaStream) text(tok []byte) string {
	return s.textOf(tok, bytes.IndexByte(tok, '\\') >= 0)
}

// textOf is text for a token whose backslashes are known (esc: any).
func (s *oaStream) textOf(tok []byte, esc bool) string {
	if len(tok) <= 2 {
		return ""
	}
	if !esc {
		return s.slab.string(tok[1 : len(tok)-1])
	}
	return own(parseJSON(tok)) // gjson's unescaping, as the full path
}

// jscan is a strict JSON scanner over one chunk for fastChunk. Methods
// report false when the input is not what the fast path takes.
type jscan struct {
	d []byte
	i int
}

func (sc *jscan) ws() {
	for sc.i < len(sc.d) {
		switch c := sc.d[sc.i]; {
		case c > ' ':
			return
		case c == ' ', c == '\t', c == '\n', c == '\r':
			sc.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, 0 at the end.
func (sc *jscan) peek() byte {
	sc.ws()
	if sc.i < len(sc.d) {
		return sc.d[sc.i]
	}
	return 0
}

// open consumes c, the opening bracket of a value.
func (sc *jscan) open(c byte) bool {
	if sc.peek() != c {
		return false
	}
	sc.i++
	return true
}

// close consumes c if it comes next: an empty object or array.
func (sc *jscan) close(c byte) bool { return sc.open(c) }

// next consumes the ',' (more) or the closing c after a member.
func (sc *jscan) next(c byte) (more, ok bool) {
	switch sc.peek() {
	case ',':
		sc.i++
		return true, true
	case c:
		sc.i++
		return false, true
	}
	return false, false
}

// str consumes a string token and returns it, quotes included; esc
// reports a backslash in it.
func (sc *jscan) str() (tok []byte, esc, ok bool) {
	if sc.peek() != '"' {
		return nil, false, false
	}
	start := sc.i
	rest := sc.d[start+1:]
	// The first quote not escaped: one after an even run of backslashes
	// (what reading byte by byte, a backslash taking the next byte, finds:
	// the byte before a run of backslashes is never an escape).
	for j := 0; ; j++ {
		q := bytes.IndexByte(rest[j:], '"')
		if q < 0 {
			return nil, false, false
		}
		if !esc && bytes.IndexByte(rest[j:j+q], '\\') >= 0 {
			esc = true
		}
		j += q
		n := 0
		for n < j && rest[j-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			sc.i = start + 2 + j
			return sc.d[start:sc.i], esc, true
		}
	}
}

// key consumes `"name":` and returns name; escaped names are refused.
func (sc *jscan) key() ([]byte, bool) {
	tok, esc, ok := sc.str()
	if !ok || esc || sc.peek() != ':' {
		return nil, false
	}
	sc.i++
	return tok[1 : len(tok)-1], true
}

// word consumes a run of letters (true, false, null).
func (sc *jscan) word() []byte {
	s := sc.i
	for sc.i < len(sc.d) && sc.d[sc.i] >= 'a' && sc.d[sc.i] <= 'z' {
		sc.i++
	}
	return sc.d[s:sc.i]
}

func (sc *jscan) null() bool {
	return sc.peek() == 'n' && string(sc.word()) == "null"
}

// strOrNull consumes a string (returned) or null (nil).
func (sc *jscan) strOrNull() ([]byte, bool) {
	if sc.peek() == '"' {
		tok, _, ok := sc.str()
		return tok, ok
	}
	return nil, sc.null()
}

// skip consumes any value, spanning nested ones as gjson does (its
// parseSquash also counts parentheses).
func (sc *jscan) skip() bool {
	c := sc.peek()
	switch {
	case c == '"':
		_, _, ok := sc.str()
		return ok
	case c == 't' || c == 'f' || c == 'n':
		w := string(sc.word())
		return w == "true" || w == "false" || w == "null"
	case c == '-' || c >= '0' && c <= '9':
		sc.i++
		for sc.i < len(sc.d) {
			switch c := sc.d[sc.i]; {
			case c >= '0' && c <= '9', c == '.', c == 'e', c == 'E', c == '+', c == '-':
				sc.i++
				continue
			}
			break
		}
		return true
	case c == '{' || c == '[':
		d, depth := sc.d, 0
		for j := sc.i; j < len(d); j++ {
			switch d[j] {
			case '{', '[', '(':
				depth++
			case '}', ']', ')':
				if depth--; depth == 0 {
					sc.i = j + 1
					return true
				}
			case '"':
				sc.i = j
				if _, _, ok := sc.str(); !ok {
					return false
				}
				j = sc.i - 1
			}
		}
	}
	return false
}

// choices consumes `[]` or `[{choice}]` with index 0, a delta object and
// finish_reason null.
func (sc *jscan) choices(d *fastDelta) bool {
	if !sc.open('[') {
		return false
	}
	if sc.close(']') {
		return true
	}
	if !sc.open('{') {
		return false
	}
	for more := !sc.close('}'); more; {
		k, ok := sc.key()
		if !ok {
			return false
		}
		switch string(k) {
		case "index":
			if sc.peek() != '0' {
				return false
			}
			sc.i++
			if sc.i < len(sc.d) && sc.d[sc.i] >= '0' && sc.d[sc.i] <= '9' || !sc.skipNumberTail() {
				return false
			}
		case "delta":
			if !sc.delta(d) {
				return false
			}
		case "finish_reason":
			if !sc.null() {
				return false
			}
		default:
			if !sc.skip() {
				return false
			}
		}
		if more, ok = sc.next('}'); !ok {
			return false
		}
	}
	return sc.close(']') // one choice only
}

// skipNumberTail accepts the end of the number 0: nothing more of it.
func (sc *jscan) skipNumberTail() bool {
	if sc.i >= len(sc.d) {
		return true
	}
	switch sc.d[sc.i] {
	case '.', 'e', 'E', '+', '-':
		return false
	}
	return true
}

// delta consumes the delta object into d, starting afresh: the full path
// uses the last "delta" key.
func (sc *jscan) delta(d *fastDelta) bool {
	*d = fastDelta{}
	if !sc.open('{') {
		return false
	}
	for more := !sc.close('}'); more; {
		k, ok := sc.key()
		if !ok {
			return false
		}
		switch string(k) {
		case "content":
			if d.content, ok = sc.strOrNull(); !ok {
				return false
			}
		case "reasoning_content":
			if d.reasoning, ok = sc.strOrNull(); !ok {
				return false
			}
			d.reasoningIsString = d.reasoning != nil
		case "reasoning": // taken unless reasoning_content is a string
			tok, ok := sc.strOrNull()
			if !ok {
				return false
			}
			if !d.reasoningIsString {
				d.reasoning, d.reasoningIsString = tok, tok != nil
			}
		case "tool_calls":
			if !sc.null() {
				return false
			}
		default:
			if !sc.skip() {
				return false
			}
		}
		if more, ok = sc.next('}'); !ok {
			return false
		}
	}
	return true
}
