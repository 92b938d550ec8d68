package sysprompt

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// FileName is the cross-agent convention for project instructions.
const FileName = "AGENTS.md"

// Caps on what the instructions may add to every model request.
const (
	MaxFileBytes  = 32 << 10
	MaxTotalBytes = 96 << 10
	// minShown: a file that would have to be cut to less than this for the
	// total is left out rather than shown as a fragment.
	minShown = 1 << 10
)

// File is one AGENTS.md file given to the model.
type File struct {
	// Path is where it was found (absolute; a symlink's own path).
	Path string
	// Text is what the model sees, cut to the caps.
	Text string
	// Size is the file's size on disk; Cut is set when Text holds less.
	Size int64
	Cut  bool
	// User marks $IAC_CODE_HOME/AGENTS.md (the others are repository
	// content).
	User bool
}

// Skipped is an AGENTS.md that exists but was not given to the model.
type Skipped struct {
	Path   string
	Reason string
}

// Instructions are the AGENTS.md files of one working directory, in the
// order the model gets them: the user-wide file, then the repository root
// down to the working directory (nearest last).
type Instructions struct {
	Root    string // the repository's top level, or the cwd outside git
	Git     bool   // Root holds .git
	Files   []File
	Skipped []Skipped
	// stable is Stable(in), built once when the files were read.
	stable string
}

// Paths lists the loaded files' paths, in order.
func (in *Instructions) Paths() []string {
	out := make([]string, len(in.Files))
	for i, f := range in.Files {
		out[i] = f.Path
	}
	return out
}

// stamp is what a stat says about one candidate path; two equal stamps
// mean the file is taken to be unchanged.
type stamp struct {
	path    string
	exists  bool
	size    int64
	modTime time.Time
	mode    os.FileMode
	target  string // a symlink's resolved target
}

// Project keeps the instructions of one working directory and re-reads
// them only when a stat of the candidate paths differs from the last read
// (Refresh runs at every prompt; reading happens when something changed).
// It is safe for concurrent use.
type Project struct {
	cwd, home string

	mu     sync.Mutex
	stamps []stamp
	loaded *Instructions
	// reads counts the times the files were read (tests, debug log).
	reads int
}

// NewProject is the instructions of cwd with the user-wide file in home
// ("" for none). Nothing is read until Refresh.
func NewProject(cwd, home string) *Project {
	return &Project{cwd: cwd, home: home}
}

// Refresh returns the current instructions, re-read when any candidate
// path changed since the last call; changed reports a re-read.
func (p *Project) Refresh() (in *Instructions, changed bool) {
	dir := realDir(p.cwd) // once: each resolution is a system call per path element
	root, git := findRoot(dir)
	cands := candidates(p.home, root, dir)
	stamps := make([]stamp, len(cands))
	for i, c := range cands {
		stamps[i] = stampOf(c.path)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loaded != nil && p.loaded.Root == root && equalStamps(p.stamps, stamps) {
		return p.loaded, false
	}
	p.loaded = load(cands, root, git)
	p.loaded.stable = stableText(p.loaded)
	p.stamps = stamps
	p.reads++
	return p.loaded, true
}

// Loaded returns the instructions of the last Refresh (nil before any).
func (p *Project) Loaded() *Instructions {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.loaded
}

// findRoot walks up from dir (the cwd's real path, realDir) to the
// directory holding .git; without one dir is the root.
func findRoot(dir string) (root string, git bool) {
	for d := dir; ; {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d, true
		}
		parent := filepath.Dir(d)
		if parent == d {
			return dir, false
		}
		d = parent
	}
}

// realDir is dir with symlinks resolved, or dir cleaned when that fails.
func realDir(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		return real
	}
	return filepath.Clean(dir)
}

type candidate struct {
	path string
	user bool
}

// candidates are the paths an AGENTS.md may have, in the model's order;
// dir is the cwd's real path (realDir).
func candidates(home, root, dir string) []candidate {
	var out []candidate
	if home != "" {
		out = append(out, candidate{path: filepath.Join(home, FileName), user: true})
	}
	var dirs []string
	for d := dir; ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == root || filepath.Dir(d) == d {
			break
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		path := filepath.Join(dirs[i], FileName)
		if len(out) > 0 && out[0].user && out[0].path == path {
			continue // IAC_CODE_HOME inside the repository: the file once
		}
		out = append(out, candidate{path: path})
	}
	return out
}

func stampOf(path string) stamp {
	st := stamp{path: path}
	fi, err := os.Lstat(path)
	if err != nil {
		return st
	}
	st.exists, st.mode = true, fi.Mode()
	if fi.Mode()&os.ModeSymlink != 0 {
		st.target, _ = filepath.EvalSymlinks(path)
		if fi, err = os.Stat(path); err != nil {
			return st
		}
	}
	st.size, st.modTime = fi.Size(), fi.ModTime()
	return st
}

func equalStamps(a, b []stamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].path != b[i].path || a[i].exists != b[i].exists || a[i].size != b[i].size ||
			!a[i].modTime.Equal(b[i].modTime) || a[i].mode != b[i].mode || a[i].target != b[i].target {
			return false
		}
	}
	return true
}

// load reads the candidates. The total cap is shared nearest first: the
// file closest to the cwd is the most specific, so farther ones are cut
// or left out first.
func load(cands []candidate, root string, git bool) *Instructions {
	in := &Instructions{Root: root, Git: git}
	files := make([]*File, len(cands))
	budget := MaxTotalBytes
	for i := len(cands) - 1; i >= 0; i-- {
		c := cands[i]
		f, reason := readOne(c, root, min(MaxFileBytes, budget))
		switch {
		case reason != "":
			in.Skipped = append(in.Skipped, Skipped{Path: c.path, Reason: reason})
		case f != nil:
			files[i] = f
			budget -= len(f.Text)
		}
	}
	for _, f := range files {
		if f != nil {
			in.Files = append(in.Files, *f)
		}
	}
	return in
}

// readOne reads one candidate, at most limit bytes of it. A missing file
// is (nil, ""); one not given to the model has a reason.
func readOne(c candidate, root string, limit int) (*File, string) {
	fi, err := os.Lstat(c.path)
	if err != nil {
		return nil, ""
	}
	path := c.path
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(c.path)
		if err != nil {
			return nil, "a symlink that cannot be resolved"
		}
		// Repository content is untrusted: a link may point at any file
		// of the machine, whose text would then go to the model.
		if !c.user && !within(root, target) {
			return nil, "a symlink pointing outside the repository (not followed)"
		}
		path = target
	}
	f, err := openRegular(path)
	if err != nil {
		return nil, err.Error()
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err.Error()
	}
	buf, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, "cannot be read: " + err.Error()
	}
	out := &File{Path: c.path, Size: max(st.Size(), int64(len(buf))), User: c.user}
	if len(buf) > limit && limit < minShown {
		return nil, fmt.Sprintf("left out: the instructions nearer the working directory fill the %d KiB", MaxTotalBytes>>10)
	}
	if len(buf) > limit {
		out.Cut = true
		buf = cutText(buf, limit)
	}
	out.Text = strings.ToValidUTF8(string(buf), "\uFFFD")
	if strings.TrimSpace(out.Text) == "" {
		return nil, "" // nothing to tell the model
	}
	return out, ""
}

// within reports whether path is root or below it.
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// cutText is b cut to at most limit bytes: at the last line end in its
// final quarter, else at a rune boundary.
func cutText(b []byte, limit int) []byte {
	b = b[:limit]
	if nl := bytes.LastIndexByte(b, '\n'); nl >= limit*3/4 {
		return b[:nl+1]
	}
	// Drop a last rune that the cut split.
	i := len(b) - 1
	for i > 0 && !utf8.RuneStart(b[i]) {
		i--
	}
	if i >= 0 && !utf8.FullRune(b[i:]) {
		b = b[:i]
	}
	return b
}

// maxProjects bounds Projects (one entry per working directory).
const maxProjects = 512

// Projects shares one Project per working directory among the sessions of
// a server, so sessions of one project stat and read the files once.
type Projects struct {
	home string
	mu   sync.Mutex
	m    map[string]*Project
}

// NewProjects keeps the projects whose user-wide file is home/AGENTS.md.
func NewProjects(home string) *Projects { return &Projects{home: home} }

// For returns cwd's Project.
func (ps *Projects) For(cwd string) *Project {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p, ok := ps.m[cwd]; ok {
		return p
	}
	if ps.m == nil || len(ps.m) >= maxProjects {
		ps.m = map[string]*Project{}
	}
	p := NewProject(cwd, ps.home)
	ps.m[cwd] = p
	return p
}
