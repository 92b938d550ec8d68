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
	"sync"
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

// globRoot splits a pattern into the directory to walk (absolute, not yet
// resolved) and the pattern relative to it.
func globRoot(env *Env, path, pattern string) (root, rel string) {
	p := filepath.ToSlash(expandHome(pattern))
	base := path
	if strings.TrimSpace(base) == "" {
		base = "."
	}
	base = expandHome(base)
	if !filepath.IsAbs(base) {
		base = envCwd(env) + string(filepath.Separator) + base
	}
	if strings.HasPrefix(p, "/") {
		b, rest := doublestar.SplitPattern(p)
		return filepath.FromSlash(b), rest
	}
	p = strings.TrimPrefix(p, "./")
	b, rest := doublestar.SplitPattern(p)
	if b == "." {
		return base, rest
	}
	return base + string(filepath.Separator) + filepath.FromSlash(b), rest
}

type globInput struct {
	Pattern *string `json:"pattern"`
	Path    *string `json:"path"`
}

type globCall struct {
	t       Glob
	pattern string // as the model gave it
	rest    string // relative to root
	root    Resolved
	sh      shower
}

func (t Glob) Prepare(env *Env, input json.RawMessage) (Call, error) {
	var in globInput
	if err := decodeInput(NameGlob, input, &in); err != nil {
		return nil, err
	}
	if err := requireString(NameGlob, "pattern", in.Pattern); err != nil {
		return nil, err
	}
	if !doublestar.ValidatePattern(filepath.ToSlash(*in.Pattern)) {
		return nil, inputError(NameGlob, fmt.Sprintf("invalid glob pattern %q", *in.Pattern))
	}
	path := ""
	if in.Path != nil {
		path = *in.Path
	}
	rootPath, rest := globRoot(env, path, *in.Pattern)
	root, err := Resolve(env, rootPath)
	if err != nil {
		return nil, inputError(NameGlob, err.Error())
	}
	return &globCall{t: t, pattern: *in.Pattern, rest: rest, root: root, sh: newShower(env)}, nil
}

func (c *globCall) Title() string         { return searchTitle("Glob", c.rest, c.root) }
func (c *globCall) Locations() []Location { return []Location{{Path: c.root.Location()}} }
func (c *globCall) Access() Access        { return Access{Paths: []PathAccess{c.root.access(false)}} }

func (c *globCall) Run(ctx context.Context, _ func(string)) Result {
	l := c.t.Limits.WithDefaults()
	root, pat := c.root.Path, c.rest
	shownRoot := c.root.Shown()
	fi, err := c.root.Stat()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Result{Output: fmt.Sprintf("No files found matching %s (%s does not exist)", c.pattern, shownRoot)}
		}
		return Errorf(fmt.Sprintf("Cannot search %s: %v", shownRoot, err))
	}
	if !fi.IsDir() {
		return Errorf(fmt.Sprintf("%s is not a directory", shownRoot))
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
	var skipped skippedLinks
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
		isLink := d.Type()&fs.ModeSymlink != 0
		var real string
		if isLink {
			// A link is followed only when it stays in the cwd or in the
			// directory searched (directories are never descended into).
			real, err = RealPath(p)
			if err != nil {
				return nil
			}
			if _, inRoot := within(root, real); !inRoot && !c.sh.inside(real) {
				skipped.add(c.sh.show(p), real)
				return nil
			}
		}
		if !doublestar.MatchUnvalidated(pat, rel) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if isLink {
			if info, err = os.Stat(real); err != nil {
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
		return Errorf(fmt.Sprintf("Cannot search %s: %v", shownRoot, err))
	}
	if len(hits) == 0 {
		return Result{Output: fmt.Sprintf("No files found matching %s", c.pattern) + skipped.note("\n")}
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
		b.WriteString(c.sh.show(h.path))
		b.WriteByte('\n')
	}
	b.WriteString(skipped.note(""))
	return Result{Output: b.String()}
}

// skippedLinks records the symlinks a walk did not follow because they lead
// out of the working directory; the result says so.
type skippedLinks struct {
	mu    sync.Mutex
	n     int
	shown []string
}

const maxSkippedShown = 10

func (s *skippedLinks) add(link, target string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if len(s.shown) < maxSkippedShown {
		s.shown = append(s.shown, link+" -> "+target)
	}
}

// note is "" or a line naming the links not followed, after prefix.
func (s *skippedLinks) note(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		return ""
	}
	more := ""
	if s.n > len(s.shown) {
		more = fmt.Sprintf(" and %d more", s.n-len(s.shown))
	}
	sort.Strings(s.shown)
	return fmt.Sprintf("%s[Not followed: %d %s leading outside the working directory: %s%s]\n",
		prefix, s.n, plural(s.n, "symlink", "symlinks"), strings.Join(s.shown, ", "), more)
}
