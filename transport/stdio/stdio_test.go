package stdio

import (
	"bytes"
	"strings"
	"testing"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/protocol"
)

func TestReadLinesSplitsAndKeepsLongLines(t *testing.T) {
	long := strings.Repeat("a", 3<<20) // longer than the 1 MiB read buffer
	in := "one\r\n\n" + long + "\nlast-without-newline"
	var got []string
	if err := readLines(strings.NewReader(in), func(line []byte, tooLong bool) {
		if tooLong {
			t.Fatal("unexpected tooLong")
		}
		got = append(got, string(line))
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != "one" || got[1] != long || got[2] != "last-without-newline" {
		t.Fatalf("got %d lines", len(got))
	}
}

func TestReadLinesReportsOverlongLinesAndContinues(t *testing.T) {
	in := `{"jsonrpc":"2.0","id":"big","params":"` + strings.Repeat("b", MaxLine+10) + "\"}\nnext\n"
	var got []string
	tooLongSeen := 0
	if err := readLines(strings.NewReader(in), func(line []byte, tooLong bool) {
		if tooLong {
			tooLongSeen++
			if len(line) != peekHead || string(protocol.PeekID(line)) != `"big"` {
				t.Errorf("head of the long line: %d bytes, id %s", len(line), protocol.PeekID(line))
			}
			return
		}
		got = append(got, string(line))
	}); err != nil {
		t.Fatal(err)
	}
	if tooLongSeen != 1 || len(got) != 1 || got[0] != "next" {
		t.Fatalf("tooLong=%d, %d other lines", tooLongSeen, len(got))
	}
}

func TestWriterKeepsOrderAndDrainsOnClose(t *testing.T) {
	var out bytes.Buffer
	w := newWriter(&out)
	go w.loop()
	var want strings.Builder
	for i := 0; i < 10000; i++ {
		s := strings.Repeat("x", i%7) + "|"
		w.Send(actors.Frame{Data: []byte(s)})
		want.WriteString(s + "\n")
	}
	w.close()
	if out.String() != want.String() {
		t.Fatal("output differs from what was sent, in order")
	}
}
