package protocol

import "testing"

func TestIDKeyMatchesIDsAsRead(t *testing.T) {
	same := [][]string{
		{`"a"`, `"\u0061"`, ` "a" `},
		{`"é"`, `"\u00e9"`, `"\u00E9"`},
		{`"\ud800"`, `"\ufffd"`, "\"\xff\""}, // decoded to U+FFFD alike
		{`"a/b"`, `"a\/b"`},
		{`1`, `1.0`, `1e0`, `10e-1`, `0.1E1`, `1.000e+0`},
		{`10`, `1e1`, `1.0e1`, `100e-1`},
		{`0`, `-0`, `0.0`, `0e5`, `-0.000e-3`},
		{`-25`, `-2.5e1`, `-250e-1`},
		{`0.5`, `5e-1`, `50E-2`},
		{`1e1000000000000000000`, `1e1000000000000000000`}, // exponent too long: as written
		{`null`, ` null`},
	}
	seen := map[string]string{}
	for _, group := range same {
		key := IDKey(RawMessage(group[0]))
		if key == "" {
			t.Fatalf("IDKey(%s) is empty", group[0])
		}
		if other, dup := seen[key]; dup {
			t.Errorf("%s and %s share key %q", group[0], other, key)
		}
		seen[key] = group[0]
		for _, id := range group[1:] {
			if got := IDKey(RawMessage(id)); got != key {
				t.Errorf("IDKey(%s) = %q, want %q as for %s", id, got, key, group[0])
			}
		}
	}
	different := [][2]string{
		{`"1"`, `1`},
		{`"null"`, `null`},
		{`"a"`, `"A"`},
		{`9007199254740993`, `9007199254740992`}, // no float rounding
		{`1`, `-1`},
		{`1e1`, `1e-1`},
		{`12`, `21`},
	}
	for _, d := range different {
		if a, b := IDKey(RawMessage(d[0])), IDKey(RawMessage(d[1])); a == b {
			t.Errorf("%s and %s share key %q", d[0], d[1], a)
		}
	}
	for _, bad := range []string{``, `{}`, `[1]`, `true`, `"\q"`, `01`, `1.`, `-`, `1e`, `1e+`, `.5`, `1x`} {
		if got := IDKey(RawMessage(bad)); got != "" {
			t.Errorf("IDKey(%s) = %q, want empty", bad, got)
		}
	}
}

// The answer keeps the id as sent while the key reads it: an escaped id
// is echoed byte for byte and still matches its plain spelling.
func TestAnswerIDAndKeyOfAnEscapedID(t *testing.T) {
	m, e := Decode([]byte(`{"jsonrpc":"2.0","id":"\u0061","method":"x"}`))
	if e != nil {
		t.Fatal(e)
	}
	if string(m.ID) != `"\u0061"` {
		t.Fatalf("answered with %s", m.ID)
	}
	if IDKey(m.ID) != IDKey(RawMessage(`"a"`)) {
		t.Fatalf("%s does not match \"a\"", m.ID)
	}
}
