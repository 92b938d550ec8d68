package llm

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"unsafe"

	"github.com/tidwall/gjson"
)

// readSSE reads server-sent events from body and calls fn with each event's
// name and data (the data lines joined by "\n"). Both slices alias the read
// buffer and are valid only during the call. more reports that the next
// event is already whole in the buffer (see Event.Buffered). Comments, id:
// and retry: are ignored; an event ends at a blank line, or at EOF for a
// lenient server. readSSE returns fn's error, nil when fn reports done,
// io.EOF at the end of the body, or the read error.
func readSSE(body io.Reader, fn func(event, data []byte, more bool) (done bool, err error)) error {
	return readSSEWith(body, sseBuffer, sseBehindBuffer, true, nil, fn)
}

// sseFastPath takes events of a stream's common kind straight from the
// read buffer, before readSSE looks for their line ends: b is the whole
// bytes buffered, from an event's start. It returns how many bytes of b it
// took, whole events only (0: the event at b is not its kind, or not whole
// in b, and is read the common way), and where the first line of b[n:]
// ends as eventEnd tells it (-2: not known). It must take only events the
// common reading would pass to fn whole, and do what fn would do with
// them (see oaStream.takeRun).
type sseFastPath func(b []byte) (n, firstNL int)

// Read buffer sizes of readSSE: a stream starts with sseBuffer; one whose
// reads fill it (the model sends faster than the events are handled) gets
// sseBehindBuffer, so its backlog comes in fewer reads and joins into
// fewer, larger chunk messages (Event.Buffered).
const (
	sseBuffer       = 32 << 10
	sseBehindBuffer = 256 << 10
)

// readSSEWith is readSSE with a read buffer of size bytes, grown to grow
// bytes (0: never) when a read fills it; whole takes the common event that
// is whole in the buffer without copying it (wholeEvent), and is false
// only in the test that compares both ways; fast, if not nil, is tried
// first on every event whole in the buffer (whole set).
func readSSEWith(body io.Reader, size, grow int, whole bool, fast sseFastPath, fn func(event, data []byte, more bool) (done bool, err error)) error {
	watch := &fillWatch{r: body}
	r := newSSEReader(watch, size)
	defer func() { putSSEReader(r, size) }() // r may have been replaced: the one in use then
	var data, long, event []byte
	// nl is where the first line of the buffered bytes ends, when the
	// last event's look at what follows it found that (-1: no line end
	// yet, -2: not known).
	nl := -2
	partial := false // the buffer ends in an event not whole yet
	for {
		if grow > size && watch.filled && len(data) == 0 && len(event) == 0 {
			// Behind: a read filled the buffer. Go on with a larger one,
			// which takes what this one holds first.
			held, _ := r.Peek(r.Buffered())
			r = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(held)), watch), grow)
			grow = 0
			nl = -2
		}
		if whole && len(data) == 0 && len(event) == 0 {
			got := true
			if k := r.Buffered(); (k == 0 || partial) && k < r.Size() {
				// One read, so that its events are taken whole below (the
				// first and a cut one too). If nothing came, the line
				// reading below returns the error (watch repeats it).
				_, _ = r.Peek(k + 1)
				nl = -2
				got = r.Buffered() > k
			}
			partial = false
			if b, _ := r.Peek(r.Buffered()); got && len(b) > 0 {
				n, next, done, ferr := wholeEvents(b, nl, fast, fn)
				_, _ = r.Discard(n)
				if ferr != nil {
					return ferr
				}
				if done {
					return nil
				}
				nl = next
				// What is left is the start of an event's first line:
				// read on (unless the buffer is full: a long line). With
				// a whole line left, the line reading takes it first, and
				// its reads are what they always were: the reads decide
				// what the events' more says (FuzzReadSSEWhole).
				partial = bytes.IndexByte(b[n:], '\n') < 0 && r.Buffered() < r.Size()
				if n > 0 || partial {
					continue // to the check for a larger buffer, as after each event
				}
			}
		}
		nl = -2 // a read may move the buffer
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: collect it.
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		eol := len(line) > 0 && line[len(line)-1] == '\n'
		line = bytes.TrimRight(line, "\r\n")
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if len(v) > 0 && v[0] == ' ' {
				v = v[1:]
			}
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, v...)
		} else if v, ok := bytes.CutPrefix(line, []byte("event:")); ok {
			event = append(event[:0], bytes.TrimSpace(v)...)
		}
		if (eol && len(line) == 0 || err == io.EOF) && (len(data) > 0 || len(event) > 0) {
			done, ferr := fn(event, data, err == nil && eventBuffered(r))
			if ferr != nil {
				return ferr
			}
			if done {
				return nil
			}
			data, event = data[:0], event[:0]
		}
		if err != nil {
			return err
		}
	}
}

// sseReaders keeps the read buffers of finished streams (sseBuffer bytes)
// for the next: a model call would otherwise allocate and clear 32 KiB.
// The events handed to fn alias the buffer only during the call, so a
// buffer is free once readSSEWith returns.
var sseReaders sync.Pool

func newSSEReader(r io.Reader, size int) *bufio.Reader {
	if size == sseBuffer {
		if br, ok := sseReaders.Get().(*bufio.Reader); ok {
			br.Reset(r)
			return br
		}
	}
	return bufio.NewReaderSize(r, size)
}

// putSSEReader keeps br for the next stream if it is of sseBuffer bytes.
func putSSEReader(br *bufio.Reader, size int) {
	if size == sseBuffer && br.Size() == sseBuffer {
		br.Reset(nil)
		sseReaders.Put(br)
	}
}

// fillWatch reports whether a read filled all the space it was given.
// Once r returned an error it returns that error again without reading:
// readSSEWith's look ahead (bufio's Peek) may take an error the line
// reading then has to see.
type fillWatch struct {
	r      io.Reader
	filled bool
	err    error
}

func (w *fillWatch) Read(b []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.r.Read(b)
	w.filled = n == len(b) && n > 0
	w.err = err
	return n, err
}

// wholeEvents passes fn the events wholeEvent takes from the start of b,
// one after another, and returns how many bytes they took: the buffer is
// looked at once per read, not once per event. Events fast takes (when
// not nil) are not passed to fn. firstNL is wholeEvent's, next the same
// for b[n:].
func wholeEvents(b []byte, firstNL int, fast sseFastPath, fn func(event, data []byte, more bool) (bool, error)) (n, next int, done bool, err error) {
	for {
		if fast != nil {
			if k, nl := fast(b[n:]); k > 0 {
				n += k
				firstNL = nl
				continue
			}
		}
		ev, d, k, ok := wholeEvent(b[n:], firstNL)
		if !ok {
			return n, firstNL, false, nil
		}
		n += k
		// No read happens before the next look: what follows this
		// event is the start of the next one.
		var more bool
		firstNL, more = eventEnd(b[n:])
		if done, err = fn(ev, d, more); done || err != nil {
			return n, firstNL, done, err
		}
	}
}

// eventBuffered reports whether r holds a whole event (up to its blank
// line): reading it will not wait for the network.
func eventBuffered(r *bufio.Reader) bool {
	n := r.Buffered()
	if n == 0 {
		return false
	}
	b, _ := r.Peek(n)
	return hasEventEnd(b)
}

func hasEventEnd(b []byte) bool {
	return bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\n\r\n"))
}

// eventEnd is hasEventEnd(b), and where b's first line ends (-1: nowhere).
// Every blank line starts at a line end, so the search for one starts at
// the first; in the common event it is right there.
func eventEnd(b []byte) (firstNL int, whole bool) {
	firstNL = bytes.IndexByte(b, '\n')
	if firstNL < 0 {
		return -1, false
	}
	rest := b[firstNL:]
	return firstNL, len(rest) > 1 && rest[1] == '\n' || hasEventEnd(rest)
}

// wholeEvent takes the event at the start of b when it is whole there and
// has the shape nearly every event of a model stream has: an optional
// "event:" line, one "data:" line, a blank line, all ending in "\n" alone.
// It returns what the line-by-line reading of readSSE would pass to fn
// (slices of b) and the event's length; anything else (comments, id:,
// several data lines, CR line ends, an event cut by the buffer's end) is
// left to that reading.
//
// firstNL is where b's first line ends when known (-1: no line end in b),
// else -2.
func wholeEvent(b []byte, firstNL int) (event, data []byte, n int, ok bool) {
	if firstNL == -1 {
		return nil, nil, 0, false
	}
	if firstNL < 0 {
		firstNL = bytes.IndexByte(b, '\n')
	}
	rest := b
	if len(rest) >= 6 && string(rest[:6]) == "event:" {
		nl := firstNL
		if nl < 0 || rest[nl-1] == '\r' {
			return nil, nil, 0, false
		}
		event = bytes.TrimSpace(rest[len("event:"):nl])
		rest = rest[nl+1:]
		firstNL = -2
	}
	// The prefix compared as one word: bytes.HasPrefix is a call.
	if len(rest) < 5 || string(rest[:5]) != "data:" {
		return nil, nil, 0, false
	}
	nl := firstNL
	if nl == -2 {
		nl = bytes.IndexByte(rest, '\n')
	}
	if nl < 0 || rest[nl-1] == '\r' || nl+1 >= len(rest) || rest[nl+1] != '\n' {
		return nil, nil, 0, false
	}
	data = rest[len("data:"):nl]
	if len(data) > 0 && data[0] == ' ' {
		data = data[1:]
	}
	if len(data) == 0 && len(event) == 0 {
		return nil, nil, 0, false // nothing to dispatch: the reading skips it
	}
	return event, data, len(b) - len(rest) + nl + 2, true
}

// parseJSON parses an event payload without copying it; strings taken from
// the result must go through own.
func parseJSON(data []byte) gjson.Result {
	return gjson.Parse(unsafe.String(unsafe.SliceData(data), len(data)))
}

// own returns a JSON string value as a string not aliasing the read buffer.
func own(v gjson.Result) string {
	if v.Type != gjson.String || v.Str == "" {
		return ""
	}
	if strings.IndexByte(v.Raw, '\\') >= 0 {
		return v.Str // unescaped into a fresh string already
	}
	return strings.Clone(v.Str)
}
