package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// NameWriteFile is the write_file tool's name.
const NameWriteFile = "write_file"

// WriteFile creates or overwrites a file.
type WriteFile struct{ Limits Limits }

func (WriteFile) Name() string { return NameWriteFile }
func (WriteFile) Description() string {
	return "Write a file with the given content, creating it (and missing parent directories) or replacing it entirely. " +
		"Prefer edit_file to change part of an existing file. Relative paths resolve against the working directory."
}
func (WriteFile) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"path":{"type":"string","description":"File to write (absolute, relative to the working directory, or ~/...)"},` +
		`"content":{"type":"string","description":"The complete new content of the file"}},` +
		`"required":["path","content"],"additionalProperties":false}`)
}
func (WriteFile) Kind() Kind     { return KindEdit }
func (WriteFile) ReadOnly() bool { return false }

func (WriteFile) Describe(env *Env, input json.RawMessage) (string, []Location) {
	p := looseString(looseFields(input), "path")
	if p == "" {
		return "Write file", nil
	}
	abs := ResolvePath(env, p)
	return "Write " + displayPath(env, abs), []Location{{Path: abs}}
}

type writeFileInput struct {
	Path    *string `json:"path"`
	Content *string `json:"content"`
}

func (WriteFile) Run(ctx context.Context, env *Env, input json.RawMessage) Result {
	var in writeFileInput
	if err := decodeInput(input, &in); err != nil {
		return InvalidInput(NameWriteFile, err.Error())
	}
	if err := requireString("path", in.Path); err != nil {
		return InvalidInput(NameWriteFile, err.Error())
	}
	if in.Content == nil {
		return InvalidInput(NameWriteFile, "missing required field 'content'")
	}
	if ctx.Err() != nil {
		return Errorf("write_file cancelled")
	}
	abs := ResolvePath(env, *in.Path)
	shown := displayPath(env, abs)

	var old *string
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(abs); err == nil {
		if fi.IsDir() {
			return Errorf(fmt.Sprintf("%s is a directory", shown))
		}
		if !fi.Mode().IsRegular() {
			return Errorf(fmt.Sprintf("%s is not a regular file", shown))
		}
		data, err := os.ReadFile(abs)
		if err != nil {
			return Errorf(fmt.Sprintf("Cannot read %s: %v", shown, err))
		}
		s := string(data)
		old = &s
		mode = fi.Mode().Perm()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Errorf(fmt.Sprintf("Cannot write %s: %v", shown, err))
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return Errorf(fmt.Sprintf("Cannot create the directory of %s: %v", shown, err))
	}
	if err := os.WriteFile(abs, []byte(*in.Content), mode); err != nil {
		return Errorf(fmt.Sprintf("Cannot write %s: %v", shown, err))
	}
	verb := "Created"
	if old != nil {
		verb = "Overwrote"
	}
	n := countLines(*in.Content)
	return Result{
		Output: fmt.Sprintf("%s %s: wrote %d %s (%d bytes)", verb, shown, n, plural(n, "line", "lines"), len(*in.Content)),
		Diff:   &Diff{Path: abs, OldText: old, NewText: *in.Content},
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
