package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"unicode/utf8"
)

// InvalidInput is the error result for input that fails validation. The
// prefix "Invalid input for tool '<name>': " is what the model sees.
func InvalidInput(name, reason string) Result {
	return Errorf(invalidInputMessage(name, reason))
}

func invalidInputMessage(name, reason string) string {
	return fmt.Sprintf("Invalid input for tool '%s': %s", name, reason)
}

// decodeInput strictly decodes a JSON object into v (a pointer to a struct
// whose optional/required fields are pointers). It returns a reason suitable
// for InvalidInput. Empty input and null are treated as {}.
func decodeInput(input json.RawMessage, v any) error {
	data := bytes.TrimSpace(input)
	if len(data) == 0 || bytes.Equal(data, []byte("null")) {
		data = []byte("{}")
	}
	if data[0] != '{' {
		return errors.New("input must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describeJSONError(err)
	}
	if dec.More() {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

func describeJSONError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			return fmt.Errorf("expected %s, got %s", jsonTypeName(te.Type), te.Value)
		}
		return fmt.Errorf("field '%s' must be %s, got %s", field, jsonTypeName(te.Type), te.Value)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return errors.New("malformed JSON: unexpected end of input")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("malformed JSON: %s", se.Error())
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if rest, ok := strings.CutPrefix(msg, "unknown field "); ok {
		return fmt.Errorf("unknown field '%s'", strings.Trim(rest, `"`))
	}
	return errors.New(msg)
}

func jsonTypeName(t reflect.Type) string {
	if t == nil {
		return "a different type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

// requireString checks a required, non-empty string field.
func requireString(field string, v *string) error {
	if v == nil {
		return fmt.Errorf("missing required field '%s'", field)
	}
	if strings.TrimSpace(*v) == "" {
		return fmt.Errorf("field '%s' must not be empty", field)
	}
	return nil
}

// looseFields decodes input leniently for Describe: malformed input gives
// an empty map, never an error or a panic.
func looseFields(input json.RawMessage) map[string]any {
	var m map[string]any
	if err := json.Unmarshal(input, &m); err != nil || m == nil {
		return map[string]any{}
	}
	return m
}

func looseString(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

func looseInt(m map[string]any, key string) int {
	f, ok := m[key].(float64)
	if !ok || f < 0 || f > 1<<31 {
		return 0
	}
	return int(f)
}

// envCwd is the session cwd, or the process cwd when the env has none.
func envCwd(env *Env) string {
	if env != nil && env.Cwd != "" {
		return env.Cwd
	}
	wd, err := os.Getwd()
	if err != nil {
		return string(filepath.Separator)
	}
	return wd
}

// ResolvePath turns a tool path into an absolute, clean path: `~` and `~/…`
// expand to the user's home directory, relative paths resolve against
// Env.Cwd.
func ResolvePath(env *Env, p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			p = filepath.Join(home, p[1:])
		}
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(envCwd(env), p)
	}
	return filepath.Clean(p)
}

// displayPath is abs relative to the session cwd when it lies inside it,
// else abs itself.
func displayPath(env *Env, abs string) string {
	cwd := envCwd(env)
	rel, err := filepath.Rel(cwd, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return abs
	}
	return rel
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

// oneLine collapses line breaks so a string fits a title.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "\r\n", " ")
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "\r", " ")
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
