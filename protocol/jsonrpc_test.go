package protocol

import (
	"strings"
	"testing"
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
