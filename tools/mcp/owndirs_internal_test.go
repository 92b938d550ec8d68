//go:build unix

package mcp

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/iac-code/iac-code/tools/sandbox"
)

// tree makes dirs and files (empty, executable) under root.
func tree(t *testing.T, root string, dirs, files []string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func tempRoot(t *testing.T) string {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func noEnv(string) string { return "" }

// A sandboxed stdio server reads its own files: an npm .bin link's target
// and the node_modules tree around it, a script given as an argument. An
// installed dependency's package root is its tree, not the project
// holding it.
func TestOwnDirsOfAServerCommand(t *testing.T) {
	root := tempRoot(t)
	nm := filepath.Join(root, "proj", "node_modules")
	pkg := filepath.Join(nm, "@scope", "server", "dist")
	bin := filepath.Join(nm, ".bin")
	scripts := filepath.Join(root, "scripts")
	tree(t, root, []string{"proj/node_modules/.bin"}, []string{"proj/package.json",
		"proj/node_modules/@scope/server/dist/index.js", "proj/node_modules/@scope/server/package.json", "scripts/serve.py"})
	if err := os.Symlink(filepath.Join(pkg, "index.js"), filepath.Join(bin, "server")); err != nil {
		t.Fatal(err)
	}
	got := ownDirs(filepath.Join(bin, "server"), []string{"--flag", filepath.Join(scripts, "serve.py"), "relative.py", filepath.Join(root, "missing")}, noEnv)
	for _, want := range []string{bin, pkg, nm, scripts} {
		if !slices.Contains(got.Dirs, want) {
			t.Errorf("ownDirs = %v, lacks %s", got.Dirs, want)
		}
	}
	for _, d := range append(got.Dirs, got.Packages...) {
		if d == root || d == filepath.Join(root, "proj") {
			t.Errorf("ownDirs grants %s, more than the server's own files: %+v", d, got)
		}
	}
}

// The package root of each layout a server is installed in, as its
// quickstart runs it.
func TestOwnDirsFindThePackageRootOfEachLayout(t *testing.T) {
	root := tempRoot(t)
	tree(t, root,
		[]string{"ts/node_modules/@modelcontextprotocol/sdk", "py/.venv/lib", "plainvenv/lib", "uvproj/.venv", "pythons/cpython-3.12"},
		[]string{"ts/package.json", "ts/build/index.js",
			"py/pyproject.toml", "py/.venv/pyvenv.cfg", "py/.venv/bin/server", "py/src/server/__main__.py",
			"plainvenv/pyvenv.cfg", "plainvenv/bin/server",
			"gosrv/go.mod", "gosrv/cmd/srv/srv",
			"bare/server.js",
			"uvproj/pyproject.toml", "sys/python3"})
	if err := os.Symlink(filepath.Join(root, "sys", "python3"), filepath.Join(root, "py", ".venv", "bin", "python")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "ts"), filepath.Join(root, "ts-link")); err != nil {
		t.Fatal(err)
	}
	pythons := filepath.Join(root, "pythons")
	env := func(k string) string {
		if k == "UV_PYTHON_INSTALL_DIR" {
			return pythons
		}
		return ""
	}
	at := func(p string) string { return filepath.Join(root, p) }
	for _, c := range []struct {
		name    string
		command string
		args    []string
		pkgs    []string
		dirs    []string
	}{
		{"node build/index.js", "/usr/bin/node", []string{at("ts/build/index.js")}, []string{at("ts")}, nil},
		{"through a symlinked package directory: the resolved root", "/usr/bin/node", []string{at("ts-link/build/index.js")}, []string{at("ts")}, nil},
		{"a venv's script", at("py/.venv/bin/server"), nil, []string{at("py")}, nil},
		{"a venv's python and a script", at("py/.venv/bin/python"), []string{at("py/src/server/__main__.py")}, []string{at("py")}, nil},
		{"a venv outside any project", at("plainvenv/bin/server"), nil, []string{at("plainvenv")}, nil},
		{"a Go module's binary", at("gosrv/cmd/srv/srv"), nil, []string{at("gosrv")}, nil},
		{"a script in no package", "/usr/bin/node", []string{at("bare/server.js")}, nil, nil},
		{"uv run --directory", "/usr/bin/uv", []string{"run", "--directory", at("uvproj"), "server.py"}, []string{at("uvproj")}, []string{pythons}},
		{"uv --project= run", "/usr/bin/uv", []string{"--project=" + at("uvproj"), "run", "server"}, []string{at("uvproj")}, []string{pythons}},
		{"uvx", "/usr/bin/uvx", []string{"mcp-server-fetch"}, nil, []string{pythons}},
		{"uv tool run", "/usr/bin/uv", []string{"tool", "run", "mcp-server-fetch"}, nil, []string{pythons}},
		{"uv pip is not a run", "/usr/bin/uv", []string{"pip", "--directory", at("uvproj")}, nil, nil},
	} {
		got := ownDirs(c.command, c.args, env)
		for _, want := range c.pkgs {
			if !slices.Contains(got.Packages, want) {
				t.Errorf("%s: packages %v lack %s", c.name, got.Packages, want)
			}
		}
		if len(c.pkgs) == 0 && len(got.Packages) > 0 {
			t.Errorf("%s: packages %v, want none", c.name, got.Packages)
		}
		for _, want := range c.dirs {
			if !slices.Contains(got.Dirs, want) {
				t.Errorf("%s: dirs %v lack %s", c.name, got.Dirs, want)
			}
		}
		if len(c.dirs) == 0 && slices.Contains(got.Dirs, pythons) {
			t.Errorf("%s: uv's Pythons granted to a command that is no uv run", c.name)
		}
	}
}

// Markers anyone can plant do not widen the sandbox where it protects:
// package.json and node_modules in the home make the home the nearest
// package root of a script under it, and the sandbox then grants nothing
// for it; a symlink that leads into the home is decided on where it leads.
func TestAPackageRootPlantedInTheHomeGrantsNothing(t *testing.T) {
	root := tempRoot(t)
	home := filepath.Join(root, "home")
	state := filepath.Join(home, ".iac-code")
	tree(t, root, []string{"home/node_modules", "home/.ssh", "home/.iac-code", "work/ws"},
		[]string{"home/package.json", "home/tools/server.js", "home/.iac-code/package.json"})
	if err := os.MkdirAll(filepath.Join(state, "node_modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(home, "tools"), filepath.Join(root, "work", "innocent")); err != nil {
		t.Fatal(err)
	}
	tree(t, root, nil, []string{"home/.iac-code/srv/index.js"})
	for _, args := range [][]string{
		{filepath.Join(home, "tools", "server.js")},
		{filepath.Join(root, "work", "innocent", "server.js")},
		{filepath.Join(state, "srv", "index.js")},
	} {
		own := ownDirs("/usr/bin/node", args, noEnv)
		p := sandbox.BuildPolicy(sandbox.Settings{Home: state, UserHome: home},
			sandbox.Request{Writable: []string{filepath.Join(root, "work", "ws")}, TempDir: t.TempDir(), Packages: own.Packages},
			func(string) string { return "" })
		for _, d := range p.ReadExec {
			if d == home || d == state || d == root || d == filepath.Join(home, ".ssh") {
				t.Errorf("node %s: the sandbox grants %s (packages %v)", args[0], d, own.Packages)
			}
		}
	}
}
