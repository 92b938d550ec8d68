package llm

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

// pieces is a reader returning one piece per Read, as a socket returns what
// has arrived.
type pieces []string

func (p *pieces) Read(b []byte) (int, error) {
	if len(*p) == 0 {
		return 0, io.EOF
	}
	n := copy(b, (*p)[0])
	(*p)[0] = (*p)[0][n:]
	if (*p)[0] == "" {
		*p = (*p)[1:]
	}
	return n, nil
}

func TestReadSSETellsWhetherTheNextEventIsBuffered(t *testing.T) {
	body := pieces{
		"data: A\n\ndata: B\n\ndata: C-starts", // C is incomplete: reading it waits
		"-and-ends\n\n",
		"data: D\r\n\r\n",
	}
	type got struct {
		data string
		more bool
	}
	var evs []got
	err := readSSE(&body, func(_, data []byte, more bool) (bool, error) {
		evs = append(evs, got{string(data), more})
		return false, nil
	})
	if err != io.EOF {
		t.Fatal(err)
	}
	want := []got{{"A", true}, {"B", false}, {"C-starts-and-ends", false}, {"D", false}}
	if len(evs) != len(want) {
		t.Fatalf("%+v", evs)
	}
	for i := range want {
		if evs[i] != want[i] {
			t.Fatalf("event %d: %+v, want %+v", i, evs[i], want[i])
		}
	}
}

func TestDecodedEventsCarryBuffered(t *testing.T) {
	chunk := func(text string) string {
		return `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"` + text + `"},"finish_reason":null}]}` + "\n\n"
	}
	finish := `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	body := pieces{chunk("a") + chunk("b"), chunk("c"), finish + "data: [DONE]\n\n"}
	var texts []string
	var buffered []bool
	err := decodeOpenAIStream(&body, func(ev Event) {
		if ev.Type == EventTextDelta {
			texts = append(texts, ev.Text)
			buffered = append(buffered, ev.Buffered)
		}
		if ev.Type == EventStop && ev.Buffered {
			t.Error("the stop event says more is buffered")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(texts) != 3 || !buffered[0] || buffered[1] || buffered[2] {
		t.Fatalf("texts %q buffered %v, want a (buffered), b, c", texts, buffered)
	}
}

// sseRun is what readSSE passed to fn, and returned.
type sseRun struct {
	events []string // event, data, more
	texts  []string // event, data
	err    error
}

func runSSE(input string, cuts []byte, size, grow int, whole bool) sseRun {
	// The same reads for both ways: input cut where cuts say.
	var body pieces
	rest := input
	for _, c := range cuts {
		if len(rest) == 0 {
			break
		}
		n := min(int(c)+1, len(rest))
		body = append(body, rest[:n])
		rest = rest[n:]
	}
	if rest != "" {
		body = append(body, rest)
	}
	var r sseRun
	r.err = readSSEWith(&body, size, grow, whole, nil, func(event, data []byte, more bool) (bool, error) {
		r.events = append(r.events, fmt.Sprintf("%q %q %v", event, data, more))
		r.texts = append(r.texts, fmt.Sprintf("%q %q", event, data))
		return bytes.Equal(data, []byte("[DONE]")), nil
	})
	return r
}

// FuzzReadSSEWhole: taking whole events from the buffer passes fn what the
// line-by-line reading passes, whatever the input and however it arrives.
func FuzzReadSSEWhole(f *testing.F) {
	f.Add("data: A\n\ndata: B\n\nevent: e\ndata: C\n\n: c\nid: 1\ndata: D\ndata: E\n\ndata: [DONE]\n\n", []byte{3, 9, 40}, uint8(0))
	f.Add("event: x\r\ndata: y\r\n\r\ndata:\n\nevent:\ndata: z\n\nevent: p\n\ndata: q", []byte{1, 1, 1, 200}, uint8(1))
	f.Add("data: "+strings.Repeat("long ", 20)+"\n\ndata: a\n\n", []byte{}, uint8(2))
	f.Fuzz(func(t *testing.T, input string, cuts []byte, small uint8) {
		size, grow := sseBuffer, sseBehindBuffer
		if small%2 == 1 {
			// bufio's smallest: events cut by the buffer's end, long
			// lines, and the change to a larger buffer.
			size, grow = 16, 16+int(small)
		}
		fast, slow := runSSE(input, cuts, size, grow, true), runSSE(input, cuts, size, grow, false)
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q cut %v:\nwhole %+v\nlines %+v", input, cuts, fast, slow)
		}
		// The larger buffer changes only what is known to be buffered.
		if kept := runSSE(input, cuts, size, 0, false); !reflect.DeepEqual(fast.texts, kept.texts) || fast.err != kept.err {
			t.Fatalf("%q cut %v:\ngrown %+v\nkept  %+v", input, cuts, fast, kept)
		}
	})
}

// countedReads counts the reads of r.
type countedReads struct {
	r io.Reader
	n int
}

func (c *countedReads) Read(b []byte) (int, error) { c.n++; return c.r.Read(b) }

func TestReadSSEGrowsItsBufferWhenBehind(t *testing.T) {
	ev := "data: " + strings.Repeat("x", 100) + "\n\n"
	reads := func(grow int) int {
		// Everything is there at once: the reader is behind.
		body := &countedReads{r: strings.NewReader(strings.Repeat(ev, 100))}
		n := 0
		err := readSSEWith(body, 1024, grow, true, nil, func(_, data []byte, more bool) (bool, error) {
			n++
			return false, nil
		})
		if err != io.EOF || n != 100 {
			t.Fatalf("%d events, %v", n, err)
		}
		return body.n
	}
	kept, grown := reads(0), reads(8192)
	if grown >= kept/2 {
		t.Fatalf("%d reads with a buffer grown to 8 KiB, %d with 1 KiB", grown, kept)
	}
}
