package store

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

// history is the parsed content of a history file.
type history struct {
	entries []Entry
	// size is the file size; complete is the offset just past the last
	// newline. Bytes after it are an unterminated last line.
	size, complete int64
	// tailKept: the unterminated last line was a valid entry and is in entries.
	tailKept bool
}

// readHistory parses a history file. Lines that do not decode to a valid
// entry are skipped with a warning; a missing file is an empty history.
func readHistory(path string, log zerolog.Logger) (history, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		log.Warn().Str("file", path).Msg("history file missing; starting empty")
		return history{}, nil
	}
	if err != nil {
		return history{}, fmt.Errorf("read history: %w", err)
	}
	h := history{size: int64(len(data)), entries: make([]Entry, 0, bytes.Count(data, []byte{'\n'})+1)}
	var lastSeq int64
	line := 0
	for off := 0; off < len(data); {
		line++
		end := bytes.IndexByte(data[off:], '\n')
		terminated := end >= 0
		if !terminated {
			end = len(data) - off
		}
		raw := data[off : off+end]
		start := off
		off += end
		if terminated {
			off++
			h.complete = int64(off)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		var e Entry
		err := decodeEntry(raw, &e)
		if err == nil && e.Seq <= lastSeq {
			err = fmt.Errorf("seq %d does not follow %d", e.Seq, lastSeq)
		}
		if err != nil {
			ev := log.Warn().Str("file", path).Int("line", line).Int("offset", start).Err(err)
			if terminated {
				ev.Msg("skipping corrupt history line")
			} else {
				ev.Msg("skipping truncated last history line")
			}
			continue
		}
		if !terminated {
			h.tailKept = true
		}
		lastSeq = e.Seq
		h.entries = append(h.entries, e)
	}
	return h, nil
}

// decodeEntry decodes and validates one line. A decoder panic on garbage
// input is an error like any other.
func decodeEntry(raw []byte, e *Entry) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decode panic: %v", r)
		}
	}()
	if err := protocol.Unmarshal(raw, e); err != nil {
		return err
	}
	switch {
	case e.Seq <= 0:
		return errors.New("missing seq")
	case e.Kind == KindToolStart:
		if e.CallID == "" {
			return errors.New("tool_start without callId")
		}
		return nil
	case e.Kind == KindToolResult:
		if e.CallID == "" || e.Message.Role != llm.RoleTool || len(e.Message.Content) != 1 ||
			e.Message.Content[0].ToolCallID != e.CallID {
			return errors.New("tool_result without its one result")
		}
		return nil
	case e.Kind != KindMessage && e.Kind != KindCompaction && e.Kind != KindInterrupted:
		return fmt.Errorf("unknown kind %q", e.Kind)
	case e.Message.Role == "":
		return errors.New("missing message role")
	}
	return nil
}

// stampAppend returns entries ready to append after lastSeq, in a new
// slice: Seq 0 becomes the next number (a non-zero Seq must be greater than
// the previous one, else ErrBadSeq), a zero Time becomes now, an empty Kind
// a message.
func stampAppend(entries []Entry, lastSeq int64, now time.Time) ([]Entry, error) {
	stamped := make([]Entry, 0, len(entries))
	seq := lastSeq
	for _, e := range entries {
		if e.Seq == 0 {
			e.Seq = seq + 1
		} else if e.Seq <= seq {
			return nil, fmt.Errorf("%w: append seq %d after %d", ErrBadSeq, e.Seq, seq)
		}
		seq = e.Seq
		if e.Time.IsZero() {
			e.Time = now
		}
		if e.Kind == "" {
			e.Kind = KindMessage
		}
		stamped = append(stamped, e)
	}
	return stamped, nil
}

// appendLine encodes e as one JSONL line onto buf.
func appendLine(buf []byte, e *Entry) ([]byte, error) {
	b, err := protocol.Marshal(e)
	if err != nil {
		return buf, fmt.Errorf("encode entry %d: %w", e.Seq, err)
	}
	buf = append(buf, b...)
	return append(buf, '\n'), nil
}

// spliceText: a block text of this many bytes or more is written into its
// history line from its own string, a piece at a time (writeLine).
const spliceText = 32 << 10

// writeLine writes e as one JSONL line to w, the bytes protocol.EncodeLine
// writes. A long text (an answer, a tool's output) is not encoded into a
// buffer of its own size first: e is encoded with a marker in its place
// and the text spliced in as it is written (protocol.EncodeLineSpliced). A memory the size of the text, touched for the first time,
// costs a page fault per 4 KiB, about as much as the whole stream of it
// (docs/performance.md).
func writeLine(w io.Writer, e *Entry) error {
	var marks, texts []string
	var content []llm.Block
	for i, b := range e.Message.Content {
		if len(b.Text) < spliceText {
			continue
		}
		if content == nil {
			content = slices.Clone(e.Message.Content)
		}
		mark := textMark(len(marks))
		marks, texts = append(marks, mark), append(texts, b.Text)
		content[i].Text = mark
	}
	if content == nil {
		return protocol.EncodeLine(w, e)
	}
	marked := *e
	marked.Message.Content = content
	ok, err := protocol.EncodeLineSpliced(w, &marked, marks, texts)
	if ok || err != nil {
		return err
	}
	return protocol.EncodeLine(w, e)
}

// textNonce makes the markers of writeLine unguessable, so that no value
// from a model or a tool can hold one.
var textNonce = sync.OnceValue(func() string { return rand.Text() })

func textMark(i int) string { return "iac-code-text-" + textNonce() + "-" + strconv.Itoa(i) }

// encodeAll encodes a whole history as JSONL, checking that seqs strictly
// increase.
func encodeAll(entries []Entry) ([]byte, error) {
	var buf []byte
	err := encodeEach(entries, func(_ int64, b []byte) {
		buf = append(buf, b...)
		buf = append(buf, '\n')
	})
	return buf, err
}

// encodeRows encodes a whole history as one JSON document per entry,
// checking that seqs strictly increase.
func encodeRows(entries []Entry) (seqs []int64, rows [][]byte, err error) {
	seqs = make([]int64, 0, len(entries))
	rows = make([][]byte, 0, len(entries))
	err = encodeEach(entries, func(seq int64, b []byte) {
		seqs = append(seqs, seq)
		rows = append(rows, b)
	})
	return seqs, rows, err
}

// encodeEach encodes every entry (kind defaulting to message) in order,
// failing with ErrBadSeq unless seqs are positive and strictly increase.
func encodeEach(entries []Entry, emit func(seq int64, b []byte)) error {
	var last int64
	for i := range entries {
		e := entries[i]
		if e.Kind == "" {
			e.Kind = KindMessage
		}
		if e.Seq <= last {
			return fmt.Errorf("%w: entry %d has seq %d after %d", ErrBadSeq, i, e.Seq, last)
		}
		last = e.Seq
		b, err := protocol.Marshal(&e)
		if err != nil {
			return fmt.Errorf("encode entry %d: %w", e.Seq, err)
		}
		emit(e.Seq, b)
	}
	return nil
}
