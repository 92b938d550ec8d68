package llm

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

// runStream builds an OpenAI stream from the fuzz input: one chunk per
// piece of texts (split at '|'), of kind kinds[i]%3 (content, reasoning
// with content null, reasoning alone); kinds[i]&4 writes the piece raw
// between the quotes (raw quotes, backslashes, line ends: not always
// JSON), else JSON-encoded; kinds[i]&8 writes "data:" without its space.
// Bytes of muts (position, byte pairs) then overwrite the stream.
func runStream(texts string, kinds, muts []byte) string {
	var b strings.Builder
	b.WriteString(`data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n")
	for i, piece := range strings.Split(texts, "|") {
		var k byte
		if i < len(kinds) {
			k = kinds[i]
		}
		tok := `"` + piece + `"`
		if k&4 == 0 {
			j, _ := json.Marshal(piece)
			tok = string(j)
		}
		prefix := "data: "
		if k&8 != 0 {
			prefix = "data:"
		}
		delta := `{"content":` + tok + `}`
		switch k % 3 {
		case 1:
			delta = `{"content":null,"reasoning_content":` + tok + `}`
		case 2:
			delta = `{"reasoning":` + tok + `}`
		}
		fmt.Fprintf(&b, `%s{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":null}]}`+"\n\n", prefix, delta)
	}
	b.WriteString(`data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
	s := []byte(b.String())
	for i := 0; i+1 < len(muts); i += 2 {
		s[int(muts[i])*len(s)/256] = muts[i+1]
	}
	return string(s)
}

// decodeRun decodes stream, cut into reads where cuts say, with or without
// takeRun; the events are canonical: a delta that said Buffered is joined
// with a next delta of its kind (what takeRun does to a run).
func decodeRun(t *testing.T, stream string, cuts []byte, runs bool) ([]Event, string) {
	var body pieces
	rest := stream
	for _, c := range cuts {
		if rest == "" {
			break
		}
		n := min(int(c)*8+1, len(rest))
		body, rest = append(body, rest[:n]), rest[n:]
	}
	if rest != "" {
		body = append(body, rest)
	}
	var evs []Event
	err := decodeOpenAIStreamWith(&body, func(ev Event) {
		if ev.PlainText {
			if runs && strings.ContainsFunc(ev.Text, func(r rune) bool { return r < 0x20 || r >= 0x80 || r == '"' || r == '\\' }) {
				t.Fatalf("text %q said plain", ev.Text)
			}
			ev.PlainText = false
		}
		ev.Text = strings.Clone(ev.Text)
		if n := len(evs); n > 0 && evs[n-1].Buffered && evs[n-1].Type == ev.Type &&
			(ev.Type == EventTextDelta || ev.Type == EventThinkingDelta) {
			evs[n-1].Text += ev.Text
			evs[n-1].Buffered = ev.Buffered
			return
		}
		evs = append(evs, ev)
	}, false, runs)
	return evs, fmt.Sprint(err)
}

// FuzzOpenAIRun: the decoder taking runs of the learned chunk straight
// from the read buffer emits what it emits without, deltas joined.
func FuzzOpenAIRun(f *testing.F) {
	f.Add("a|b|c|dd|e", []byte{0, 0, 0, 1, 1}, []byte{}, []byte{})
	f.Add("12345@1765071234567890123||x\ny|\"q\\|é\u2028|abcdefgh|abcdefghi", []byte{0, 0, 4, 4, 0, 0, 0}, []byte{3, 9, 40, 2}, []byte{})
	f.Add("a|b|c|d|e|f|g|h", []byte{0, 4, 8, 1, 2, 5, 0, 0}, []byte{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, []byte{100, '\n', 200, '"'})
	f.Add(strings.Repeat("token |", 200), []byte{}, []byte{50, 200, 7}, []byte{})
	f.Fuzz(func(t *testing.T, texts string, kinds, cuts, muts []byte) {
		stream := runStream(texts, kinds, muts)
		joined, jerr := decodeRun(t, stream, cuts, true)
		each, eerr := decodeRun(t, stream, cuts, false)
		if jerr != eerr || !reflect.DeepEqual(joined, each) {
			t.Fatalf("%q cut %v:\nruns %v %+v\neach %v %+v", stream, cuts, jerr, joined, eerr, each)
		}
	})
}

// TestOpenAIRunJoins: chunks that came in one read are one delta, plain
// when all their text is.
func TestOpenAIRunJoins(t *testing.T) {
	chunk := func(tok string) string {
		return `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":` + tok + `},"finish_reason":null}]}` + "\n\n"
	}
	g := chunk(`"g"`)
	body := pieces{
		chunk(`"learn"`),
		chunk(`"a"`) + chunk(`"b"`) + chunk(`"c"`),
		chunk(`"d"`) + chunk(`"\"e\""`),
		chunk(`"f"`) + g[:len(g)-10], // g is cut by the read
		g[len(g)-10:] + `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n",
	}
	type got struct {
		text            string
		buffered, plain bool
	}
	var evs []got
	err := decodeOpenAIStream(&body, func(ev Event) {
		if ev.Type == EventTextDelta {
			evs = append(evs, got{ev.Text, ev.Buffered, ev.PlainText})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []got{{"learn", false, false}, {"abc", false, true}, {`d"e"`, false, false}, {"f", false, true}, {"g", true, true}}
	if !reflect.DeepEqual(evs, want) {
		t.Fatalf("%+v\nwant %+v", evs, want)
	}
}

// FuzzPlainPrefix: the word test finds the first byte that is not plain as
// a byte-by-byte look does.
func FuzzPlainPrefix(f *testing.F) {
	for _, s := range []string{"", "abcdefgh", "abcdefg\"", "\\bcdefghij", "abc\x1fdefgh", "12345@1765071234567890123|\"}", "é", "\x7f\x80", "        !#[]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := len(b)
		for i, c := range b {
			if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
				want = i
				break
			}
		}
		if got := plainPrefix(b); got != want {
			t.Fatalf("%q: plainPrefix %d, want %d", b, got, want)
		}
	})
}

// TestNotPlain8: every byte value at every place of a word, the others
// plain, and the lowest flagged byte of random words.
func TestNotPlain8(t *testing.T) {
	check := func(w []byte) {
		t.Helper()
		want := len(w)
		for i, c := range w {
			if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
				want = i
				break
			}
		}
		if got := plainPrefix(w); got != want {
			t.Fatalf("%q: %d, want %d", w, got, want)
		}
	}
	for at := range 8 {
		for c := range 256 {
			w := []byte("abcdefgh")
			w[at] = byte(c)
			check(w)
		}
	}
	rng := rand.New(rand.NewSource(1))
	for range 200000 {
		w := make([]byte, 8)
		for i := range w {
			if rng.Intn(4) == 0 {
				w[i] = byte(rng.Intn(256))
			} else {
				w[i] = byte(0x20 + rng.Intn(0x60))
			}
		}
		check(w)
	}
}
