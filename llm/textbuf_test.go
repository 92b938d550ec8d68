package llm

import (
	"bytes"
	"strings"
	"testing"
)

func TestTextBufKeepsTheText(t *testing.T) {
	var tb textBuf
	var want strings.Builder
	if tb.String() != "" {
		t.Fatal("empty")
	}
	piece := "0123456789abcdefghij"
	for i := range 20000 {
		p := piece[:i%len(piece)]
		if i%1000 == 999 {
			p = strings.Repeat("L", 70<<10) // longer than a block
		}
		tb.WriteString(p)
		want.WriteString(p)
		if i%3000 == 0 {
			// String between writes must not change earlier results.
			s := tb.String()
			if s != want.String() || tb.Len() != len(s) {
				t.Fatalf("after %d writes: mismatch", i+1)
			}
			if again := tb.String(); again != s {
				t.Fatal("second String differs")
			}
			tb.WriteString("x")
			want.WriteString("x")
			if s != want.String()[:len(s)] {
				t.Fatal("a later write changed an earlier String")
			}
		}
	}
	if got := tb.String(); got != want.String() {
		t.Fatalf("final text differs (%d vs %d bytes)", len(got), want.Len())
	}
}

// BenchmarkAnswerText grows a 200,000-piece answer (the acp-bench
// stdio-stream reply) and takes it as one string, as the assembler does:
// textBuf against the strings.Builder it replaces. B/op is what the answer
// costs in allocations.
func BenchmarkAnswerText(b *testing.B) {
	const pieces = 200_000
	piece := "123456@1733000000000000000|"
	b.Run("textBuf", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var tb textBuf
			for range pieces {
				tb.WriteString(piece)
			}
			_ = tb.String()
		}
	})
	b.Run("strings.Builder", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var sb strings.Builder
			for range pieces {
				sb.WriteString(piece)
			}
			_ = sb.String()
		}
	})
}

func TestTextSlabStringsStayPut(t *testing.T) {
	var slab textSlab
	src := []byte("0123456789")
	var got []string
	var want []string
	for i := range 2000 { // several blocks
		piece := src[:1+i%len(src)]
		got = append(got, slab.string(piece))
		want = append(want, string(piece))
		src[0] ^= 1 // the source changes: the strings must not
	}
	long := bytes.Repeat([]byte("x"), maxSlabPiece+1)
	got = append(got, slab.string(long))
	want = append(want, string(long))
	long[0] = 'y'
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("string %d is %q, want %q", i, got[i], want[i])
		}
	}
	if slab.string(nil) != "" {
		t.Fatal("empty piece")
	}
}

func TestTextSlabOwnIsOwn(t *testing.T) {
	var slab textSlab
	for _, doc := range []string{`{"v":"token "}`, `{"v":"a\"b\\n"}`, `{"v":""}`, `{"v":null}`, `{"v":5}`, `{"v":"日本"}`, `{}`} {
		buf := []byte(doc)
		v := parseJSON(buf).Get("v")
		want, got := own(v), slab.own(v)
		for i := range buf {
			buf[i] = 'x' // the read buffer is reused: neither may alias it
		}
		if got != want {
			t.Errorf("%s: slab.own %q, own %q", doc, got, want)
		}
	}
}
