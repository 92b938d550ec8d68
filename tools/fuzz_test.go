package tools_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iac-code/iac-code/tools"
)

// Seeds are in testdata/fuzz/<Target>/ and run with every `go test`;
// `task fuzz` explores further.

// FuzzToolInput feeds every built-in tool's Prepare. Whatever the input,
// Prepare does not panic, and what it accepts is exactly readable: one JSON
// object whose member names are distinct and each exactly a property of the
// tool's schema — so no second reading can find another value.
func FuzzToolInput(f *testing.F) {
	cwd := f.TempDir()
	env := &tools.Env{Cwd: cwd, Home: f.TempDir()}
	builtin := tools.Builtin()
	props := map[string]map[string]bool{}
	for _, t := range builtin {
		var s struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(t.Schema(), &s); err != nil {
			f.Fatal(err)
		}
		props[t.Name()] = map[string]bool{}
		for k := range s.Properties {
			props[t.Name()][k] = true
		}
	}
	f.Fuzz(func(t *testing.T, tool uint8, input []byte) {
		tl := builtin[int(tool)%len(builtin)]
		call, err := tl.Prepare(env, input)
		if err != nil {
			var ie *tools.InputError
			if errors.As(err, &ie) && !strings.HasPrefix(err.Error(), "Invalid input for tool '"+tl.Name()+"': ") {
				t.Fatalf("%s: error without the model-facing prefix: %v", tl.Name(), err)
			}
			return
		}
		_, _, _ = call.Title(), call.Locations(), call.Access()
		trimmed := bytes.TrimSpace(input)
		if len(trimmed) == 0 || string(trimmed) == "null" {
			return
		}
		names, ok := topLevelNames(trimmed)
		if !ok {
			t.Fatalf("%s accepted input that is not one JSON object: %q", tl.Name(), input)
		}
		seen := map[string]bool{}
		for _, n := range names {
			if seen[n] {
				t.Fatalf("%s accepted a duplicate name %q: %q", tl.Name(), n, input)
			}
			seen[n] = true
			if !props[tl.Name()][n] {
				t.Fatalf("%s accepted a name its schema does not have, %q: %q", tl.Name(), n, input)
			}
		}
	})
}

// topLevelNames lists the member names of one JSON object, in order, as
// encoding/json reads them (an independent parser).
func topLevelNames(data []byte) ([]string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var names []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		name, ok := tok.(string)
		if !ok {
			return nil, false
		}
		names = append(names, name)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, false
	}
	if _, err := dec.Token(); err == nil {
		return nil, false // trailing data
	}
	return names, true
}

// FuzzResolve checks the path resolver against the kernel on a tree with
// the usual traps: links inside, out of the cwd, to /etc, a loop, a
// dangling link. For any path: no panic; the result is absolute and clean;
// its place agrees with the resolved cwd; and whenever the kernel can open
// the path, the resolver names the very file the kernel reaches.
func FuzzResolve(f *testing.F) {
	root, err := filepath.EvalSymlinks(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	cwd, out := filepath.Join(root, "cwd"), filepath.Join(root, "out")
	for _, d := range []string{filepath.Join(cwd, "sub", "deep"), filepath.Join(out, "dir")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	for _, file := range []string{filepath.Join(cwd, "in.txt"), filepath.Join(cwd, "sub", "f.txt"), filepath.Join(out, "secret")} {
		if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	links := map[string]string{
		"cwd/vendor": out, "cwd/up": "..", "cwd/etc": "/etc", "cwd/alias": "sub", "cwd/note": "../out/secret",
		"cwd/loop1": "loop2", "cwd/loop2": "loop1", "cwd/dangling": "nowhere/x", "cwd/sub/back": "../..", "out/dir/in": cwd,
	}
	for l, target := range links {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			f.Fatal(err)
		}
	}
	env := &tools.Env{Cwd: cwd}
	home, _ := os.UserHomeDir()
	f.Fuzz(func(t *testing.T, p string) {
		r, err := tools.Resolve(env, p)
		osPath := p
		if p == "~" || strings.HasPrefix(p, "~/") {
			osPath = home + p[1:]
		}
		if !filepath.IsAbs(osPath) {
			osPath = cwd + "/" + osPath
		}
		if err != nil {
			if _, serr := os.Stat(osPath); serr == nil && !strings.ContainsRune(p, 0) {
				t.Fatalf("Resolve(%q) failed (%v) on a path the kernel opens", p, err)
			}
			return
		}
		if !filepath.IsAbs(r.Path) || filepath.Clean(r.Path) != r.Path {
			t.Fatalf("Resolve(%q) = %q: not absolute and clean", p, r.Path)
		}
		inside := r.Path == cwd || strings.HasPrefix(r.Path, cwd+"/")
		if inside != (r.Place == tools.PlaceCwd) {
			t.Fatalf("Resolve(%q) = %q placed %v", p, r.Path, r.Place)
		}
		if r.Place == tools.PlaceCwd && !strings.HasPrefix(r.Location()+"/", cwd+"/") {
			t.Fatalf("Resolve(%q): location %q outside the cwd", p, r.Location())
		}
		if _, err := os.Stat(osPath); err != nil {
			return
		}
		want, err := filepath.EvalSymlinks(osPath)
		if err != nil {
			return
		}
		if want != r.Path {
			t.Fatalf("Resolve(%q) = %q, the kernel reaches %q", p, r.Path, want)
		}
	})
}
