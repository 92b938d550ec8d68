package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// SpillDir is the directory under Env.Home where Bound saves large outputs.
const SpillDir = "tool-outputs"

// Bound keeps a result's Output within limit characters (runes; limit <= 0
// means DefaultLimits().MaxOutputChars). A longer output is saved in full to
// <home>/tool-outputs/<uuid>.txt (or a temp directory when home is empty)
// and replaced by its head (~40% of limit) and tail (~40%) around a note
// giving the total size and the saved path. Cuts prefer line boundaries and
// never split a UTF-8 sequence. IsError, Diff and Raw are kept as they are.
//
// The actor layer calls it on every tool result before handing it to the
// model.
func Bound(res Result, home string, limit int) Result {
	if limit <= 0 {
		limit = DefaultLimits().MaxOutputChars
	}
	out := res.Output
	if len(out) <= limit { // bytes ≥ runes
		return res
	}
	total := utf8.RuneCountInString(out)
	if total <= limit {
		return res
	}
	headChars := limit * 2 / 5
	tailChars := limit * 2 / 5
	head := out[:byteOffsetOfRune(out, headChars)]
	tail := out[byteOffsetOfRune(out, total-tailChars):]
	// Prefer whole lines when a line break is near the cut.
	if i := strings.LastIndexByte(head, '\n'); i >= 0 && len(head)-i < len(head)/5 {
		head = head[:i+1]
	}
	if i := strings.IndexByte(tail, '\n'); i >= 0 && i < len(tail)/5 {
		tail = tail[i+1:]
	}

	var note string
	path, err := spill(home, out)
	omitted := total - utf8.RuneCountInString(head) - utf8.RuneCountInString(tail)
	if err != nil {
		note = fmt.Sprintf("[... %d characters omitted: the output had %d characters and %d lines; saving it in full failed: %v ...]",
			omitted, total, countLines(out), err)
	} else {
		note = fmt.Sprintf("[... %d characters omitted: the output had %d characters and %d lines; the full output was saved to %s — read parts of it with read_file (start_line/end_line) or search it with grep ...]",
			omitted, total, countLines(out), path)
	}
	var b strings.Builder
	b.Grow(len(head) + len(note) + len(tail) + 4)
	b.WriteString(head)
	if !strings.HasSuffix(head, "\n") {
		b.WriteByte('\n')
	}
	b.WriteString("\n")
	b.WriteString(note)
	b.WriteString("\n\n")
	b.WriteString(tail)
	res.Output = b.String()
	return res
}

// byteOffsetOfRune is the byte offset of the n-th rune of s (len(s) if n is
// past the end).
func byteOffsetOfRune(s string, n int) int {
	if n <= 0 {
		return 0
	}
	count := 0
	for i := range s {
		if count == n {
			return i
		}
		count++
	}
	return len(s)
}

func spill(home, text string) (string, error) {
	if home == "" {
		home = filepath.Join(os.TempDir(), "iac-code")
	}
	dir := filepath.Join(home, SpillDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, uuid.NewString()+".txt")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return "", err
	}
	return path, nil
}
