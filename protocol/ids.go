package protocol

import (
	"bytes"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting the decoder accepts (goccy/go-json's own
// limit). A deeper message is answered -32600 with its id when PeekID can
// read it, rather than as a parse error with id null.
const MaxDepth = 10_000

// CanonicalID returns the id to answer with: exactly as sent whenever that
// is valid JSON on the wire, because a client matches our answer to its
// request by the id it decodes (a lone surrogate escape such as "\ud800"
// decodes to a string that no re-encoding gives back). Only a string with
// raw bytes that are not UTF-8 is decoded and encoded again (they become
// U+FFFD): sent back raw, they would make the answer invalid JSON. A number
// or null is kept (it is ASCII). Anything else is not an id: nil. id must
// be well-formed JSON (as the decoder leaves it; PeekID checks its own):
// only its UTF-8 is checked here. To match one id with another, use IDKey.
func CanonicalID(id RawMessage) RawMessage {
	id = bytes.TrimSpace(id)
	if !validID(id) {
		return nil
	}
	if id[0] != '"' || plainASCIIString(id) {
		return id
	}
	if utf8.Valid(id) {
		return id
	}
	var s string
	if err := Unmarshal(id, &s); err != nil {
		return nil
	}
	return AppendJSONString(nil, s)
}

// plainASCIIString reports whether a quoted JSON string holds printable
// ASCII only, without escapes: such a string is already canonical.
func plainASCIIString(b []byte) bool {
	if len(b) < 2 || b[len(b)-1] != '"' {
		return false
	}
	for _, c := range b[1 : len(b)-1] {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// PeekID reads the "id" member of a JSON object without decoding the rest:
// it works on a message too deep for the decoder and on the first part of a
// message too large to keep. It returns nil when there is no readable id
// (not an object, no id before data ends, an id that is not a string,
// number or null). The result is re-encoded like every id we send, and
// never aliases data.
func PeekID(data []byte) RawMessage {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil
	}
	i++
	for {
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != '"' {
			return nil
		}
		kEnd := skipString(data, i)
		if kEnd < 0 {
			return nil
		}
		key := data[i:kEnd]
		i = skipSpace(data, kEnd)
		if i >= len(data) || data[i] != ':' {
			return nil
		}
		i = skipSpace(data, i+1)
		vEnd := skipValue(data, i)
		if vEnd < 0 {
			return nil
		}
		if isIDKey(key) {
			if !Valid(data[i:vEnd]) {
				return nil // nothing has checked this part of data
			}
			// a copy: data is often a read buffer that is reused
			return append(RawMessage(nil), CanonicalID(data[i:vEnd])...)
		}
		i = skipSpace(data, vEnd)
		if i >= len(data) || data[i] != ',' {
			return nil
		}
		i++
	}
}

func isIDKey(quoted []byte) bool {
	if string(quoted) == `"id"` {
		return true
	}
	if bytes.IndexByte(quoted, '\\') < 0 {
		return false
	}
	var k string
	return Unmarshal(quoted, &k) == nil && k == "id"
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at data[i]
// (a quote), or -1 when it does not end within data.
func skipString(data []byte, i int) int {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// skipValue returns the index just past the value starting at data[i], or
// -1 when it does not end within data. Containers are skipped by counting
// brackets (no recursion, so any depth is fine); their content is not
// validated.
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				end := skipString(data, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default:
		j := i
		for j < len(data) && bytes.IndexByte([]byte(",}] \t\r\n"), data[j]) < 0 {
			j++
		}
		if j == len(data) {
			return -1 // a number may go on
		}
		return j
	}
}

// tooDeep reports whether data nests containers deeper than MaxDepth
// (strings skipped), which is why the decoder refused it.
func tooDeep(data []byte) bool {
	depth := 0
	for j := 0; j < len(data); j++ {
		switch data[j] {
		case '"':
			end := skipString(data, j)
			if end < 0 {
				return false
			}
			j = end - 1
		case '{', '[':
			depth++
			if depth > MaxDepth {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}
