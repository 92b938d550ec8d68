//go:build unix

package mcp

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A sandboxed stdio server reads its own files: an npm .bin link's target
// and the node_modules tree around it, a script given as an argument.
func TestOwnDirsOfAServerCommand(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nm := filepath.Join(root, "proj", "node_modules")
	pkg := filepath.Join(nm, "@scope", "server", "dist")
	bin := filepath.Join(nm, ".bin")
	scripts := filepath.Join(root, "scripts")
	for _, d := range []string{pkg, bin, scripts} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(pkg, "index.js"), filepath.Join(scripts, "serve.py")} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(pkg, "index.js"), filepath.Join(bin, "server")); err != nil {
		t.Fatal(err)
	}
	got := ownDirs(filepath.Join(bin, "server"), []string{"--flag", filepath.Join(scripts, "serve.py"), "relative.py", filepath.Join(root, "missing")})
	for _, want := range []string{bin, pkg, nm, scripts} {
		if !slices.Contains(got, want) {
			t.Errorf("ownDirs = %v, lacks %s", got, want)
		}
	}
	for _, d := range got {
		if d == root || d == filepath.Join(root, "proj") {
			t.Errorf("ownDirs grants %s, more than the server's own files", d)
		}
	}
}
