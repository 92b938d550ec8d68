package protocol

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzDecode feeds the JSON-RPC decoder every edge reads with (stdio lines,
// HTTP bodies). Seeds: testdata/fuzz/FuzzDecode. Whatever the bytes: no
// panic, never (nil, nil); an error is a parse error exactly when the bytes
// are not JSON (by encoding/json, an independent parser) and otherwise an
// invalid request; a message without error is exactly one of request,
// notification and response, with "jsonrpc":"2.0".
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if m == nil && err == nil {
			t.Fatal("Decode returned neither a message nor an error")
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
