package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
)

// NameGrep is the grep tool's name.
const NameGrep = "grep"

// Grep output modes.
const (
	GrepFilesWithMatches = "files_with_matches"
	GrepContent          = "content"
)

// grepMaxLineChars shortens long matching lines in content mode.
const grepMaxLineChars = 500

// Grep searches file contents with a Go regular expression.
type Grep struct{ Limits Limits }

func (Grep) Name() string { return NameGrep }
func (t Grep) Description() string {
	l := t.Limits.WithDefaults()
	return fmt.Sprintf("Search file contents with a regular expression (Go RE2 syntax, e.g. `func\\s+\\w+Handler`; "+
		"matched line by line, `^`/`$` anchor at line boundaries). Searches path (a directory, recursively, or one file; "+
		"default: the working directory), skipping binary files, `.git` and anything ignored by .gitignore files. "+
		"glob filters file names (e.g. `*.go`, or `src/**/*.ts` relative to path). output_mode `files_with_matches` "+
		"(default) lists matching files; `content` prints `path:line:text`. Output is sorted by path, then line; "+
		"at most max_results files or lines (default %d).", l.GrepMaxResults)
}
func (Grep) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"pattern":{"type":"string","description":"Regular expression (Go RE2 syntax)"},` +
		`"path":{"type":"string","description":"File or directory to search (default: the working directory)"},` +
		`"glob":{"type":"string","description":"Only search files matching this glob, e.g. *.go or src/**/*.ts"},` +
		`"case_insensitive":{"type":"boolean","description":"Match case-insensitively (default false)"},` +
		`"output_mode":{"type":"string","enum":["files_with_matches","content"],"description":"files_with_matches (default) or content (path:line:text)"},` +
		`"max_results":{"type":"integer","minimum":1,"description":"Maximum files (files_with_matches) or lines (content) to return"}},` +
		`"required":["pattern"],"additionalProperties":false}`)
}
func (Grep) Kind() Kind     { return KindSearch }
func (Grep) ReadOnly() bool { return true }

type grepInput struct {
	Pattern         *string `json:"pattern"`
	Path            *string `json:"path"`
	Glob            *string `json:"glob"`
	CaseInsensitive *bool   `json:"case_insensitive"`
	OutputMode      *string `json:"output_mode"`
	MaxResults      *int    `json:"max_results"`
}

// grepMatch is one matching line (content mode) or file (line 0).
type grepMatch struct {
	rel  string // slash path relative to the search root
	line int
	text string
}

func grepLess(a, b grepMatch) bool {
	if a.rel != b.rel {
		return a.rel < b.rel
	}
	return a.line < b.line
}

// grepCollector keeps the max smallest matches (by path, line) of
// everything it is given: output is deterministic whatever the order in
// which the workers finish, and memory stays O(max).
type grepCollector struct {
	mu    sync.Mutex
	max   int
	items []grepMatch
	total int
}

func (c *grepCollector) add(ms []grepMatch, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += total
	c.items = append(c.items, ms...)
	if len(c.items) > 2*c.max+1024 {
		c.prune()
	}
}

func (c *grepCollector) prune() {
	sort.Slice(c.items, func(i, j int) bool { return grepLess(c.items[i], c.items[j]) })
	if len(c.items) > c.max {
		c.items = append([]grepMatch(nil), c.items[:c.max]...)
	}
}

type grepSearch struct {
	re         *regexp.Regexp
	lit        *literalFilter
	prefilter  bool // whole-buffer Match implies nothing about absent lines only when safe
	content    bool
	max        int
	maxBytes   int64
	globPat    string
	globOnName bool
	coll       grepCollector
	skipped    skippedLinks
}

type grepCall struct {
	t       Grep
	pattern string
	target  Resolved
	sh      shower
	search  *grepSearch
}

func (t Grep) Prepare(env *Env, input json.RawMessage) (Call, error) {
	var in grepInput
	if err := decodeInput(NameGrep, input, &in); err != nil {
		return nil, err
	}
	if in.Pattern == nil {
		return nil, inputError(NameGrep, "missing required field 'pattern'")
	}
	if *in.Pattern == "" {
		return nil, inputError(NameGrep, "field 'pattern' must not be empty")
	}
	l := t.Limits.WithDefaults()
	s := &grepSearch{max: l.GrepMaxResults, maxBytes: l.GrepMaxFileBytes}
	mode := GrepFilesWithMatches
	if in.OutputMode != nil {
		mode = *in.OutputMode
	}
	switch mode {
	case GrepFilesWithMatches:
	case GrepContent:
		s.content = true
	default:
		return nil, inputError(NameGrep, fmt.Sprintf("field 'output_mode' must be one of files_with_matches, content; got %q", mode))
	}
	if in.MaxResults != nil {
		if *in.MaxResults < 1 {
			return nil, inputError(NameGrep, "field 'max_results' must be >= 1")
		}
		s.max = *in.MaxResults
	}
	flags := "(?m)"
	if in.CaseInsensitive != nil && *in.CaseInsensitive {
		flags = "(?mi)"
	}
	re, err := regexp.Compile(flags + *in.Pattern)
	if err != nil {
		return nil, inputError(NameGrep, fmt.Sprintf("invalid regular expression: %s", strings.TrimPrefix(err.Error(), "error parsing regexp: ")))
	}
	s.re = re
	s.lit = newLiteralFilter(flags + *in.Pattern)
	// A line that matches makes the whole buffer match, so a whole-buffer
	// miss rules the file out — unless the pattern uses text anchors or
	// turns multi-line mode off.
	s.prefilter = !strings.Contains(*in.Pattern, `\A`) && !strings.Contains(*in.Pattern, `\z`) && !noMultiLine.MatchString(*in.Pattern)
	if in.Glob != nil && *in.Glob != "" {
		g := filepath.ToSlash(*in.Glob)
		if !doublestar.ValidatePattern(g) {
			return nil, inputError(NameGrep, fmt.Sprintf("invalid glob %q", *in.Glob))
		}
		s.globPat = strings.TrimPrefix(g, "./")
		s.globOnName = !strings.Contains(s.globPat, "/")
	}
	s.coll.max = s.max

	p := "."
	if in.Path != nil && strings.TrimSpace(*in.Path) != "" {
		p = *in.Path
	}
	target, err := Resolve(env, p)
	if err != nil {
		return nil, inputError(NameGrep, err.Error())
	}
	return &grepCall{t: t, pattern: *in.Pattern, target: target, sh: newShower(env), search: s}, nil
}

func (c *grepCall) Title() string         { return searchTitle("Grep", c.pattern, c.target) }
func (c *grepCall) Locations() []Location { return []Location{{Path: c.target.Location()}} }
func (c *grepCall) Access() Access        { return Access{Paths: []PathAccess{c.target.access(false)}} }

func (c *grepCall) Run(ctx context.Context, _ func(string)) Result {
	l := c.t.Limits.WithDefaults()
	s := c.search
	root := c.target.Path
	fi, err := c.target.Stat()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Errorf(fmt.Sprintf("Path not found: %s", c.target.Shown()))
		}
		return Errorf(fmt.Sprintf("Cannot search %s: %v", c.target.Shown(), err))
	}

	var displayBase string // how matches' rel paths are shown
	if fi.IsDir() {
		workers := l.GrepWorkers
		if workers <= 0 {
			workers = min(64, max(8, 4*runtime.GOMAXPROCS(0)))
		}
		s.walk(ctx, root, workers, c.sh)
		displayBase = root
	} else {
		f, err := openRegular(c.target)
		if err != nil {
			return Errorf(err.Error())
		}
		data, err := io.ReadAll(io.LimitReader(f, s.maxBytes+1))
		f.Close()
		if err != nil {
			return Errorf(fmt.Sprintf("Cannot read %s: %v", c.target.Shown(), err))
		}
		if int64(len(data)) <= s.maxBytes {
			s.searchData(data, path.Base(filepath.ToSlash(root)))
		}
		displayBase = filepath.Dir(root)
	}
	if ctx.Err() != nil {
		return Errorf("grep cancelled")
	}
	s.coll.prune()
	items, total := s.coll.items, s.coll.total
	if len(items) == 0 {
		return Result{Output: fmt.Sprintf("No matches found for %s", c.pattern) + s.skipped.note("\n")}
	}
	var b strings.Builder
	shownCache := map[string]string{}
	for _, m := range items {
		shown, ok := shownCache[m.rel]
		if !ok {
			shown = c.sh.show(filepath.Join(displayBase, filepath.FromSlash(m.rel)))
			shownCache[m.rel] = shown
		}
		b.WriteString(shown)
		if s.content {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(m.line))
			b.WriteByte(':')
			b.WriteString(m.text)
		}
		b.WriteByte('\n')
	}
	if total > len(items) {
		what := "files"
		if s.content {
			what = "lines"
		}
		fmt.Fprintf(&b, "[... showing the first %d of %d matching %s; narrow the search or raise max_results]\n", len(items), total, what)
	}
	b.WriteString(s.skipped.note(""))
	return Result{Output: b.String()}
}

type grepFile struct{ abs, rel string }

// noMultiLine finds a flag group that turns multi-line mode off, e.g. (?-m).
var noMultiLine = regexp.MustCompile(`\(\?[a-zA-Z]*-[a-zA-Z]*m`)

// walk searches the tree under root: directories are read by a bounded set
// of goroutines (a directory is walked inline when none is free), files are
// searched by a pool of workers.
func (s *grepSearch) walk(ctx context.Context, root string, workers int, sh shower) {
	// Paths given to the .gitignore chain are relative to the top of the
	// work tree (base); matches are reported relative to root.
	chain, base := ignoreChainFor(root)
	prefix := ""
	if base != "" {
		prefix = base + "/"
	}
	files := make(chan grepFile, 1024)
	var fileWG sync.WaitGroup
	for range workers {
		fileWG.Add(1)
		go func() {
			defer fileWG.Done()
			buf := make([]byte, 0, 64<<10)
			for f := range files {
				if ctx.Err() != nil {
					continue
				}
				s.searchFile(f.abs, f.rel, &buf)
			}
		}()
	}

	sem := make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))
	var walkWG sync.WaitGroup
	var walkDir func(dirAbs, dirRel string, ign *ignoreNode)
	walkDir = func(dirAbs, dirRel string, ign *ignoreNode) {
		defer walkWG.Done()
		if ctx.Err() != nil {
			return
		}
		entries, err := readDirUnsorted(dirAbs)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.Name() == ".gitignore" && e.Type().IsRegular() {
				ign = ign.withGitignore(dirAbs, strings.TrimSuffix(prefix+dirRel, "/"))
				break
			}
		}
		for _, e := range entries {
			name := e.Name()
			rel := name
			if dirRel != "" {
				rel = dirRel + "/" + name
			}
			typ := e.Type()
			switch {
			case typ.IsDir():
				if name == ".git" || ign.ignored(prefix+rel, true) {
					continue
				}
				walkWG.Add(1)
				abs := dirAbs + string(filepath.Separator) + name
				select {
				case sem <- struct{}{}:
					go func() {
						defer func() { <-sem }()
						walkDir(abs, rel, ign)
					}()
				default:
					walkDir(abs, rel, ign)
				}
			case typ.IsRegular():
				if ign.ignored(prefix+rel, false) || !s.globOK(rel, name) {
					continue
				}
				select {
				case files <- grepFile{abs: dirAbs + string(filepath.Separator) + name, rel: rel}:
				case <-ctx.Done():
					return
				}
			case typ&fs.ModeSymlink != 0:
				// Symlinks are not followed (like ripgrep's default); those
				// leading out of the working directory are named in the result.
				link := dirAbs + string(filepath.Separator) + name
				if real, err := RealPath(link); err == nil {
					if _, inRoot := within(root, real); !inRoot && !sh.inside(real) {
						s.skipped.add(sh.show(link), real)
					}
				}
			}
		}
	}
	walkWG.Add(1)
	walkDir(root, "", chain)
	walkWG.Wait()
	close(files)
	fileWG.Wait()
}

func readDirUnsorted(dir string) ([]fs.DirEntry, error) {
	// A directory replaced by a symlink since it was listed is not entered.
	f, err := os.OpenFile(dir, os.O_RDONLY|openNoFollow, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

func (s *grepSearch) globOK(rel, name string) bool {
	if s.globPat == "" {
		return true
	}
	if s.globOnName {
		return doublestar.MatchUnvalidated(s.globPat, name)
	}
	return doublestar.MatchUnvalidated(s.globPat, rel)
}

// searchFile searches one file; buf is the worker's reusable read buffer.
func (s *grepSearch) searchFile(abs, rel string, buf *[]byte) {
	data, ok := readAllInto(abs, buf, s.maxBytes)
	if !ok {
		return
	}
	s.searchData(data, rel)
}

// searchData searches the content of one file.
func (s *grepSearch) searchData(data []byte, rel string) {
	if len(data) == 0 {
		return
	}
	if bytes.IndexByte(data[:min(len(data), 8000)], 0) >= 0 {
		return // binary
	}
	if !s.lit.match(data) {
		return
	}
	if !s.content {
		if s.re.Match(data) {
			s.coll.add([]grepMatch{{rel: rel}}, 1)
		}
		return
	}
	if s.prefilter && !s.re.Match(data) {
		return
	}
	var ms []grepMatch
	total := 0
	lineNo := 1
	lineStart := 0 // byte offset of line lineNo
	pos := 0
	for pos <= len(data) {
		var start int
		if s.prefilter {
			loc := s.re.FindIndex(data[pos:])
			if loc == nil {
				break
			}
			start = pos + loc[0]
		} else {
			start = pos
		}
		// Advance to the line containing start.
		lineNo += bytes.Count(data[lineStart:start], []byte{'\n'})
		if i := bytes.LastIndexByte(data[:start], '\n'); i >= 0 {
			lineStart = i + 1
		} else {
			lineStart = 0
		}
		lineEnd := len(data)
		if i := bytes.IndexByte(data[lineStart:], '\n'); i >= 0 {
			lineEnd = lineStart + i
		}
		line := data[lineStart:lineEnd]
		if lineEnd == len(data) && len(line) == 0 && lineStart > 0 {
			break // the empty "line" after a final newline
		}
		if s.re.Match(line) {
			total++
			if len(ms) < s.max {
				ms = append(ms, grepMatch{rel: rel, line: lineNo, text: grepLineText(line)})
			}
		}
		if lineEnd == len(data) {
			break
		}
		pos = lineEnd + 1
		lineStart = pos
		lineNo++
	}
	if total > 0 {
		s.coll.add(ms, total)
	}
}

func grepLineText(line []byte) string {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	s := string(line)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return truncateRunes(s, grepMaxLineChars)
}
