package llm

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// chunkRun is what one chunk did to a fresh stream.
type chunkRun struct {
	events   []Event
	finish   string
	nCalls   int
	gotUsage bool
	err      error
}

func runChunk(data []byte, fast bool) (chunkRun, bool) {
	var r chunkRun
	s := &oaStream{out: func(e Event) { r.events = append(r.events, e) }}
	if fast {
		if !s.fastChunk(data) {
			return r, false
		}
	} else {
		r.err = s.fullChunk(data)
	}
	r.finish, r.nCalls, r.gotUsage = s.finish, s.nCalls, s.gotUsage
	return r, true
}

// checkFastChunk fails when fastChunk takes data and does not do exactly
// what fullChunk does; it reports whether fastChunk took it.
func checkFastChunk(t *testing.T, data []byte) bool {
	t.Helper()
	fast, took := runChunk(data, true)
	if !took {
		if len(fast.events) != 0 {
			t.Errorf("%q: fast path refused after emitting %v", data, fast.events)
		}
		return false
	}
	full, _ := runChunk(data, false)
	if !reflect.DeepEqual(fast, full) {
		t.Errorf("%q:\nfast %+v\nfull %+v", data, fast, full)
	}
	return true
}

const chunkHead = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","system_fingerprint":"fp_1","choices":[{"index":0,"delta":`

var fastChunkCases = []struct {
	name  string
	data  string
	fast  bool   // fastChunk takes it
	text  string // text delta expected ("" = none)
	think string
}{
	{"content", chunkHead + `{"content":"token "},"logprobs":null,"finish_reason":null}],"usage":null}`, true, "token ", ""},
	{"first chunk", chunkHead + `{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}`, true, "", ""},
	{"escapes", chunkHead + `{"content":"a\n\"b\"\\ \t\u00e9\ud83d\ude00/\/"},"finish_reason":null}]}`, true, "a\n\"b\"\\ \t\u00e9\U0001F600//", ""},
	{"escaped quote at end", chunkHead + `{"content":"x\\\""}}]}`, true, `x\"`, ""},
	{"backslashes only", chunkHead + `{"content":"\\\\"}}]}`, true, `\\`, ""},
	{"unicode raw", chunkHead + `{"content":"日本語 ✓ ü"}}]}`, true, "日本語 ✓ ü", ""},
	{"content and reasoning_content", chunkHead + `{"content":"b","reasoning_content":"a"}}]}`, true, "b", "a"},
	{"deepseek reasoning", chunkHead + `{"content":null,"reasoning_content":"think"},"finish_reason":null}]}`, true, "", "think"},
	{"reasoning then reasoning_content", chunkHead + `{"reasoning":"r","reasoning_content":"rc"}}]}`, true, "", "rc"},
	{"reasoning_content then reasoning", chunkHead + `{"reasoning_content":"rc","reasoning":"r"}}]}`, true, "", "rc"},
	{"reasoning_content null then reasoning", chunkHead + `{"reasoning_content":null,"reasoning":"r"}}]}`, true, "", "r"},
	{"reasoning then reasoning_content null", chunkHead + `{"reasoning":"r","reasoning_content":null}}]}`, true, "", ""},
	{"duplicate content", chunkHead + `{"content":"a","content":"b"}}]}`, true, "b", ""},
	{"duplicate delta", chunkHead + `{"content":"a"},"delta":{"role":"assistant"}}]}`, true, "", ""},
	{"whitespace", " {\n \"choices\" : [ { \"delta\" : { \"content\" : \"x\" } , \"index\" : 0 } ] ,\r\n\t\"usage\" : null } \n", true, "x", ""},
	{"no index", `{"choices":[{"delta":{"content":"x"}}]}`, true, "x", ""},
	{"azure filters", chunkHead + `{"content":"x"},"content_filter_results":{"hate":{"filtered":false,"severity":"safe"},"note":"a } ] ) \" ("}}],"obfuscation":"abc"}`, true, "x", ""},
	{"nested arrays", `{"x":[1,[2,{"y":"]"}],-3.5e+2,true,false,null],"choices":[{"index":0,"delta":{"content":"x","tool_calls":null}}]}`, true, "x", ""},
	{"empty choices", `{"choices":[],"prompt_filter_results":[{"prompt_index":0}]}`, true, "", ""},
	{"empty object", `{}`, true, "", ""},
	{"error null", `{"error":null,"choices":[{"index":0,"delta":{"content":"x"}}]}`, true, "x", ""},
	{"usage array", `{"usage":[],"choices":[{"index":0,"delta":{"content":"x"}}]}`, true, "x", ""},

	// The full path's business.
	{"finish", chunkHead + `{},"logprobs":null,"finish_reason":"stop"}]}`, false, "", ""},
	{"usage", `{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`, false, "", ""},
	{"tool call", chunkHead + `{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":""}}]}}]}`, false, "", ""},
	{"error", `{"error":{"message":"boom","code":502}}`, false, "", ""},
	{"index 1", `{"choices":[{"index":1,"delta":{"content":"x"}}]}`, false, "", ""},
	{"index 0.0", `{"choices":[{"index":0.0,"delta":{"content":"x"}}]}`, false, "x", ""},
	{"index 01", `{"choices":[{"index":01,"delta":{"content":"x"}}]}`, false, "", ""},
	{"two choices", `{"choices":[{"index":0,"delta":{"content":"a"}},{"index":0,"delta":{"content":"b"}}]}`, false, "ab", ""},
	{"two choices keys", `{"choices":[{"index":0,"delta":{"content":"a"}}],"choices":[{"index":0,"delta":{"content":"b"}}]}`, false, "ab", ""},
	{"escaped key", `{"choices":[{"index":0,"delta":{"con\u0074ent":"x"}}]}`, false, "x", ""},
	{"trailing object", `{"id":"a"} {"choices":[{"index":0,"delta":{"content":"x"}}]}`, false, "x", ""},
	{"content number", `{"choices":[{"index":0,"delta":{"content":5}}]}`, false, "", ""},
	{"delta null", `{"choices":[{"index":0,"delta":null}]}`, false, "", ""},
	{"not an object", `[1]`, false, "", ""},
	{"unterminated", `{"choices":[{"index":0,"delta":{"content":"x`, false, "", ""},
	{"lenient separators", `{"choices" [{"index":0,"delta":{"content":"x"}}]}`, false, "x", ""},
}

func TestOpenAIFastChunk(t *testing.T) {
	for _, c := range fastChunkCases {
		t.Run(c.name, func(t *testing.T) {
			data := []byte(c.data)
			if took := checkFastChunk(t, data); took != c.fast {
				t.Errorf("fast path took it: %v, want %v", took, c.fast)
			}
			// And through event, as the decoder calls it.
			var text, think string
			s := &oaStream{out: func(e Event) {
				switch e.Type {
				case EventTextDelta:
					text += e.Text
				case EventThinkingDelta:
					think += e.Text
				}
			}}
			_, _ = s.event(data)
			if text != c.text || think != c.think {
				t.Errorf("text %q thinking %q, want %q %q", text, think, c.text, c.think)
			}
		})
	}
}

// FuzzOpenAIFastChunk: whatever fastChunk takes, it handles as fullChunk.
func FuzzOpenAIFastChunk(f *testing.F) {
	for _, c := range fastChunkCases {
		f.Add([]byte(c.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastChunk(t, data)
	})
}

// FuzzOpenAIFastChunkText puts arbitrary text in the common chunk, JSON
// encoded (must take the fast path and round-trip) and raw between quotes
// (whatever the bytes, both paths must agree).
func FuzzOpenAIFastChunkText(f *testing.F) {
	for _, s := range []string{"token ", "", `a\"b`, "\n\u00e9", "日本", "\x00\xff", `\`, `"`} {
		f.Add(s, "why")
	}
	f.Fuzz(func(t *testing.T, text, thinking string) {
		enc := func(s string) string { b, _ := json.Marshal(s); return string(b) }
		data := []byte(chunkHead + `{"content":` + enc(text) + `,"reasoning_content":` + enc(thinking) + `},"finish_reason":null}]}`)
		if !checkFastChunk(t, data) {
			t.Fatalf("fast path refused %q", data)
		}
		checkFastChunk(t, []byte(chunkHead+`{"content":"`+text+`","reasoning":"`+thinking+`"}}]}`))
	})
}

// checkShapeChunk fails when shapeChunk, after the stream learned from
// learn, takes data and does not do what fastChunk does on a fresh stream.
func checkShapeChunk(t *testing.T, learn, data []byte) bool {
	t.Helper()
	var got []Event
	s := &oaStream{out: func(e Event) { got = append(got, e) }}
	s.fastChunk(learn)
	got = nil
	if !s.shapeChunk(data) {
		if len(got) != 0 {
			t.Errorf("%q: shape path refused after emitting %v", data, got)
		}
		return false
	}
	fast, took := runChunk(data, true)
	if !took {
		t.Errorf("learned %q, shape path took %q, fast path refuses it", learn, data)
	} else if !reflect.DeepEqual(got, fast.events) || fast.finish != "" || fast.nCalls != 0 || fast.gotUsage {
		t.Errorf("learned %q, took %q:\nshape %+v\nfast  %+v", learn, data, got, fast)
	}
	return true
}

// shapeOf is the head and tail learned from data ("" when none).
func shapeOf(data []byte) (head, tail string) {
	s := &oaStream{out: func(Event) {}}
	s.fastChunk(data)
	for _, sh := range s.shapes {
		if sh.head != nil {
			return string(sh.head), string(sh.tail)
		}
	}
	return "", ""
}

func TestOpenAIShapeChunk(t *testing.T) {
	content := chunkHead + `{"content":"token "},"logprobs":null,"finish_reason":null}],"usage":null}`
	reasoning := chunkHead + `{"content":null,"reasoning_content":"think"},"finish_reason":null}]}`
	cases := []struct {
		name, learn, data string
		shape             bool // shapeChunk takes it
	}{
		{"same shape", content, chunkHead + `{"content":"next"},"logprobs":null,"finish_reason":null}],"usage":null}`, true},
		{"escapes", content, chunkHead + `{"content":"a\"b\\\n\u00e9"},"logprobs":null,"finish_reason":null}],"usage":null}`, true},
		{"empty text", content, chunkHead + `{"content":""},"logprobs":null,"finish_reason":null}],"usage":null}`, true},
		{"reasoning", reasoning, chunkHead + `{"content":null,"reasoning_content":"more"},"finish_reason":null}]}`, true},
		{"quote inside", content, chunkHead + `{"content":"a","content":"b"},"logprobs":null,"finish_reason":null}],"usage":null}`, false},
		{"escaped end quote", content, chunkHead + `{"content":"a\"},"logprobs":null,"finish_reason":null}],"usage":null}`, false},
		{"other tail", content, chunkHead + `{"content":"x"},"logprobs":null,"finish_reason":"stop"}],"usage":null}`, false},
		{"other head", content, `{"id":"chatcmpl-2"` + chunkHead[len(`{"id":"chatcmpl-1"`):] + `{"content":"x"},"logprobs":null,"finish_reason":null}],"usage":null}`, false},
		{"not a string", content, chunkHead + `{"content":5},"logprobs":null,"finish_reason":null}],"usage":null}`, false},
		{"overlap", content, chunkHead + `{"content":"},"logprobs":null,"finish_reason":null}],"usage":null}`, false},
		{"replaced later: not learned", chunkHead + `{"content":"a","content":"b"}}]}`, chunkHead + `{"content":"x","content":"b"}}]}`, false},
		{"both fields: not learned", chunkHead + `{"content":"b","reasoning_content":"a"}}]}`, chunkHead + `{"content":"b","reasoning_content":"a"}}]}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if took := checkShapeChunk(t, []byte(c.learn), []byte(c.data)); took != c.shape {
				t.Errorf("shape path took it: %v, want %v", took, c.shape)
			}
		})
	}
	// A stream's chunks after the first take the shape path, and emit what
	// they carry.
	var text string
	s := &oaStream{out: func(e Event) { text += e.Text }}
	for _, tok := range []string{"a", "b", `\"c\"`} {
		if _, err := s.event([]byte(chunkHead + `{"content":"` + tok + `"},"logprobs":null,"finish_reason":null}],"usage":null}`)); err != nil {
			t.Fatal(err)
		}
	}
	if s.shapes[0].head == nil || text != `ab"c"` {
		t.Errorf("text %q, shape %q", text, s.shapes[0].head)
	}
}

// FuzzOpenAIShapeChunk: after learning from one chunk, whatever shapeChunk
// takes it handles as fastChunk (and so as fullChunk), for chunks of the
// learned shape with arbitrary bytes where the text was, and for any other
// bytes.
func FuzzOpenAIShapeChunk(f *testing.F) {
	for _, c := range fastChunkCases {
		f.Add([]byte(c.data), []byte(`"x"`), []byte(c.data))
	}
	f.Add([]byte(chunkHead+`{"content":"a"}}]}`), []byte(`"a\\\"b"`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, learn, mid, other []byte) {
		head, tail := shapeOf(learn)
		if head != "" {
			checkShapeChunk(t, learn, []byte(head+string(mid)+tail))
		}
		checkShapeChunk(t, learn, other)
	})
}

// FuzzShapeToken: shapeToken's word test takes a token as the byte scan
// of jscan.str does.
func FuzzShapeToken(f *testing.F) {
	for _, s := range []string{`"x"`, `"abcdefgh"`, `"abcdefg\"`, `"ab\"cdefghijk"`, `"a\\"`, `"a\\\"bcdefghij"`, `"1234567"x"`, `""`, `"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, esc, ok := shapeToken(b)
		sc := jscan{d: b}
		var wtok []byte
		var wesc, wok bool
		if len(b) > 0 && b[0] == '"' {
			wtok, wesc, wok = sc.str()
			wok = wok && sc.i == len(b)
		}
		if ok != wok || ok && (esc != wesc || !bytes.Equal(tok, wtok)) {
			t.Fatalf("%q: shapeToken %q %v %v, str %q %v %v", b, tok, esc, ok, wtok, wesc, wok)
		}
	})
}
