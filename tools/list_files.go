package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
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

type listFilesInput struct {
	Path *string `json:"path"`
}

type listFilesCall struct {
	t      ListFiles
	target Resolved
	sh     shower
}

func (t ListFiles) Prepare(env *Env, input json.RawMessage) (Call, error) {
	var in listFilesInput
	if err := decodeInput(NameListFiles, input, &in); err != nil {
		return nil, err
	}
	p := "."
	if in.Path != nil && strings.TrimSpace(*in.Path) != "" {
		p = *in.Path
	}
	target, err := Resolve(env, p)
	if err != nil {
		return nil, inputError(NameListFiles, err.Error())
	}
	return &listFilesCall{t: t, target: target, sh: newShower(env)}, nil
}

func (c *listFilesCall) Title() string         { return "List " + printable(c.target.Shown(), titleMaxRunes) }
func (c *listFilesCall) Locations() []Location { return []Location{{Path: c.target.Location()}} }
func (c *listFilesCall) Access() Access        { return Access{Paths: []PathAccess{c.target.access(false)}} }

func (c *listFilesCall) Run(ctx context.Context, _ func(string)) Result {
	l := c.t.Limits.WithDefaults()
	shown := c.target.Shown()
	fi, err := c.target.Stat()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Errorf(fmt.Sprintf("Directory not found: %s", shown))
		}
		return Errorf(fmt.Sprintf("Cannot list %s: %v", shown, err))
	}
	if !fi.IsDir() {
		return Errorf(fmt.Sprintf("%s is a file, not a directory (use read_file to read it)", shown))
	}
	dir, err := c.target.OpenFile(os.O_RDONLY, 0)
	if err != nil {
		return Errorf(fmt.Sprintf("Cannot list %s: %v", shown, err))
	}
	entries, err := dir.ReadDir(-1)
	dir.Close()
	if err != nil {
		return Errorf(fmt.Sprintf("Cannot list %s: %v", shown, err))
	}
	if len(entries) == 0 {
		return Result{Output: fmt.Sprintf("(%s is empty)", shown)}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
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
			target, _ := c.target.Readlink(name)
			suffix, note := c.linkInfo(name)
			fmt.Fprintf(&b, "%s%s -> %s%s\n", name, suffix, target, note)
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

// linkInfo gives the suffix "/" for a symlink to a directory. A link leading
// out of the working directory (and out of the listed directory) is not
// followed: the note says so instead.
func (c *listFilesCall) linkInfo(name string) (suffix, note string) {
	real, err := RealPath(filepath.Join(c.target.Path, name))
	if err != nil {
		return "", " (" + err.Error() + ")"
	}
	if _, inListed := within(c.target.Path, real); !inListed && !c.sh.inside(real) {
		return "", " (outside the working directory; not followed)"
	}
	if st, err := os.Stat(real); err == nil && st.IsDir() {
		return "/", ""
	}
	return "", ""
}
