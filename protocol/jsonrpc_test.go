package protocol

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeClassifiesMessages(t *testing.T) {
	cases := []struct {
		in   string
		code int // 0 = valid
		kind string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, 0, "request"},
		{`{"jsonrpc":"2.0","id":"a-1","method":"x"}`, 0, "request"},
		{`{"jsonrpc":"2.0","id":null,"method":"x"}`, 0, "request"},
		{`{"jsonrpc":"2.0","method":"session/cancel","params":{}}`, 0, "notification"},
		{`{"jsonrpc":"2.0","id":3,"result":{"outcome":{"outcome":"cancelled"}}}`, 0, "response"},
		{`{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"x"}}`, 0, "response"},
		{`not json`, CodeParseError, ""},
		{`{"jsonrpc":"2.0","id":1,`, CodeParseError, ""},
		{`[{"jsonrpc":"2.0","id":1,"method":"x"}]`, CodeInvalidRequest, ""},
		{`42`, CodeInvalidRequest, ""},
		{`{"id":1,"method":"x"}`, CodeInvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"x"}`, CodeInvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":1,"method":7}`, CodeInvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":1}`, CodeInvalidRequest, ""},
	}
	for _, c := range cases {
		m, err := Decode([]byte(c.in))
		if c.code != 0 {
			if err == nil || err.Code != c.code {
				t.Errorf("%s: want error %d, got %v", c.in, c.code, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: unexpected error %v", c.in, err)
			continue
		}
		kind := map[bool]string{true: "request"}[m.IsRequest()]
		if m.IsNotification() {
			kind = "notification"
		} else if m.IsResponse() {
			kind = "response"
		}
		if kind != c.kind {
			t.Errorf("%s: kind %q, want %q", c.in, kind, c.kind)
		}
	}
}

func TestEncodeEchoesIDsExactly(t *testing.T) {
	for _, id := range []string{`7`, `"req-7"`, `null`} {
		m, err := Decode([]byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		out := string(EncodeResult(m.ID, struct{}{}))
		if want := `{"jsonrpc":"2.0","id":` + id + `,"result":{}}`; out != want {
			t.Errorf("got %s want %s", out, want)
		}
	}
	if got := string(EncodeError(nil, ErrParse("bad"))); !strings.HasPrefix(got, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700`) {
		t.Errorf("parse error encoding: %s", got)
	}
}

func TestAliases(t *testing.T) {
	for in, want := range map[string]string{
		"sessions/list":  MethodSessionList,
		"config/set":     MethodSessionSetConfig,
		"session/prompt": MethodSessionPrompt,
	} {
		if got := CanonicalMethod(in); got != want {
			t.Errorf("%s -> %s, want %s", in, got, want)
		}
	}
}

// An id is answered exactly as sent (escapes and all: a client matches the
// answer by the string it decodes, and "\ud800" decodes to a lone surrogate
// no re-encoding gives back); only raw bytes that are not UTF-8 are cleaned,
// since sent back they would make the answer invalid JSON.
func TestIDsAreAnsweredAsSentAndAlwaysValidJSON(t *testing.T) {
	cases := map[string]string{
		"\"a\xffb\"":       "\"a\uFFFDb\"",
		`"\u0041\n"`:       `"\u0041\n"`,
		`"\ud800"`:         `"\ud800"`,
		`"a\udfffb\ud83d"`: `"a\udfffb\ud83d"`,
		`"\ud83d\ude00"`:   `"\ud83d\ude00"`,
		`"plain-id"`:       `"plain-id"`,
		`  12  `:           `12`,
		"\"\u2028\"":       "\"\u2028\"", // raw, as sent: valid JSON
		`"tab\there"`:      `"tab\there"`,
		`"quote\"inside"`:  `"quote\"inside"`,
	}
	for id, want := range cases {
		m, err := Decode([]byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"x"}`))
		if err != nil {
			t.Fatalf("%q: %v", id, err)
		}
		out := EncodeResult(m.ID, struct{}{})
		if !utf8.Valid(out) || !Valid(out) {
			t.Errorf("%q: answer is not valid JSON: %q", id, out)
		}
		if string(m.ID) != want {
			t.Errorf("%q: id %s, want %s", id, m.ID, want)
		}
	}
	// the id of an otherwise invalid request is cleaned too
	m, err := Decode([]byte("{\"jsonrpc\":\"1.0\",\"id\":\"x\xfe\",\"method\":\"x\"}"))
	if err == nil || string(m.ID) != "\"x\uFFFD\"" {
		t.Errorf("invalid request id: %v %q", err, m.ID)
	}
}

func TestTooDeepMessagesKeepTheirID(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth+5) + strings.Repeat("]", MaxDepth+5)
	for _, c := range []struct{ in, id string }{
		{`{"jsonrpc":"2.0","id":7,"method":"x","params":` + deep + `}`, `7`},
		{`{"jsonrpc":"2.0","method":"x","params":{"a":` + deep + `},"id":"late"}`, `"late"`},
		{`{"jsonrpc":"2.0","method":"x","params":` + deep + `}`, ``},
	} {
		m, err := Decode([]byte(c.in))
		if err == nil || err.Code != CodeInvalidRequest {
			t.Fatalf("want -32600, got %v", err)
		}
		if string(m.ID) != c.id {
			t.Errorf("id %q, want %q", m.ID, c.id)
		}
	}
	// broken JSON stays a parse error with id null
	if m, err := Decode([]byte(`{"jsonrpc":"2.0","id":7,"method":"x","params":[1,}`)); err == nil || err.Code != CodeParseError || m != nil {
		t.Errorf("broken JSON: %v", err)
	}
}

func TestPeekID(t *testing.T) {
	cases := map[string]string{
		`{"id":1}`:                                  `1`,
		` { "jsonrpc" : "2.0" , "id" : "s" }`:       `"s"`,
		`{"params":{"id":9,"x":"}\""},"id":-3.5e2}`: `-3.5e2`,
		`{"\u0069d":4}`:                             `4`,
		`{"id":null}`:                               `null`,
		`{"id":"\ud800","method":"x"}`:              `"\ud800"`,
		`{"id":{"a":1}}`:                            ``,
		`{"params":"no id here"}`:                   ``,
		`{"jsonrpc":"2.0","id":42,"params":"trunc`:  `42`, // the head of a line too long to keep
		`{"jsonrpc":"2.0","params":"trunc`:          ``,
		`{"id":12`:                                  ``, // the number may go on
		`[1]`:                                       ``,
		`{"id":"\q","x":1}`:                         ``, // the decoder never saw it
		`{"id":01,"x":1}`:                           ``,
	}
	for in, want := range cases {
		if got := string(PeekID([]byte(in))); got != want {
			t.Errorf("PeekID(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestPeekIDDoesNotAliasItsInput(t *testing.T) {
	buf := []byte(`{"id":"abc","x":1}`)
	id := PeekID(buf)
	copy(buf, `{"id":"zzz"`)
	if string(id) != `"abc"` {
		t.Fatalf("id changed with the buffer: %s", id)
	}
}

// An id with an escape or a non-ASCII letter is checked once by the decoder;
// CanonicalID adds a UTF-8 check only.
func BenchmarkDecodeEscapedID(b *testing.B) {
	msg := []byte(`{"jsonrpc":"2.0","id":"prompt-\u00e9-42","method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"hello"}]}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, e := Decode(msg); e != nil {
			b.Fatal(e)
		}
	}
}
