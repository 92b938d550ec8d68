package protocol

import (
	"bytes"
	stdjson "encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestEncodeChunkNotificationMatchesMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "é", "\"", "\\", "\n", "\r", "\t", "\b", "\f", "\x01", "\x1f", "<", ">", "&", "\u2028", "\u2029", "\xff", "\xe2\x82", "😀", " ", "12@34|"}
	for range 20000 {
		var s string
		for range r.IntN(12) {
			s += alphabet[r.IntN(len(alphabet))]
		}
		want := EncodeNotification(MethodSessionUpdate, SessionNotification{SessionID: "sess-1", Update: ChunkUpdate{SessionUpdate: UpdateAgentMessageChunk, Content: Text(s)}})
		got := EncodeChunkNotification("sess-1", UpdateAgentMessageChunk, s)
		// go-json's NoEscape still escapes <>& in some strings (non-ASCII,
		// invalid UTF-8), so the decoded values are compared, not the bytes.
		var a, b any
		if Unmarshal(got, &a) != nil || Unmarshal(want, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("%q:\n got %s\nwant %s", s, got, want)
		}
	}
}

func TestChunkNotificationJoinsPieces(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "é", "\"", "\\", "\n", "\x01", "\u2028", "😀", "12@34|"}
	for range 5000 {
		var pieces []string
		whole := ""
		for range 1 + r.IntN(6) {
			var p string
			for range r.IntN(5) {
				p += alphabet[r.IntN(len(alphabet))]
			}
			pieces = append(pieces, p)
			whole += p
		}
		c := StartChunkNotification("sess-1", UpdateAgentThoughtChunk, 0)
		for _, p := range pieces {
			c.Append(p)
		}
		got, want := c.Bytes(), EncodeChunkNotification("sess-1", UpdateAgentThoughtChunk, whole)
		if string(got) != string(want) {
			t.Fatalf("%q:\n got %s\nwant %s", pieces, got, want)
		}
		// Frames are kept for replay: no large slack.
		if cap(got) > len(got)+len(got)/4+64 {
			t.Fatalf("%d bytes in a buffer of %d", len(got), cap(got))
		}
	}
}

func TestEncodeLineIsMarshalAndNewline(t *testing.T) {
	for _, v := range []any{
		map[string]any{"text": "<a & b> é \u2028 \xff", "n": 1},
		SessionNotification{SessionID: "s", Update: ChunkUpdate{SessionUpdate: UpdateAgentMessageChunk, Content: Text("x\ny")}},
		[]int{1, 2},
	} {
		var buf strings.Builder
		if err := EncodeLine(&buf, v); err != nil {
			t.Fatal(err)
		}
		want, err := Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if buf.String() != string(want)+"\n" {
			t.Fatalf("EncodeLine %s\nMarshal    %s", buf.String(), want)
		}
	}
}

func BenchmarkEncodeChunk(b *testing.B) {
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_ = EncodeNotification(MethodSessionUpdate, SessionNotification{SessionID: "0b9c8f6e-2a4d-4c1e-9d63-8b2f1e7a5c30", Update: ChunkUpdate{SessionUpdate: UpdateAgentMessageChunk, Content: Text("123@1700000000000000000|")}})
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_ = EncodeChunkNotification("0b9c8f6e-2a4d-4c1e-9d63-8b2f1e7a5c30", UpdateAgentMessageChunk, "123@1700000000000000000|")
		}
	})
}

// FuzzAppendJSONString: the escaping is encoding/json's without HTML
// escapes, byte for byte (invalid UTF-8 as \ufffd, U+2028/9 escaped).
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "token ", "12345678abcdefgh\"", "abcdefg\x01", "abcdefgh\\ijklmnop", "\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f", "éééééé\xff\u2028", "aaaaaaa\x1faaaaaaaa", "<html>&amp;</html> x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want bytes.Buffer
		enc := stdjson.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := AppendJSONString(nil, s); string(got)+"\n" != want.String() {
			t.Fatalf("%q:\n got %s\nwant %s", s, got, want.Bytes())
		}
	})
}

func TestChunkNotificationReusesItsBuffer(t *testing.T) {
	var buf []byte
	for i, pieces := range [][]string{{"a", "b\n"}, {"ccc"}, {strings.Repeat("é", 3000), "\"x\""}, {""}} {
		c := StartChunkNotificationIn(buf, "sess-1", UpdateAgentMessageChunk)
		for _, p := range pieces {
			c.Append(p)
		}
		var frame []byte
		frame, buf = c.Detach()
		want := EncodeChunkNotification("sess-1", UpdateAgentMessageChunk, strings.Join(pieces, ""))
		if string(frame) != string(want) || cap(frame) != len(frame) {
			t.Fatalf("notification %d: %s (cap %d)\nwant %s", i, frame, cap(frame), want)
		}
		if i > 0 && cap(buf) < len(frame) {
			t.Fatalf("notification %d: the buffer given back holds %d bytes", i, cap(buf))
		}
	}
}

// A chunk of a message carries its messageId: the bytes Marshal makes of
// the ChunkUpdate, whether it was built in one piece or grown.
func TestMessageChunkMatchesMarshal(t *testing.T) {
	want := EncodeNotification(MethodSessionUpdate, SessionNotification{SessionID: "sess-1",
		Update: ChunkUpdate{SessionUpdate: UpdateAgentMessageChunk, Content: Text("hé \"x\"\n"), MessageID: "m-1\"q"}})
	c := StartMessageChunkIn(nil, "sess-1", UpdateAgentMessageChunk, "m-1\"q")
	c.Append("hé ")
	c.Append("\"x\"\n")
	frame, _ := c.Detach()
	if string(frame) != string(want) {
		t.Fatalf("got  %s\nwant %s", frame, want)
	}
}

// A marker found twice (or not at all) is refused before anything is
// written: the caller then encodes the value as it is.
func TestEncodeLineSplicedRefusesAnAmbiguousMarker(t *testing.T) {
	type pair struct{ A, B string }
	var w bytes.Buffer
	for _, v := range []pair{{"mark", "mark"}, {"other", "x"}} {
		ok, err := EncodeLineSpliced(&w, v, []string{"mark"}, []string{"text"})
		if ok || err != nil || w.Len() != 0 {
			t.Fatalf("%v: ok %v, err %v, wrote %q", v, ok, err, w.String())
		}
	}
	ok, err := EncodeLineSpliced(&w, pair{"mark", "<&>"}, []string{"mark"}, []string{"a\"<é"})
	if want := "{\"A\":\"a\\\"\\u003cé\",\"B\":\"\\u003c\\u0026\\u003e\"}\n"; !ok || err != nil || w.String() != want {
		t.Fatalf("ok %v, err %v: %q, want %q", ok, err, w.String(), want)
	}
}
