package protocol

import (
	"errors"
	"testing"
)

type strictInput struct {
	Path      *string  `json:"path"`
	StartLine *int     `json:"start_line"`
	Timeout   *float64 `json:"timeout"`
	Flag      *bool    `json:"flag"`
}

func TestUnmarshalStrict(t *testing.T) {
	cases := []struct {
		in, field, reason string // reason "" = accepted
	}{
		{`{"path":"a","start_line":3}`, "", ""},
		{`{"path":"a","path":"b"}`, "path", "duplicate field 'path'"},
		{`{"path":"a","Path":"b"}`, "Path", "unknown field 'Path' (field names are case-sensitive)"},
		{`{"PATH":"/etc/passwd"}`, "PATH", "unknown field 'PATH' (field names are case-sensitive)"},
		{`{"pat\u0068":"a","path":"b"}`, "path", "duplicate field 'path'"},
		{`{"path":3}`, "path", "field 'path' must be a string, got a number"},
		{`{"start_line":1.5}`, "start_line", "field 'start_line' must be an integer, got a number 1.5"},
		{`{"start_line":"2"}`, "start_line", "field 'start_line' must be an integer, got a string"},
		{`{"start_line":99999999999999999999}`, "start_line", "field 'start_line' is out of range for an integer"},
		{`{"timeout":"10"}`, "timeout", "field 'timeout' must be a number, got a string"},
		{`{"flag":"yes"}`, "flag", "field 'flag' must be a boolean, got a string"},
		{`{"path":"a"} {}`, "", "malformed JSON: "},
		{`{"path":`, "", "malformed JSON: unexpected end of input"},
		{"{\"path\":\"\xff\"}", "path", "malformed JSON: invalid UTF-8"},
		{`[1]`, "", "expected an object, got an array"},
	}
	for _, c := range cases {
		var v strictInput
		err := UnmarshalStrict([]byte(c.in), &v)
		if c.reason == "" {
			if err != nil {
				t.Errorf("%s: unexpected error %v", c.in, err)
			}
			continue
		}
		var se *StrictError
		if !errors.As(err, &se) {
			t.Errorf("%s: want a *StrictError, got %T %v", c.in, err, err)
			continue
		}
		if se.Field != c.field || len(se.Reason) < len(c.reason) || se.Reason[:len(c.reason)] != c.reason {
			t.Errorf("%s: got field %q reason %q, want %q %q…", c.in, se.Field, se.Reason, c.field, c.reason)
		}
	}
}

func TestUnmarshalStrictGenericObject(t *testing.T) {
	var m map[string]any
	if err := UnmarshalStrict([]byte(`{"a":1,"A":2,"b":{"c":1}}`), &m); err != nil || len(m) != 3 {
		t.Fatalf("case variants are distinct names: %v %v", m, err)
	}
	err := UnmarshalStrict([]byte(`{"a":1,"b":{"c":1,"c":2}}`), &m)
	var se *StrictError
	if !errors.As(err, &se) || se.Reason != "duplicate field 'b/c'" {
		t.Fatalf("nested duplicate: %v", err)
	}
}
