package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Place says where a resolved path lies, for the permission policy.
type Place int

const (
	// PlaceOutside is anywhere outside the session cwd.
	PlaceOutside Place = iota
	// PlaceCwd is the session cwd or below it.
	PlaceCwd
	// PlaceToolOutputs is $IAC_CODE_HOME/tool-outputs, where large results
	// are spilled; reading them back needs no permission.
	PlaceToolOutputs
)

func (p Place) String() string {
	switch p {
	case PlaceCwd:
		return "cwd"
	case PlaceToolOutputs:
		return "tool-outputs"
	}
	return "outside"
}

// maxSymlinks bounds the links followed while resolving one path (Linux's
// own limit is 40).
const maxSymlinks = 40

// Resolved is a tool path decided on what it resolves to, and the handle to
// operate on it: inside the cwd every operation goes through an os.Root
// opened on the resolved cwd, so a symlink swapped in after the check cannot
// lead out of it; outside, the resolved path is opened without following a
// final symlink.
type Resolved struct {
	// Path is absolute and clean, every symlink of its existing part
	// resolved (the non-existing rest is taken as written).
	Path  string
	Place Place
	// root is the resolved cwd and rel is Path relative to it (PlaceCwd).
	root, rel string
	// shown is the path for titles and messages (relative inside the cwd);
	// loc the path for clients (under the cwd as the client spelled it).
	shown, loc string
}

// Resolve resolves a tool path: `~` and `~/…` expand to the home directory,
// a relative path is taken from env.Cwd, then every symlink of the existing
// part is followed (`..` after a symlink climbs from the link's target, as
// the kernel does) and the result is placed against the resolved cwd.
func Resolve(env *Env, p string) (Resolved, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return Resolved{}, errors.New("path contains a NUL byte")
	}
	p = expandHome(p)
	cwd := envCwd(env)
	if !filepath.IsAbs(p) {
		p = cwd + string(filepath.Separator) + p
	}
	real, err := RealPath(p)
	if err != nil {
		return Resolved{}, err
	}
	realCwd, err := RealPath(cwd)
	if err != nil {
		return Resolved{}, err
	}
	r := Resolved{Path: real, shown: real, loc: real}
	if rel, ok := within(realCwd, real); ok {
		r.Place, r.root, r.rel = PlaceCwd, realCwd, rel
		r.shown = filepath.ToSlash(rel)
		r.loc = filepath.Join(filepath.Clean(cwd), rel)
		return r, nil
	}
	if env != nil {
		for _, dir := range env.AdditionalDirs {
			realDir, err := RealPath(dir)
			if err != nil {
				continue
			}
			if rel, ok := within(realDir, real); ok {
				// Inside, through an os.Root on the resolved root as for the cwd.
				r.Place, r.root, r.rel = PlaceCwd, realDir, rel
				r.loc = filepath.Join(filepath.Clean(dir), rel)
				return r, nil
			}
		}
	}
	if env != nil && env.Home != "" {
		if spill, err := RealPath(filepath.Join(env.Home, SpillDir)); err == nil {
			if _, ok := within(spill, real); ok {
				r.Place = PlaceToolOutputs
			}
		}
	}
	return r, nil
}

// RealPath returns the absolute path p with every symlink of its existing
// part resolved, like realpath(3) but also for paths whose tail does not
// exist yet (that tail is kept as written, `.` and `..` applied). A loop of
// symlinks is an error.
func RealPath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("not an absolute path: %q", p)
	}
	vol := filepath.VolumeName(p)
	top := vol + string(filepath.Separator)
	resolved := top
	rest := p[len(vol):]
	missing := 0 // trailing components of resolved that do not exist
	links := 0
	for rest != "" {
		var comp string
		comp, rest = cutComponent(rest)
		switch comp {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			if missing > 0 {
				missing--
			}
			continue
		}
		next := filepath.Join(resolved, comp)
		if missing > 0 {
			resolved = next
			missing++
			continue
		}
		fi, err := os.Lstat(next)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			if err != nil {
				missing++ // absent, or not a directory, or not searchable
			}
			resolved = next
			continue
		}
		links++
		if links > maxSymlinks {
			return "", fmt.Errorf("too many levels of symbolic links in %s", p)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", fmt.Errorf("cannot read the symbolic link %s: %v", next, err)
		}
		if filepath.IsAbs(target) {
			v := filepath.VolumeName(target)
			resolved = v + string(filepath.Separator)
			target = target[len(v):]
		}
		rest = target + string(filepath.Separator) + rest
	}
	return resolved, nil
}

func cutComponent(s string) (comp, rest string) {
	s = strings.TrimLeft(s, string(filepath.Separator))
	if i := strings.IndexByte(s, filepath.Separator); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}

// within reports whether p is dir or below it (both absolute and clean),
// with p relative to dir.
func within(dir, p string) (string, bool) {
	if p == dir {
		return ".", true
	}
	prefix := dir
	if !strings.HasSuffix(prefix, string(filepath.Separator)) {
		prefix += string(filepath.Separator)
	}
	if strings.HasPrefix(p, prefix) {
		return p[len(prefix):], true
	}
	return "", false
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return home + p[1:]
		}
	}
	return p
}

// envCwd is the session cwd, or the process cwd when the env has none.
func envCwd(env *Env) string {
	if env != nil && env.Cwd != "" && filepath.IsAbs(env.Cwd) {
		return env.Cwd
	}
	wd, err := os.Getwd()
	if err != nil {
		return string(filepath.Separator)
	}
	return wd
}

// Shown is the path for titles and messages: relative inside the cwd, else
// absolute.
func (r Resolved) Shown() string { return r.shown }

// Location is the path for clients: inside the cwd it is under the cwd as
// the client gave it (the same file, in the client's spelling).
func (r Resolved) Location() string { return r.loc }

func (r Resolved) access(write bool) PathAccess {
	return PathAccess{Path: r.Path, Place: r.Place, Write: write}
}

// inRoot runs fn on the os.Root of the resolved cwd (inside paths only).
func inRoot[T any](r Resolved, fn func(root *os.Root, rel string) (T, error)) (T, error) {
	root, err := os.OpenRoot(r.root)
	if err != nil {
		var zero T
		return zero, err
	}
	defer root.Close()
	return fn(root, r.rel)
}

// Stat describes the file, following a symlink only within the cwd for an
// inside path, and none for an outside one (its resolved path has none).
func (r Resolved) Stat() (fs.FileInfo, error) {
	if r.Place == PlaceCwd {
		return inRoot(r, func(root *os.Root, rel string) (fs.FileInfo, error) { return root.Stat(rel) })
	}
	return os.Lstat(r.Path)
}

// OpenFile opens the checked file: through the cwd's os.Root when inside
// (a path that now leads out of the cwd fails), else the resolved path
// without following a final symlink.
func (r Resolved) OpenFile(flag int, perm fs.FileMode) (*os.File, error) {
	if r.Place == PlaceCwd {
		return inRoot(r, func(root *os.Root, rel string) (*os.File, error) { return root.OpenFile(rel, flag, perm) })
	}
	return os.OpenFile(r.Path, flag|openNoFollow, perm)
}

// MkdirParents creates the missing parent directories of the path.
func (r Resolved) MkdirParents() error {
	if r.Place == PlaceCwd {
		_, err := inRoot(r, func(root *os.Root, rel string) (struct{}, error) {
			dir := filepath.Dir(rel)
			if dir == "." {
				return struct{}{}, nil
			}
			return struct{}{}, root.MkdirAll(dir, 0o755)
		})
		return err
	}
	return os.MkdirAll(filepath.Dir(r.Path), 0o755)
}

// Readlink reads a symlink in the directory r (an entry name).
func (r Resolved) Readlink(name string) (string, error) {
	if r.Place == PlaceCwd {
		return inRoot(r, func(root *os.Root, rel string) (string, error) { return root.Readlink(filepath.Join(rel, name)) })
	}
	return os.Readlink(filepath.Join(r.Path, name))
}

// shower shows resolved paths found by a walk: relative to the resolved
// cwd inside it, else absolute.
type shower struct{ realCwd string }

func newShower(env *Env) shower {
	real, err := RealPath(envCwd(env))
	if err != nil {
		real = ""
	}
	return shower{realCwd: real}
}

func (s shower) show(abs string) string {
	if s.realCwd != "" {
		if rel, ok := within(s.realCwd, abs); ok {
			return filepath.ToSlash(rel)
		}
	}
	return abs
}

// inside reports whether a resolved path is in the cwd.
func (s shower) inside(abs string) bool {
	_, ok := within(s.realCwd, abs)
	return s.realCwd != "" && ok
}
