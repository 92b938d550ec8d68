package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// NameListFiles is the list_files tool's name.
const NameListFiles = "list_files"

// ListFiles lists one directory.
type ListFiles struct{ Limits Limits }

func (ListFiles) Name() string { return NameListFiles }
func (ListFiles) Description() string {
	return "List the entries of a directory (not recursive), sorted by name. Directories end with `/`, " +
		"files show their size in bytes, symlinks show their target. path defaults to the working directory. " +
		"Use glob to find files recursively."
}
func (ListFiles) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"path":{"type":"string","description":"Directory to list (default: the working directory)"}},` +
		`"additionalProperties":false}`)
}
func (ListFiles) Kind() Kind     { return KindRead }
func (ListFiles) ReadOnly() bool { return true }

func (ListFiles) Describe(env *Env, input json.RawMessage) (string, []Location) {
	p := looseString(looseFields(input), "path")
	if p == "" {
		p = "."
	}
	abs := ResolvePath(env, p)
	shown := displayPath(env, abs)
	return "List " + shown, []Location{{Path: abs}}
}

type listFilesInput struct {
	Path *string `json:"path"`
}

func (t ListFiles) Run(ctx context.Context, env *Env, input json.RawMessage) Result {
	var in listFilesInput
	if err := decodeInput(input, &in); err != nil {
		return InvalidInput(NameListFiles, err.Error())
	}
	p := "."
	if in.Path != nil && strings.TrimSpace(*in.Path) != "" {
		p = *in.Path
	}
	l := t.Limits.WithDefaults()
	abs := ResolvePath(env, p)
	shown := displayPath(env, abs)
	fi, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Errorf(fmt.Sprintf("Directory not found: %s", shown))
		}
		return Errorf(fmt.Sprintf("Cannot list %s: %v", shown, err))
	}
	if !fi.IsDir() {
		return Errorf(fmt.Sprintf("%s is a file, not a directory (use read_file to read it)", shown))
	}
	entries, err := os.ReadDir(abs) // sorted by name
	if err != nil {
		return Errorf(fmt.Sprintf("Cannot list %s: %v", shown, err))
	}
	if len(entries) == 0 {
		return Result{Output: fmt.Sprintf("(%s is empty)", shown)}
	}
	var b strings.Builder
	for i, e := range entries {
		if i == l.MaxListEntries {
			fmt.Fprintf(&b, "[... %d more entries not shown]\n", len(entries)-i)
			break
		}
		if ctx.Err() != nil {
			return Errorf("list_files cancelled")
		}
		name := e.Name()
		switch {
		case e.IsDir():
			b.WriteString(name + "/\n")
		case e.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(filepath.Join(abs, name))
			suffix := ""
			if st, err := os.Stat(filepath.Join(abs, name)); err == nil && st.IsDir() {
				suffix = "/"
			}
			fmt.Fprintf(&b, "%s%s -> %s\n", name, suffix, target)
		default:
			info, err := e.Info()
			if err != nil {
				b.WriteString(name + "\n")
				continue
			}
			if info.Mode().IsRegular() {
				fmt.Fprintf(&b, "%s (%d bytes)\n", name, info.Size())
			} else {
				fmt.Fprintf(&b, "%s (%s)\n", name, info.Mode().Type().String())
			}
		}
	}
	return Result{Output: b.String()}
}
