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
	"time"

	"github.com/bmatcuk/doublestar/v4"
)

// NameGlob is the glob tool's name.
const NameGlob = "glob"

// Glob finds files by pattern, newest first.
type Glob struct{ Limits Limits }

func (Glob) Name() string { return NameGlob }
func (t Glob) Description() string {
	l := t.Limits.WithDefaults()
	return fmt.Sprintf("Find files by glob pattern, e.g. `**/*.go` or `src/**/*.{ts,tsx}` (`**` matches any number of directories, "+
		"`*` any characters except `/`, `{a,b}` alternatives). Returns matching files (not directories), newest first "+
		"(by modification time), at most %d. `.git` directories are skipped. The pattern is relative to path "+
		"(default: the working directory) unless it is absolute.", l.MaxGlobResults)
}
func (Glob) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"pattern":{"type":"string","description":"Glob pattern, e.g. **/*.go"},` +
		`"path":{"type":"string","description":"Directory to search in (default: the working directory)"}},` +
		`"required":["pattern"],"additionalProperties":false}`)
}
func (Glob) Kind() Kind     { return KindSearch }
func (Glob) ReadOnly() bool { return true }

func (Glob) Describe(env *Env, input json.RawMessage) (string, []Location) {
	m := looseFields(input)
	pattern := looseString(m, "pattern")
	root, _ := globRoot(env, looseString(m, "path"), pattern)
	title := "Glob"
	if pattern != "" {
		title = "Glob " + truncateRunes(oneLine(pattern), 80)
	}
	return title, []Location{{Path: root}}
}

// globRoot splits a pattern into the directory to walk and the pattern
// relative to it.
func globRoot(env *Env, path, pattern string) (root, rel string) {
	p := filepath.ToSlash(pattern)
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			p = filepath.ToSlash(home) + p[1:]
		}
	}
	base := "."
	if path != "" {
		base = path
	}
	baseAbs := ResolvePath(env, base)
	if strings.HasPrefix(p, "/") {
		b, rest := doublestar.SplitPattern(p)
		return filepath.Clean(filepath.FromSlash(b)), rest
	}
	p = strings.TrimPrefix(p, "./")
	b, rest := doublestar.SplitPattern(p)
	if b == "." {
		return baseAbs, rest
	}
	return filepath.Join(baseAbs, filepath.FromSlash(b)), rest
}

type globInput struct {
	Pattern *string `json:"pattern"`
	Path    *string `json:"path"`
}

func (t Glob) Run(ctx context.Context, env *Env, input json.RawMessage) Result {
	var in globInput
	if err := decodeInput(input, &in); err != nil {
		return InvalidInput(NameGlob, err.Error())
	}
	if err := requireString("pattern", in.Pattern); err != nil {
		return InvalidInput(NameGlob, err.Error())
	}
	if !doublestar.ValidatePattern(filepath.ToSlash(*in.Pattern)) {
		return InvalidInput(NameGlob, fmt.Sprintf("invalid glob pattern %q", *in.Pattern))
	}
	path := ""
	if in.Path != nil {
		path = *in.Path
	}
	l := t.Limits.WithDefaults()
	root, pat := globRoot(env, path, *in.Pattern)
	fi, err := os.Stat(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Result{Output: fmt.Sprintf("No files found matching %s (%s does not exist)", *in.Pattern, displayPath(env, root))}
		}
		return Errorf(fmt.Sprintf("Cannot search %s: %v", displayPath(env, root), err))
	}
	if !fi.IsDir() {
		return Errorf(fmt.Sprintf("%s is not a directory", displayPath(env, root)))
	}

	// Without ** (and without {…} that may hide a /), a pattern of n
	// segments cannot match deeper than n: prune the walk there.
	maxDepth := -1
	if !strings.Contains(pat, "**") && !strings.Contains(pat, "{") {
		maxDepth = strings.Count(pat, "/") + 1
	}
	type hit struct {
		path  string
		mtime time.Time
	}
	var hits []hit
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if p == root {
				return err
			}
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == ".git" {
				return fs.SkipDir
			}
			if maxDepth > 0 && strings.Count(rel, "/")+1 >= maxDepth {
				return fs.SkipDir
			}
			return nil
		}
		if !doublestar.MatchUnvalidated(pat, rel) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			if info, err = os.Stat(p); err != nil {
				return nil
			}
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		hits = append(hits, hit{path: p, mtime: info.ModTime()})
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return Errorf("glob cancelled")
		}
		return Errorf(fmt.Sprintf("Cannot search %s: %v", displayPath(env, root), err))
	}
	if len(hits) == 0 {
		return Result{Output: fmt.Sprintf("No files found matching %s", *in.Pattern)}
	}
	sort.Slice(hits, func(i, j int) bool {
		if !hits[i].mtime.Equal(hits[j].mtime) {
			return hits[i].mtime.After(hits[j].mtime)
		}
		return hits[i].path < hits[j].path
	})
	var b strings.Builder
	for i, h := range hits {
		if i == l.MaxGlobResults {
			fmt.Fprintf(&b, "[... showing the %d newest of %d matching files; narrow the pattern to see others]\n", i, len(hits))
			break
		}
		b.WriteString(displayPath(env, h.path))
		b.WriteByte('\n')
	}
	return Result{Output: b.String()}
}
