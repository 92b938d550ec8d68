package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
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

type writeFileInput struct {
	Path    *string `json:"path"`
	Content *string `json:"content"`
}

type writeFileCall struct {
	target  Resolved
	content string
}

func (WriteFile) Prepare(env *Env, input json.RawMessage) (Call, error) {
	var in writeFileInput
	if err := decodeInput(NameWriteFile, input, &in); err != nil {
		return nil, err
	}
	if err := requireString(NameWriteFile, "path", in.Path); err != nil {
		return nil, err
	}
	if in.Content == nil {
		return nil, inputError(NameWriteFile, "missing required field 'content'")
	}
	target, err := Resolve(env, *in.Path)
	if err != nil {
		return nil, inputError(NameWriteFile, err.Error())
	}
	return &writeFileCall{target: target, content: *in.Content}, nil
}

func (c *writeFileCall) Title() string         { return "Write " + printable(c.target.Shown(), titleMaxRunes) }
func (c *writeFileCall) Locations() []Location { return []Location{{Path: c.target.Location()}} }
func (c *writeFileCall) Access() Access        { return Access{Paths: []PathAccess{c.target.access(true)}} }

func (c *writeFileCall) Run(ctx context.Context, _ func(string)) Result {
	if ctx.Err() != nil {
		return Errorf("write_file cancelled")
	}
	shown := c.target.Shown()
	var old *string
	mode := fs.FileMode(0o644)
	if fi, err := c.target.Stat(); err == nil {
		if fi.IsDir() {
			return Errorf(fmt.Sprintf("%s is a directory", shown))
		}
		if !fi.Mode().IsRegular() {
			return Errorf(fmt.Sprintf("%s is not a regular file", shown))
		}
		f, err := openRegular(c.target)
		if err != nil {
			return Errorf(err.Error())
		}
		data, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return Errorf(fmt.Sprintf("Cannot read %s: %v", shown, err))
		}
		s := string(data)
		old = &s
		mode = fi.Mode().Perm()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Errorf(fmt.Sprintf("Cannot write %s: %v", shown, err))
	}
	if err := c.target.MkdirParents(); err != nil {
		return Errorf(fmt.Sprintf("Cannot create the directory of %s: %v", shown, err))
	}
	if err := writeTarget(c.target, []byte(c.content), mode); err != nil {
		return Errorf(fmt.Sprintf("Cannot write %s: %v", shown, err))
	}
	verb := "Created"
	if old != nil {
		verb = "Overwrote"
	}
	n := countLines(c.content)
	return Result{
		Output: fmt.Sprintf("%s %s: wrote %d %s (%d bytes)", verb, shown, n, plural(n, "line", "lines"), len(c.content)),
		Diff:   &Diff{Path: c.target.Location(), OldText: old, NewText: c.content},
	}
}

// writeTarget replaces the content of the checked file (creating it).
func writeTarget(target Resolved, data []byte, mode fs.FileMode) error {
	f, err := target.OpenFile(os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if fi, err := f.Stat(); err == nil && !fi.Mode().IsRegular() {
		f.Close()
		return errors.New("not a regular file")
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
