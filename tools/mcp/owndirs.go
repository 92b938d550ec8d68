package mcp

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/iac-code/iac-code/tools/sandbox"
)

// ownDirs are what a sandboxed stdio server reads besides the session's
// directories, as its command line names them:
//
//   - Dirs: the command's directory and its symlink target's (an npm .bin
//     link), the node_modules tree the target lies in (its dependencies),
//     and the directory of each argument that names an existing file
//     (`node /opt/srv/index.js`, `sh -c '…' /path/server`); for uvx (and
//     `uv run`), uv's managed Pythons.
//   - Packages: the package root of the command and of each such file —
//     the nearest directory above it holding package.json beside
//     node_modules, pyproject.toml, a .venv or go.mod, or a venv's own
//     directory — so that `node /path/srv/build/index.js` finds
//     /path/srv/node_modules and `/path/.venv/bin/server` its venv and
//     project; and the project of `uv run --directory|--project DIR`.
//
// Every path is resolved once here; the sandbox decides on that value
// (sandbox.Request.Packages: never the home, the server's state or
// another session's workspace). getenv is the server's environment.
func ownDirs(path string, args []string, getenv func(string) string) sandbox.Reads {
	var out sandbox.Reads
	pkg := func(dir string) {
		if root := packageRoot(dir); root != "" {
			out.Packages = append(out.Packages, root)
		}
	}
	add := func(file string) {
		out.Dirs = append(out.Dirs, filepath.Dir(file))
		real, err := filepath.EvalSymlinks(file)
		if err != nil {
			return
		}
		out.Dirs = append(out.Dirs, filepath.Dir(real))
		const nm = string(filepath.Separator) + "node_modules" + string(filepath.Separator)
		if i := strings.Index(real, nm); i >= 0 {
			// An installed dependency: its own dependencies are in the
			// tree; the project holding the tree is not the server's.
			out.Dirs = append(out.Dirs, real[:i+len(nm)-1])
			return
		}
		pkg(filepath.Dir(real))
		// A link's own directory counts too: a venv's bin/python leads
		// to the system's Python, the venv is where the link is.
		if linkDir, err := filepath.EvalSymlinks(filepath.Dir(file)); err == nil && linkDir != filepath.Dir(real) {
			pkg(linkDir)
		}
	}
	add(path)
	for _, a := range args {
		if filepath.IsAbs(a) {
			if fi, err := os.Stat(a); err == nil && !fi.IsDir() {
				add(a)
			}
		}
	}
	if uv, project := uvRun(path, args); uv {
		if dir := uvPythons(getenv); dir != "" {
			out.Dirs = append(out.Dirs, dir)
		}
		if filepath.IsAbs(project) {
			if real, err := filepath.EvalSymlinks(project); err == nil {
				pkg(real)
			}
		}
	}
	return out
}

// packageRoot is the package a file of dir (resolved) belongs to: the
// nearest of dir and its ancestors that holds package.json beside
// node_modules, pyproject.toml, a .venv or go.mod; a venv's own directory
// (pyvenv.cfg) when the directory above it is not such a project. ""
// when there is none below the file system root.
func packageRoot(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if d == filepath.Dir(d) {
			return "" // the file system root is nobody's package
		}
		if isProject(d) {
			return d
		}
		if isFile(filepath.Join(d, "pyvenv.cfg")) {
			if up := filepath.Dir(d); up != filepath.Dir(up) && isProject(up) {
				return up
			}
			return d
		}
	}
}

// isProject: dir holds the marker of a package root.
func isProject(dir string) bool {
	return (isFile(filepath.Join(dir, "package.json")) && isDir(filepath.Join(dir, "node_modules"))) ||
		isFile(filepath.Join(dir, "pyproject.toml")) || isDir(filepath.Join(dir, ".venv")) ||
		isFile(filepath.Join(dir, "go.mod"))
}

func isFile(p string) bool { fi, err := os.Stat(p); return err == nil && fi.Mode().IsRegular() }
func isDir(p string) bool  { fi, err := os.Stat(p); return err == nil && fi.IsDir() }

// uvRun reads a uv command line: uv reports `uvx …`, `uv tool run …`
// (uvx's long form) and `uv run …`; project is the directory of
// --directory or --project, when given.
func uvRun(path string, args []string) (uv bool, project string) {
	switch filepath.Base(path) {
	case "uvx":
		uv = true
	case "uv":
	default:
		return false, ""
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "run" && !uv:
			uv = true
		case a == "--directory" || a == "--project":
			if i+1 < len(args) {
				project = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--directory="):
			project = strings.TrimPrefix(a, "--directory=")
		case strings.HasPrefix(a, "--project="):
			project = strings.TrimPrefix(a, "--project=")
		case a == "--":
			return uv, project // the rest is the program's
		}
	}
	return uv, project
}

// uvPythons is where uv keeps the Pythons it manages (uv's
// UV_PYTHON_INSTALL_DIR, else $XDG_DATA_HOME/uv/python, else
// ~/.local/share/uv/python), "" when it has none. A venv uv made runs one
// of them. uv's cache is the session's (sandbox.Env): never shared
// writable with processes outside the sandbox.
func uvPythons(getenv func(string) string) string {
	dir := getenv("UV_PYTHON_INSTALL_DIR")
	if dir == "" {
		data := getenv("XDG_DATA_HOME")
		if data == "" && getenv("HOME") != "" {
			data = filepath.Join(getenv("HOME"), ".local", "share")
		}
		if data != "" {
			dir = filepath.Join(data, "uv", "python")
		}
	}
	if !filepath.IsAbs(dir) || !isDir(dir) {
		return ""
	}
	return dir
}
