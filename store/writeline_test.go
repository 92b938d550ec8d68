package store

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

// oldLine is the history line as it was written before writeLine: the
// whole entry through protocol.EncodeLine.
func oldLine(t testing.TB, e *Entry) []byte {
	var b bytes.Buffer
	if err := protocol.EncodeLine(&b, e); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func newLine(t testing.TB, e *Entry) []byte {
	var b bytes.Buffer
	if err := writeLine(&b, e); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// longText is a text of at least n bytes drawn from pieces that need
// escaping, HTML escapes, multi-byte runes and invalid UTF-8, with runes
// of 2, 3 and 4 bytes placed across every byte of the pieces' boundaries.
func longText(r *rand.Rand, n int) string {
	alphabet := []string{"a", "é", "語", "😀", "\"", "\\", "\n", "\r", "\t", "\x01", "\x1f", "<", ">", "&",
		"\u2028", "\u2029", "\xff", "\x80", "\xe2\x82", "\xf0\x9f", " ", "plain words "}
	var b strings.Builder
	for b.Len() < n {
		// Runes cut by the next piece boundary, k bytes before it.
		if next := (b.Len()/(16<<10) + 1) * (16 << 10); next-b.Len() < 8 && r.IntN(2) == 0 {
			b.WriteString(strings.Repeat("a", max(0, next-b.Len()-r.IntN(4))))
			b.WriteString([]string{"é", "語", "😀", "\u2028", "\xf0\x9f", "\x80\x80\x80\x80"}[r.IntN(6)])
			continue
		}
		b.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

func TestWriteLineIsTheOldEncoding(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 40 {
		msg := llm.Message{Role: llm.RoleAssistant, ID: "m-1", Content: []llm.Block{
			{Type: llm.BlockThinking, Text: longText(r, spliceText+r.IntN(80<<10)), Signature: "sig<&>"},
			{Type: llm.BlockRedactedThinking, Data: "opaque"},
			{Type: llm.BlockText, Text: "short <b> \"quoted\" é"},
			{Type: llm.BlockText, Text: longText(r, spliceText+r.IntN(80<<10))},
			{Type: llm.BlockToolUse, ToolCallID: "c1", Name: "bash", Input: []byte(`{"text":"x"}`),
				Display: []byte(`{"sessionUpdate":"tool_call","content":[{"type":"content","content":{"type":"text","text":"<x>"}}]}`)},
			{Type: llm.BlockText, Text: longText(r, spliceText)},
		}}
		if round%2 == 1 {
			msg.Content = msg.Content[3:4] // one long text alone
		}
		e := Entry{Seq: int64(round + 1), Time: time.Date(2026, 12, 7, 4, 0, 0, round, time.UTC), Kind: KindMessage, Message: msg}
		before := slicesCloneBlocks(msg.Content)
		got := newLine(t, &e)
		want := oldLine(t, &e)
		if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Fatalf("round %d: line differs from the old encoding at byte %d of %d/%d: got %q, want %q",
				round, i, len(got), len(want), got[max(0, i-20):min(len(got), i+20)], want[max(0, i-20):min(len(want), i+20)])
		}
		for i := range before {
			if before[i].Text != msg.Content[i].Text {
				t.Fatalf("round %d: writeLine changed the caller's block %d", round, i)
			}
		}
		var back Entry
		if err := decodeEntry(bytes.TrimSuffix(got, []byte("\n")), &back); err != nil || back.Seq != e.Seq || len(back.Message.Content) != len(msg.Content) {
			t.Fatalf("round %d: line does not decode back: %v", round, err)
		}
	}
}

func slicesCloneBlocks(b []llm.Block) []llm.Block { return append([]llm.Block(nil), b...) }

// A line is written in writes of about the buffer's size, not one of the
// text's size, and a failing write ends it with the error.
func TestWriteLineWritesInPieces(t *testing.T) {
	text := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	e := Entry{Seq: 1, Kind: KindMessage, Message: llm.Message{Role: llm.RoleAssistant,
		Content: []llm.Block{{Type: llm.BlockText, Text: text}}}}
	var w sizesWriter
	if err := writeLine(&w, &e); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.b, oldLine(t, &e)) {
		t.Fatal("line differs from the old encoding")
	}
	if w.largest > 64<<10 || len(w.sizes) < 16 {
		t.Fatalf("writes of %v bytes", w.sizes)
	}
	fail := errors.New("disk full")
	bad := sizesWriter{failAfter: 3, err: fail}
	if err := writeLine(&bad, &e); !errors.Is(err, fail) || len(bad.sizes) != 3 {
		t.Fatalf("failing writer: err %v after %d writes", err, len(bad.sizes))
	}
}

type sizesWriter struct {
	b         []byte
	sizes     []int
	largest   int
	failAfter int
	err       error
}

func (w *sizesWriter) Write(p []byte) (int, error) {
	if w.err != nil && len(w.sizes) == w.failAfter {
		return 0, w.err
	}
	w.b = append(w.b, p...)
	w.sizes = append(w.sizes, len(p))
	w.largest = max(w.largest, len(p))
	return len(p), nil
}

// FuzzWriteLine compares the spliced line with the old encoding for a long
// text made of any bytes, repeated, so that the pieces cut it anywhere.
func FuzzWriteLine(f *testing.F) {
	f.Add([]byte("é語😀\"\\\n<>&\u2028\xff\xe2\x82"), uint16(0))
	f.Add([]byte("\xf0\x9f\x98"), uint16(7))
	f.Fuzz(func(t *testing.T, unit []byte, shift uint16) {
		if len(unit) == 0 {
			return
		}
		text := strings.Repeat("a", int(shift%64)) + strings.Repeat(string(unit), (spliceText+40000)/len(unit)+1)
		e := Entry{Seq: 7, Kind: KindMessage, Message: llm.Message{Role: llm.RoleAssistant,
			Content: []llm.Block{{Type: llm.BlockThinking, Text: text}, {Type: llm.BlockText, Text: string(unit) + text}}}}
		got := newLine(t, &e)
		if !bytes.Equal(got, oldLine(t, &e)) {
			t.Fatalf("line differs from the old encoding for unit %q shift %d", unit, shift)
		}
	})
}
