package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// NameEditFile is the edit_file tool's name.
const NameEditFile = "edit_file"

// EditFile replaces one exact occurrence of a string in a file.
type EditFile struct{ Limits Limits }

func (EditFile) Name() string { return NameEditFile }
func (EditFile) Description() string {
	return "Edit a file by replacing exactly one occurrence of old_string with new_string. old_string must match the " +
		"file's text exactly (including whitespace and indentation) and occur exactly once: include enough surrounding " +
		"lines to make it unique. Read the file first. To create a file use write_file."
}
func (EditFile) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"path":{"type":"string","description":"File to edit"},` +
		`"old_string":{"type":"string","description":"Exact text to replace; must occur exactly once in the file"},` +
		`"new_string":{"type":"string","description":"Replacement text (must differ from old_string)"}},` +
		`"required":["path","old_string","new_string"],"additionalProperties":false}`)
}
func (EditFile) Kind() Kind     { return KindEdit }
func (EditFile) ReadOnly() bool { return false }

type editFileInput struct {
	Path      *string `json:"path"`
	OldString *string `json:"old_string"`
	NewString *string `json:"new_string"`
}

type editFileCall struct {
	target   Resolved
	old, new string
}

func (EditFile) Prepare(env *Env, input json.RawMessage) (Call, error) {
	var in editFileInput
	if err := decodeInput(NameEditFile, input, &in); err != nil {
		return nil, err
	}
	if err := requireString(NameEditFile, "path", in.Path); err != nil {
		return nil, err
	}
	if in.OldString == nil {
		return nil, inputError(NameEditFile, "missing required field 'old_string'")
	}
	if *in.OldString == "" {
		return nil, inputError(NameEditFile, "field 'old_string' must not be empty (use write_file to create a file)")
	}
	if in.NewString == nil {
		return nil, inputError(NameEditFile, "missing required field 'new_string'")
	}
	if *in.OldString == *in.NewString {
		return nil, inputError(NameEditFile, "old_string and new_string are identical; nothing to change")
	}
	target, err := Resolve(env, *in.Path)
	if err != nil {
		return nil, inputError(NameEditFile, err.Error())
	}
	return &editFileCall{target: target, old: *in.OldString, new: *in.NewString}, nil
}

func (c *editFileCall) Title() string         { return "Edit " + printable(c.target.Shown(), titleMaxRunes) }
func (c *editFileCall) Locations() []Location { return []Location{{Path: c.target.Location()}} }
func (c *editFileCall) Access() Access        { return Access{Paths: []PathAccess{c.target.access(true)}} }

func (c *editFileCall) Run(ctx context.Context, _ func(string)) Result {
	if ctx.Err() != nil {
		return Errorf("edit_file cancelled")
	}
	shown := c.target.Shown()
	f, err := openRegular(c.target)
	if err != nil {
		return Errorf(err.Error())
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return Errorf(fmt.Sprintf("Cannot read %s: %v", shown, err))
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return Errorf(fmt.Sprintf("Cannot read %s: %v", shown, err))
	}
	old := string(data)
	updated, fail := c.apply(old)
	if fail != nil {
		return *fail
	}
	if err := writeTarget(c.target, []byte(updated), fi.Mode().Perm()); err != nil {
		return Errorf(fmt.Sprintf("Cannot write %s: %v", shown, err))
	}
	return c.edited(old, updated)
}

// Preview implements Previewer: through the client when RunVia edits its
// buffer.
func (c *editFileCall) Preview(ctx context.Context, cl Client) *Diff {
	var old string
	if c.viaClient(cl) {
		text, err := cl.ReadTextFile(ctx, c.target.Location(), 0, 0)
		if err != nil {
			return nil
		}
		old = text
	} else {
		f, err := openRegular(c.target)
		if err != nil {
			return nil
		}
		data, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return nil
		}
		old = string(data)
	}
	updated, fail := c.apply(old)
	if fail != nil {
		return nil
	}
	return &Diff{Path: c.target.Location(), OldText: &old, NewText: updated}
}

// RunVia edits through the client only when it can both read and write:
// the edit applies to its buffer and goes through its review. With one of
// the two the edit is wholly local, so that what is replaced and what is
// written are one version of the file.
func (c *editFileCall) RunVia(ctx context.Context, cl Client, progress func(string)) Result {
	if !c.viaClient(cl) {
		return c.Run(ctx, progress)
	}
	if ctx.Err() != nil {
		return Errorf("edit_file cancelled")
	}
	shown, path := c.target.Shown(), c.target.Location()
	old, err := cl.ReadTextFile(ctx, path, 0, 0)
	if err != nil {
		return Errorf(fmt.Sprintf("Cannot read %s through the editor: %v", shown, err))
	}
	updated, fail := c.apply(old)
	if fail != nil {
		return *fail
	}
	if ctx.Err() != nil {
		return Errorf("edit_file cancelled")
	}
	if err := cl.WriteTextFile(ctx, path, updated); err != nil {
		return Errorf(fmt.Sprintf("Cannot write %s through the editor: %v", shown, err))
	}
	return c.edited(old, updated)
}

// viaClient: the edit goes through cl (it can both read and write).
func (c *editFileCall) viaClient(cl Client) bool {
	return cl != nil && cl.Caps().ReadTextFile && cl.Caps().WriteTextFile
}

// apply replaces the one occurrence of c.old in text, or says why not.
func (c *editFileCall) apply(text string) (string, *Result) {
	shown := c.target.Shown()
	fail := func(msg string) (string, *Result) { r := Errorf(msg); return "", &r }
	if strings.IndexByte(text, 0) >= 0 || !utf8.ValidString(text) {
		return fail(fmt.Sprintf("Cannot edit %s: it is a binary file", shown))
	}
	switch n := strings.Count(text, c.old); n {
	case 1:
	case 0:
		return fail(fmt.Sprintf("old_string not found in %s (it must match the file's text exactly, including whitespace)", shown))
	default:
		return fail(fmt.Sprintf("old_string matches %d times in %s; provide more context to make it unique", n, shown))
	}
	return strings.Replace(text, c.old, c.new, 1), nil
}

func (c *editFileCall) edited(old, updated string) Result {
	line := strings.Count(old[:strings.Index(old, c.old)], "\n") + 1
	return Result{
		Output: fmt.Sprintf("Edited %s: replaced %s with %s at line %d (the file now has %d lines)",
			c.target.Shown(), nLines(c.old), nLines(c.new), line, countLines(updated)),
		Diff: &Diff{Path: c.target.Location(), OldText: &old, NewText: updated},
	}
}

func nLines(s string) string {
	n := countLines(s)
	return fmt.Sprintf("%d %s", n, plural(n, "line", "lines"))
}
