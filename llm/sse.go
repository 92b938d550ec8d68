package llm

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
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
	r := bufio.NewReaderSize(body, 32<<10)
	var data, long, event []byte
	for {
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

// eventBuffered reports whether r holds a whole event (up to its blank
// line): reading it will not wait for the network.
func eventBuffered(r *bufio.Reader) bool {
	n := r.Buffered()
	if n == 0 {
		return false
	}
	b, _ := r.Peek(n)
	return bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\n\r\n"))
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
