package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/rs/zerolog"

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
	case e.Kind != KindMessage && e.Kind != KindCompaction:
		return fmt.Errorf("unknown kind %q", e.Kind)
	case e.Message.Role == "":
		return errors.New("missing message role")
	}
	return nil
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

// encodeAll encodes a whole history, checking that seqs strictly increase.
func encodeAll(entries []Entry) ([]byte, error) {
	var buf []byte
	var last int64
	for i := range entries {
		e := entries[i]
		if e.Kind == "" {
			e.Kind = KindMessage
		}
		if e.Seq <= last {
			return nil, fmt.Errorf("%w: entry %d has seq %d after %d", ErrBadSeq, i, e.Seq, last)
		}
		last = e.Seq
		var err error
		if buf, err = appendLine(buf, &e); err != nil {
			return nil, err
		}
	}
	return buf, nil
}
