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
	old, mode, err := c.localOld()
	if err != nil {
		return Errorf(err.Error())
	}
	if err := c.target.MkdirParents(); err != nil {
		return Errorf(fmt.Sprintf("Cannot create the directory of %s: %v", shown, err))
	}
	if err := writeTarget(c.target, []byte(c.content), mode); err != nil {
		return Errorf(fmt.Sprintf("Cannot write %s: %v", shown, err))
	}
	return c.written(old)
}

// RunVia writes through the client when it can write (it creates missing
// files; its buffer and review see the change). The diff's old text is
// read through the client when it can also read, so it is the editor's
// buffer; else from the disk. With only the read capability the write is
// local, and so is its old text: the diff shows what is replaced.
func (c *writeFileCall) RunVia(ctx context.Context, cl Client, progress func(string)) Result {
	if cl == nil || !cl.Caps().WriteTextFile {
		return c.Run(ctx, progress)
	}
	if ctx.Err() != nil {
		return Errorf("write_file cancelled")
	}
	shown, path := c.target.Shown(), c.target.Location()
	var old *string
	if cl.Caps().ReadTextFile {
		text, err := cl.ReadTextFile(ctx, path, 0, 0)
		switch {
		case err == nil:
			old = &text
		case ctx.Err() != nil:
			return Errorf("write_file cancelled")
		case isClientNotFound(err) || !c.existsLocally():
			// A new file: nothing to show as old text.
		default:
			return Errorf(fmt.Sprintf("Cannot read %s through the editor: %v", shown, err))
		}
	} else {
		var err error
		if old, _, err = c.localOld(); err != nil {
			return Errorf(err.Error())
		}
	}
	if ctx.Err() != nil {
		return Errorf("write_file cancelled")
	}
	if err := cl.WriteTextFile(ctx, path, c.content); err != nil {
		return Errorf(fmt.Sprintf("Cannot write %s through the editor: %v", shown, err))
	}
	return c.written(old)
}

// Preview implements Previewer: the old text as RunVia reads it (the
// editor's buffer when the client writes and reads).
func (c *writeFileCall) Preview(ctx context.Context, cl Client) *Diff {
	if cl != nil && cl.Caps().WriteTextFile && cl.Caps().ReadTextFile {
		text, err := cl.ReadTextFile(ctx, c.target.Location(), 0, 0)
		switch {
		case err == nil:
			return &Diff{Path: c.target.Location(), OldText: &text, NewText: c.content}
		case isClientNotFound(err) || !c.existsLocally():
			return &Diff{Path: c.target.Location(), NewText: c.content}
		}
		return nil
	}
	old, _, err := c.localOld()
	if err != nil {
		return nil
	}
	return &Diff{Path: c.target.Location(), OldText: old, NewText: c.content}
}

// localOld reads the file's current content from the disk (nil when it
// does not exist) and its permissions.
func (c *writeFileCall) localOld() (*string, fs.FileMode, error) {
	shown := c.target.Shown()
	mode := fs.FileMode(0o644)
	fi, err := c.target.Stat()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, mode, nil
	}
	if err != nil {
		return nil, mode, fmt.Errorf("Cannot write %s: %v", shown, err)
	}
	if fi.IsDir() {
		return nil, mode, fmt.Errorf("%s is a directory", shown)
	}
	if !fi.Mode().IsRegular() {
		return nil, mode, fmt.Errorf("%s is not a regular file", shown)
	}
	f, err := openRegular(c.target)
	if err != nil {
		return nil, mode, err
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, mode, fmt.Errorf("Cannot read %s: %v", shown, err)
	}
	s := string(data)
	return &s, fi.Mode().Perm(), nil
}

func (c *writeFileCall) existsLocally() bool {
	_, err := c.target.Stat()
	return !errors.Is(err, fs.ErrNotExist)
}

// written is the result of a write that replaced old (nil: a new file).
func (c *writeFileCall) written(old *string) Result {
	verb := "Created"
	if old != nil {
		verb = "Overwrote"
	}
	n := countLines(c.content)
	return Result{
		Output: fmt.Sprintf("%s %s: wrote %d %s (%d bytes)", verb, c.target.Shown(), n, plural(n, "line", "lines"), len(c.content)),
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
