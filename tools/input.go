package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/iac-code/iac-code/protocol"
)

// InputError is a Prepare error for input that fails decoding or
// validation. Its text, "Invalid input for tool '<name>': <reason>", is what
// the model sees, so it can correct the call.
type InputError struct {
	Tool   string
	Reason string
}

func (e *InputError) Error() string { return invalidInputMessage(e.Tool, e.Reason) }

// InvalidInput is the error result for input that fails validation.
func InvalidInput(name, reason string) Result {
	return Errorf(invalidInputMessage(name, reason))
}

func invalidInputMessage(name, reason string) string {
	return fmt.Sprintf("Invalid input for tool '%s': %s", name, reason)
}

func inputError(tool, reason string) error { return &InputError{Tool: tool, Reason: reason} }

// decodeInput decodes a tool's JSON object into v (a pointer to a struct
// whose fields are pointers, so absent and zero differ) with the one strict
// decoder (protocol.UnmarshalStrict): exact names, no duplicates, no unknown
// members, exact types. Empty input and null are {}.
func decodeInput(tool string, input json.RawMessage, v any) error {
	data := bytes.TrimSpace(input)
	if len(data) == 0 || bytes.Equal(data, []byte("null")) {
		data = []byte("{}")
	}
	if data[0] != '{' {
		if !json.Valid(data) {
			return inputError(tool, "malformed JSON")
		}
		return inputError(tool, "input must be a JSON object")
	}
	if err := protocol.UnmarshalStrict(data, v); err != nil {
		var se *protocol.StrictError
		if errors.As(err, &se) {
			return inputError(tool, se.Reason)
		}
		return inputError(tool, err.Error())
	}
	return nil
}

// requireString checks a required, non-empty string field.
func requireString(tool, field string, v *string) error {
	if v == nil {
		return inputError(tool, fmt.Sprintf("missing required field '%s'", field))
	}
	if strings.TrimSpace(*v) == "" {
		return inputError(tool, fmt.Sprintf("field '%s' must not be empty", field))
	}
	return nil
}

// titleMaxRunes bounds a title; a longer one says how much is left out.
const titleMaxRunes = 2000

// printable makes s safe to show as a title: control characters (other than
// newline and tab), and format characters such as bidirectional overrides
// and zero-width spaces, which can make a text look like another, are
// written as escapes (\r, \x1b, \u202e); a text over max runes is cut with a
// note of how many were left out.
func printable(s string, max int) string {
	var b strings.Builder
	n := 0
	for i, r := range s {
		if n == max {
			rest := utf8.RuneCountInString(s[i:])
			fmt.Fprintf(&b, "… (%d more characters)", rest)
			break
		}
		n++
		switch {
		case r == utf8.RuneError:
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				fmt.Fprintf(&b, `\x%02x`, s[i])
				continue
			}
			b.WriteRune(r)
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// searchTitle names a search's pattern and, unless it is the cwd, the
// resolved place searched: "Grep x in /etc".
func searchTitle(verb, pattern string, where Resolved) string {
	title := verb + " " + printable(truncateRunes(oneLine(pattern), 200), titleMaxRunes)
	if where.Shown() != "." {
		title += " in " + printable(where.Shown(), titleMaxRunes)
	}
	return title
}

// oneLine collapses line breaks so a string fits a one-line title.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "\r\n", " ")
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "\r", " ")
}

// truncateRunes shortens s to at most n runes, appending "…" when cut.
func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n {
			break
		}
		count++
	}
	return s[:i] + "…"
}

// countLines counts the lines of a text the way an editor does: a final
// line without a newline counts, an empty text has 0 lines.
func countLines(s string) int {
	if s == "" {
		return 0
	}
	n := strings.Count(s, "\n")
	if !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}
