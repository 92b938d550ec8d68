// Package protocol holds the JSON-RPC 2.0 envelope and the ACP v1 types.
//
// Every encode and decode of the server goes through this file, so the JSON
// library (goccy/go-json, pinned at v0.12.0) can be swapped in one place.
package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/goccy/go-json/jsontext"
	jsonv2 "github.com/goccy/go-json/v2"
)

// RawMessage is a raw encoded JSON value.
type RawMessage = json.RawMessage

// Marshal encodes v. It escapes <, & and > as \u003c, \u0026 and \u003e, as
// encoding/json does: go-json's "NoEscape" is about Go's escape analysis
// (v is not copied to the heap), not about HTML. Peers decode both forms
// the same.
func Marshal(v any) ([]byte, error) { return json.MarshalNoEscape(v) }

// EncodeLine writes v, encoded as by Marshal, and a newline to w in one
// Write, without the copy of the encoding Marshal returns (a history line
// may hold a whole answer).
func EncodeLine(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

// splicePiece is how much of a long text EncodeLineSpliced encodes at a
// time.
const splicePiece = 16 << 10

// spliceBuf is the buffer EncodeLineSpliced writes through.
const spliceBuf = 64 << 10

// EncodeLineSpliced writes what EncodeLine writes for v with texts[i] in
// place of marks[i], where v holds the string marks[i] (a marker no other
// value holds) where texts[i] belongs. v is encoded with the markers, and
// each text is encoded a piece at a time through a buffer of spliceBuf
// bytes: a long text (a whole answer) is neither encoded into a buffer of
// its size nor copied on the way, and the line reaches w in writes of
// about spliceBuf bytes. The pieces end on UTF-8 sequence starts, so each
// is escaped as it is within the whole text (invalid bytes are replaced
// one by one either way). ok is false, nothing written, when a marker is
// not found exactly once, in order.
func EncodeLineSpliced(w io.Writer, v any, marks, texts []string) (ok bool, err error) {
	var skel bytes.Buffer
	if err := json.NewEncoder(&skel).Encode(v); err != nil {
		return false, err
	}
	line := skel.Bytes()
	// The quoted markers' offsets, in order, each found once.
	at := make([]int, len(marks))
	pos := 0
	for i, m := range marks {
		q := []byte(`"` + m + `"`)
		j := bytes.Index(line[pos:], q)
		if j < 0 || bytes.Count(line, q) != 1 {
			return false, nil
		}
		at[i] = pos + j
		pos += j + len(q)
	}
	bw := bufio.NewWriterSize(w, spliceBuf)
	enc := json.NewEncoder(textBodyWriter{bw})
	pos = 0
	for i, m := range marks {
		_, err = bw.Write(line[pos : at[i]+1]) // up to the opening quote
		for t := texts[i]; t != "" && err == nil; {
			n := len(t)
			if n > splicePiece {
				n = pieceEnd(t, splicePiece)
			}
			err = enc.Encode(t[:n])
			t = t[n:]
		}
		pos = at[i] + 1 + len(m) // the closing quote
	}
	if err == nil {
		_, err = bw.Write(line[pos:])
	}
	if err == nil {
		err = bw.Flush()
	}
	return true, err
}

// pieceEnd is where the first piece of s of about n bytes ends (n <
// len(s)): at the start of the UTF-8 sequence n falls in, if one starts in
// the 3 bytes before it (a sequence is at most 4 bytes), else at n, inside
// invalid bytes that are replaced one by one anyway.
func pieceEnd(s string, n int) int {
	for k := 0; k < utf8.UTFMax && n-k > 0; k++ {
		if utf8.RuneStart(s[n-k]) {
			return n - k
		}
	}
	return n
}

// textBodyWriter takes the encoding of a JSON string and a newline
// (Encoder.Encode of a piece of text, one Write) and passes on what is
// between the quotes.
type textBodyWriter struct{ w *bufio.Writer }

func (t textBodyWriter) Write(p []byte) (int, error) {
	if len(p) < 3 || p[0] != '"' || p[len(p)-2] != '"' || p[len(p)-1] != '\n' {
		return 0, errors.New("protocol: unexpected encoding of a text piece")
	}
	if _, err := t.w.Write(p[1 : len(p)-2]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Unmarshal decodes data into v. The decoder copies what it keeps, so data
// may be reused by the caller afterwards.
func Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// Valid reports whether data is one syntactically valid JSON value.
func Valid(data []byte) bool { return json.Valid(data) }

// UnmarshalStrict decodes data into v with no guessing, for input whose
// meaning a security decision depends on (tool arguments): member names
// match struct fields exactly (case-sensitive), a duplicate name, an unknown
// name, a value of the wrong type, invalid UTF-8 or trailing data is an
// error. These are the encoding/json/v2 semantics, from goccy/go-json/v2 (the
// same module as the rest of this file). Errors are *StrictError.
func UnmarshalStrict(data []byte, v any) error {
	err := jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	return describeStrict(err)
}

// StrictError is why UnmarshalStrict refused its input.
type StrictError struct {
	// Field names the member at fault ("" for the input as a whole): its
	// name, or a JSON pointer below the top level.
	Field string
	// Reason says what is wrong in words meant for whoever wrote the input
	// (a model), e.g. "duplicate field 'path'".
	Reason string
}

func (e *StrictError) Error() string { return e.Reason }

func describeStrict(err error) *StrictError {
	var syn *jsontext.SyntacticError
	var sem *jsonv2.SemanticError
	switch {
	case errors.As(err, &syn) && syn.Err == jsontext.ErrDuplicateName:
		f := fieldName(syn.JSONPointer)
		return &StrictError{Field: f, Reason: fmt.Sprintf("duplicate field '%s'", f)}
	case errors.As(err, &sem) && errors.Is(sem.Err, jsonv2.ErrUnknownName):
		f := fieldName(sem.JSONPointer)
		return &StrictError{Field: f, Reason: fmt.Sprintf("unknown field '%s' (field names are case-sensitive)", f)}
	case errors.As(err, &sem) && sem.GoType != nil && sem.JSONKind != 0 && !isSyntactic(sem.Err):
		f := fieldName(sem.JSONPointer)
		got := kindName(sem.JSONKind)
		if len(sem.JSONValue) > 0 && len(sem.JSONValue) <= 40 {
			got += " " + string(sem.JSONValue)
		}
		want := typeName(sem.GoType)
		if f == "" {
			return &StrictError{Reason: fmt.Sprintf("expected %s, got %s", want, got)}
		}
		reason := fmt.Sprintf("field '%s' must be %s, got %s", f, want, got)
		if sem.JSONKind == '0' && strings.Contains(fmt.Sprint(sem.Err), "out of range") {
			reason = fmt.Sprintf("field '%s' is out of range for %s", f, want)
		}
		return &StrictError{Field: f, Reason: reason}
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return &StrictError{Reason: "malformed JSON: unexpected end of input"}
	case errors.As(err, &syn):
		msg := strings.TrimPrefix(syn.Error(), "jsontext: ")
		return &StrictError{Field: fieldName(syn.JSONPointer), Reason: "malformed JSON: " + msg}
	}
	return &StrictError{Reason: "malformed JSON: " + strings.TrimPrefix(strings.TrimPrefix(err.Error(), "json: "), "jsontext: ")}
}

func isSyntactic(err error) bool {
	var syn *jsontext.SyntacticError
	return errors.As(err, &syn)
}

// fieldName is the member name of a top-level pointer ("/path" → "path"),
// else the pointer without its leading slash ("a/0/b").
func fieldName(p jsontext.Pointer) string {
	if p == "" {
		return ""
	}
	if p.Parent() == "" {
		return p.LastToken()
	}
	return strings.TrimPrefix(string(p), "/")
}

func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{', '}':
		return "an object"
	case '[', ']':
		return "an array"
	}
	return "another type"
}

func typeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Interface:
		return "a JSON value"
	}
	return t.String()
}

// MustMarshal encodes values that cannot fail to encode (plain structs of
// strings, numbers and raw JSON). It panics on a programming error.
func MustMarshal(v any) []byte {
	b, err := Marshal(v)
	if err != nil {
		panic("protocol: encode: " + err.Error())
	}
	return b
}

// The hot path: one streamed chunk per model token. A hand-written encoder
// avoids reflection (2.4 µs and 4 allocations down to 0.8 µs and 2) and the
// stack growth of go-json's large frames in fresh mailbox goroutines.

// EncodeChunkNotification is EncodeNotification(MethodSessionUpdate,
// SessionNotification{sessionID, ChunkUpdate{kind, Text(text)}}) without
// reflection: the same bytes, one allocation.
func EncodeChunkNotification(sessionID, kind, text string) []byte {
	c := StartChunkNotification(sessionID, kind, len(text))
	c.Append(text)
	return c.Bytes()
}

// ChunkNotification encodes one text chunk notification from several
// pieces: the bytes EncodeChunkNotification makes of their concatenation,
// without building the concatenated string first. It lets a streaming
// turn send consecutive deltas that are already waiting as one message.
type ChunkNotification struct {
	b []byte
	// messageID, when set, is the ACP messageId of the chunk's message.
	messageID string
}

// StartChunkNotification begins the notification; textLen is the expected
// length of the text, for sizing the buffer once.
func StartChunkNotification(sessionID, kind string, textLen int) ChunkNotification {
	return StartChunkNotificationIn(make([]byte, 0, 160+len(sessionID)+len(kind)+textLen+textLen/8), sessionID, kind)
}

// StartChunkNotificationIn begins the notification in buf's space (a
// buffer Detach gave back): a stream that joins many deltas into each
// notification grows one buffer once, not one per notification.
func StartChunkNotificationIn(buf []byte, sessionID, kind string) ChunkNotification {
	return StartMessageChunkIn(buf, sessionID, kind, "")
}

// StartMessageChunkIn is StartChunkNotificationIn for a chunk of the
// message messageID ("" for none): the bytes EncodeNotification makes of a
// ChunkUpdate with that MessageID.
func StartMessageChunkIn(buf []byte, sessionID, kind, messageID string) ChunkNotification {
	b := buf[:0]
	b = append(b, `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":`...)
	b = AppendJSONString(b, sessionID)
	b = append(b, `,"update":{"sessionUpdate":`...)
	b = AppendJSONString(b, kind)
	b = append(b, `,"content":{"type":"text","text":"`...)
	return ChunkNotification{b: b, messageID: messageID}
}

// end closes the text, content, update, params and message.
func (c *ChunkNotification) end() []byte {
	if c.messageID == "" {
		return append(c.b, `"}}}}`...)
	}
	b := append(c.b, `"},"messageId":`...)
	b = AppendJSONString(b, c.messageID)
	return append(b, `}}}`...)
}

// Append adds text to the chunk's text.
func (c *ChunkNotification) Append(text string) { c.b = appendJSONStringBody(c.b, text) }

// AppendPlain adds text known to need no escaping (printable ASCII
// without '"' or '\\', llm.Event.PlainText) as it is.
func (c *ChunkNotification) AppendPlain(text string) { c.b = append(c.b, text...) }

// Len is the size of the encoding so far.
func (c *ChunkNotification) Len() int { return len(c.b) }

// Bytes ends the notification and returns it; c must not be used after.
// A notification grown by appends is copied to its exact size: frames are
// kept (for Last-Event-ID replay), and a quarter of slack on each adds up.
func (c *ChunkNotification) Bytes() []byte {
	b := c.end()
	c.b = nil
	if cap(b)-len(b) > len(b)/4+64 {
		b = append(make([]byte, 0, len(b)), b...)
	}
	return b
}

// Detach ends the notification and returns a copy of exactly its size,
// and c's buffer for the next StartChunkNotificationIn; c must not be used
// after.
func (c *ChunkNotification) Detach() (frame, buf []byte) {
	b := c.End()
	return append(make([]byte, 0, len(b)), b...), b[:0]
}

// End ends the notification and returns it in c's own buffer, for a copy
// made elsewhere (a frame given back once written); c must not be used
// after.
func (c *ChunkNotification) End() []byte {
	b := c.end()
	c.b = nil
	return b
}

// AppendJSONString appends s as a JSON string, escaped as Marshal escapes
// it except for <, > and &, which it writes as they are (the same text once
// decoded).
func AppendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendJSONStringBody(b, s)
	return append(b, '"')
}

// plainASCII8 reports whether none of the 8 bytes of x (little-endian) is
// below 0x20, 0x80 or above, '"' or '\\' (the bit tricks of "Bit
// Twiddling Hacks": a byte below n, a zero byte). It takes the word, not
// the bytes, to be cheap enough to inline.
func plainASCII8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q := x ^ (ones * '"')
	bs := x ^ (ones * '\\')
	bad := (x - ones*0x20) | (q-ones)&^q | (bs-ones)&^bs | x
	return bad&highs == 0
}

// word8 is the 8 bytes of s from i, little-endian (one load once the
// compiler combines them).
func word8(s string, i int) uint64 {
	w := s[i : i+8]
	return uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
}

// appendJSONStringBody appends s escaped as inside a JSON string. Each rune
// is escaped on its own, so the pieces of a text escape to the pieces of
// its escape.
func appendJSONStringBody(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time while none needs a look (printable ASCII
		// other than '"' and '\\'): most model text.
		for i+8 <= len(s) && plainASCII8(word8(s, i)) {
			i += 8
		}
		// The last bytes as the last 8, overlapping what was looked at:
		// a short tail costs one word test instead of a test per byte.
		if i == len(s) || i > len(s)-8 && len(s) >= 8 && plainASCII8(word8(s, len(s)-8)) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(b, s[start:]...)
}
