package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"unicode/utf8"
)

// NameReadFile is the read_file tool's name.
const NameReadFile = "read_file"

// ReadFile reads a text file with numbered lines.
type ReadFile struct{ Limits Limits }

func (ReadFile) Name() string { return NameReadFile }
func (t ReadFile) Description() string {
	l := t.Limits.WithDefaults()
	return fmt.Sprintf("Read a UTF-8 text file. Output is numbered like `cat -n` (line number, tab, line). "+
		"Use start_line/end_line (1-based, inclusive) to read part of a large file. At most %d lines / %d MiB are returned per call; "+
		"a note says when the output was truncated. Binary files and directories are refused (use list_files for directories). "+
		"Relative paths resolve against the working directory; ~ is the home directory.",
		l.MaxReadLines, l.MaxReadBytes>>20)
}
func (ReadFile) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"path":{"type":"string","description":"File to read (absolute, relative to the working directory, or ~/...)"},` +
		`"start_line":{"type":"integer","minimum":1,"description":"First line to read (1-based, inclusive)"},` +
		`"end_line":{"type":"integer","minimum":1,"description":"Last line to read (1-based, inclusive)"}},` +
		`"required":["path"],"additionalProperties":false}`)
}
func (ReadFile) Kind() Kind     { return KindRead }
func (ReadFile) ReadOnly() bool { return true }

type readFileInput struct {
	Path      *string `json:"path"`
	StartLine *int    `json:"start_line"`
	EndLine   *int    `json:"end_line"`
}

type readFileCall struct {
	t          ReadFile
	target     Resolved
	start, end int // end 0 = to the end
}

func (t ReadFile) Prepare(env *Env, input json.RawMessage) (Call, error) {
	var in readFileInput
	if err := decodeInput(NameReadFile, input, &in); err != nil {
		return nil, err
	}
	if err := requireString(NameReadFile, "path", in.Path); err != nil {
		return nil, err
	}
	c := &readFileCall{t: t, start: 1}
	if in.StartLine != nil {
		if *in.StartLine < 1 {
			return nil, inputError(NameReadFile, "field 'start_line' must be >= 1")
		}
		c.start = *in.StartLine
	}
	if in.EndLine != nil {
		if *in.EndLine < 1 {
			return nil, inputError(NameReadFile, "field 'end_line' must be >= 1")
		}
		if *in.EndLine < c.start {
			return nil, inputError(NameReadFile, fmt.Sprintf("end_line (%d) is before start_line (%d)", *in.EndLine, c.start))
		}
		c.end = *in.EndLine
	}
	target, err := Resolve(env, *in.Path)
	if err != nil {
		return nil, inputError(NameReadFile, err.Error())
	}
	c.target = target
	return c, nil
}

func (c *readFileCall) Title() string { return "Read " + printable(c.target.Shown(), titleMaxRunes) }
func (c *readFileCall) Locations() []Location {
	line := 0
	if c.start > 1 {
		line = c.start
	}
	return []Location{{Path: c.target.Location(), Line: line}}
}
func (c *readFileCall) Access() Access { return Access{Paths: []PathAccess{c.target.access(false)}} }

func (c *readFileCall) Run(ctx context.Context, _ func(string)) Result {
	start, end := c.start, c.end
	l := c.t.Limits.WithDefaults()
	shown := c.target.Shown()

	f, err := openRegular(c.target)
	if err != nil {
		return Errorf(err.Error())
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	if head, _ := br.Peek(8000); bytes.IndexByte(head, 0) >= 0 {
		return Errorf(fmt.Sprintf("Cannot read %s: it is a binary file", shown))
	}

	var out bytes.Buffer
	lineNo := 0
	var budget = l.MaxReadBytes
	truncated := "" // why the output stopped early
	lastShown := 0
	for {
		if ctx.Err() != nil {
			return Errorf("read_file cancelled")
		}
		inRange := lineNo+1 >= start
		max := int64(0)
		if inRange {
			max = budget
		}
		line, cut, err := readLineLimited(br, max)
		if err == io.EOF && line == nil {
			break
		}
		if err != nil && err != io.EOF {
			return Errorf(fmt.Sprintf("Error reading %s: %v", shown, err))
		}
		lineNo++
		if inRange {
			if cut {
				line = trimIncompleteRune(line)
			}
			if bytes.IndexByte(line, 0) >= 0 || !utf8.Valid(line) {
				return Errorf(fmt.Sprintf("Cannot read %s: it is a binary file (line %d is not UTF-8 text)", shown, lineNo))
			}
			writeNumbered(&out, lineNo, line)
			lastShown = lineNo
			budget -= int64(len(line))
			if cut {
				truncated = fmt.Sprintf("output capped at %d MiB (line %d was cut)", l.MaxReadBytes>>20, lineNo)
				break
			}
			if end > 0 && lineNo >= end {
				break
			}
			if lineNo-start+1 >= l.MaxReadLines || budget <= 0 {
				if _, perr := br.Peek(1); perr == nil {
					truncated = fmt.Sprintf("output capped at %d lines / %d MiB", l.MaxReadLines, l.MaxReadBytes>>20)
				}
				break
			}
		}
		if err == io.EOF {
			break
		}
	}
	if lastShown == 0 {
		if lineNo == 0 {
			return Result{Output: fmt.Sprintf("(%s is empty)", shown)}
		}
		return Errorf(fmt.Sprintf("start_line %d is past the end of %s (%d lines)", start, shown, lineNo))
	}
	if truncated != "" {
		fmt.Fprintf(&out, "\n[Truncated: showing lines %d-%d; %s. The file continues: use start_line=%d to read on.]\n",
			start, lastShown, truncated, lastShown+1)
	}
	return Result{Output: out.String()}
}

// openRegular opens the checked file for reading, with clear errors for
// the usual failures; what is opened is checked again (a regular file).
func openRegular(target Resolved) (*os.File, error) {
	shown := target.Shown()
	fail := func(err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("File not found: %s", shown)
		case errors.Is(err, fs.ErrPermission):
			return fmt.Errorf("Permission denied: %s", shown)
		}
		return fmt.Errorf("Cannot read %s: %v", shown, err)
	}
	fi, err := target.Stat()
	if err != nil {
		return nil, fail(err)
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory, not a file (use list_files to see its entries)", shown)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", shown)
	}
	f, err := target.OpenFile(os.O_RDONLY|openNonBlock, 0)
	if err != nil {
		return nil, fail(err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", shown)
	}
	return f, nil
}

// readLineLimited reads one line (without its "\n"), keeping at most max
// bytes of it; the rest of the line is consumed and dropped (cut = true).
// At EOF it returns the last unterminated line with io.EOF, or nil, io.EOF.
func readLineLimited(br *bufio.Reader, max int64) (line []byte, cut bool, err error) {
	line = []byte{}
	got := false
	for {
		frag, e := br.ReadSlice('\n')
		if len(frag) > 0 {
			got = true
		}
		if e == nil {
			frag = frag[:len(frag)-1]
		}
		if room := max - int64(len(line)); room > 0 {
			if int64(len(frag)) > room {
				line = append(line, frag[:room]...)
				cut = true
			} else {
				line = append(line, frag...)
			}
		} else if len(frag) > 0 && max > 0 {
			cut = true
		}
		switch e {
		case nil:
			return line, cut, nil
		case bufio.ErrBufferFull:
			continue
		case io.EOF:
			if !got {
				return nil, false, io.EOF
			}
			return line, cut, io.EOF
		default:
			return nil, false, e
		}
	}
}

// trimIncompleteRune drops a UTF-8 sequence cut at the end of b.
func trimIncompleteRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

// writeNumbered writes one `cat -n` line: the number right-aligned in six
// columns, a tab, the line.
func writeNumbered(out *bytes.Buffer, n int, line []byte) {
	var num [20]byte
	s := strconv.AppendInt(num[:0], int64(n), 10)
	for i := len(s); i < 6; i++ {
		out.WriteByte(' ')
	}
	out.Write(s)
	out.WriteByte('\t')
	out.Write(line)
	out.WriteByte('\n')
}
