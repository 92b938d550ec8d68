package protocol

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzDecode feeds the JSON-RPC decoder every edge reads with (stdio lines,
// HTTP bodies). Seeds: testdata/fuzz/FuzzDecode. Whatever the bytes: no
// panic, never (nil, nil); an error is a parse error exactly when the bytes
// are not JSON (by encoding/json, an independent parser) and otherwise an
// invalid request; a message without error is exactly one of request,
// notification and response, with "jsonrpc":"2.0"; an id is always valid
// JSON and, when the bytes are UTF-8, exactly the bytes sent (the id
// encoding/json reads), so the client can match the answer.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if m == nil && err == nil {
			t.Fatal("Decode returned neither a message nor an error")
		}
		if m != nil && m.ID != nil {
			if !utf8.Valid(m.ID) || !json.Valid(m.ID) {
				t.Fatalf("id %q of %q is not valid JSON", m.ID, data)
			}
			var members map[string]json.RawMessage
			if utf8.Valid(data) && json.Unmarshal(data, &members) == nil && !hasDuplicateID(data) {
				if sent := bytes.TrimSpace(members["id"]); !bytes.Equal(sent, m.ID) {
					t.Fatalf("id %s answered as %s", sent, m.ID)
				}
			}
		}
		if err != nil {
			switch err.Code {
			case CodeParseError:
				if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && json.Valid(trimmed) {
					t.Fatalf("parse error for valid JSON %q", data)
				}
			case CodeInvalidRequest:
				if !json.Valid(bytes.TrimSpace(data)) {
					t.Fatalf("invalid request (not parse error) for bytes that are not JSON: %q", data)
				}
			default:
				t.Fatalf("unexpected code %d for %q", err.Code, data)
			}
			return
		}
		if m.JSONRPC != "2.0" {
			t.Fatalf("accepted jsonrpc %q", m.JSONRPC)
		}
		kinds := 0
		for _, k := range []bool{m.IsRequest(), m.IsNotification(), m.IsResponse()} {
			if k {
				kinds++
			}
		}
		if kinds != 1 {
			t.Fatalf("%q is %d kinds of message", data, kinds)
		}
	})
}

// hasDuplicateID reports an object naming "id" twice, where which one
// counts is up to the parser (two parsers may differ).
func hasDuplicateID(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	seen := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if k, _ := tok.(string); k == "id" {
			seen++
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return seen > 1
}
