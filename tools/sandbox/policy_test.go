package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// layout makes a fake machine under a temp dir: a home with a key and a
// toolchain, the server's state inside the home, two workspaces, a
// toolchain outside the home.
type layout struct {
	root, home, state, ws, sibling, goRoot, homeBin, tmp string
}

func newLayout(t *testing.T) layout {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := layout{root: root,
		home:    filepath.Join(root, "home"),
		state:   filepath.Join(root, "home", ".iac-code"),
		ws:      filepath.Join(root, "work", "ws"),
		sibling: filepath.Join(root, "work", "other"),
		goRoot:  filepath.Join(root, "usr-local", "go"),
		homeBin: filepath.Join(root, "home", ".cargo", "bin"),
		tmp:     filepath.Join(root, "sess-tmp"),
	}
	for _, d := range []string{l.state, l.ws, l.sibling, filepath.Join(l.goRoot, "bin"), l.homeBin, l.tmp,
		filepath.Join(l.home, "go", "pkg", "mod")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func (l layout) env(path string) func(string) string {
	m := map[string]string{"HOME": l.home, "PATH": path}
	return func(k string) string { return m[k] }
}

func TestPolicyGrantsTheSessionTheSystemAndToolchainsButNotTheHomeOrTheState(t *testing.T) {
	l := newLayout(t)
	path := strings.Join([]string{filepath.Join(l.goRoot, "bin"), l.homeBin, l.home, l.state,
		filepath.Join(l.state, "bin"), l.root, "relative/bin", "/usr/bin"}, string(os.PathListSeparator))
	p := BuildPolicy(Settings{Home: l.state, UserHome: l.home}, Request{Writable: []string{l.ws}, TempDir: l.tmp,
		ReadOnly: []string{filepath.Join(l.state, "tool-outputs-missing")}}, l.env(path))

	if !slices.Contains(p.ReadWrite, l.ws) || !slices.Contains(p.ReadWrite, l.tmp) || len(p.ReadWrite) != 2 {
		t.Errorf("read-write = %v, want exactly the cwd and the session's temp dir", p.ReadWrite)
	}
	for _, want := range []string{filepath.Join(l.goRoot, "bin"), l.goRoot, l.homeBin,
		filepath.Join(l.home, "go", "pkg", "mod"), resolve("/usr/bin")} {
		if !slices.Contains(p.ReadExec, want) {
			t.Errorf("read-exec lacks %s: %v", want, p.ReadExec)
		}
	}
	for _, path := range append(p.ReadExec, p.ReadWrite...) {
		switch {
		case path == l.home || path == l.root || path == filepath.Dir(l.homeBin):
			t.Errorf("%s is granted: it opens the home (a PATH entry or a bin's parent)", path)
		case within(path, l.state) || within(l.state, path):
			t.Errorf("%s is granted: it opens the server's state", path)
		case within(path, l.sibling):
			t.Errorf("%s is granted: another workspace", path)
		}
	}
	for _, path := range p.ReadExec {
		if inProcess(path) {
			t.Errorf("%s is granted: /proc itself or a process's directory (its environ)", path)
		}
		if path == "/etc" || path == "/etc/shadow" || path == "/etc/ssl" || path == "/etc/ssl/private" ||
			(strings.HasPrefix(path, "/etc/ssh/ssh_host_") && strings.HasSuffix(path, "_key")) {
			t.Errorf("%s is granted: /etc is taken entry by entry, without its secrets", path)
		}
	}
	if p.Network {
		t.Error("the network is granted though Settings.Network is false")
	}
	if !slices.Contains(p.Devices, "/dev/null") {
		t.Errorf("devices = %v, want /dev/null", p.Devices)
	}
}

// git stops when the user's config is there but unreadable: those files
// (and no other file of the home, nor the credentials store) are read.
func TestPolicyReadsTheUsersGitConfigOnly(t *testing.T) {
	l := newLayout(t)
	for _, f := range []string{".gitconfig", ".git-credentials", ".config/git/config", ".config/git/credentials"} {
		path := filepath.Join(l.home, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := BuildPolicy(Settings{Home: l.state, UserHome: l.home}, Request{Writable: []string{l.ws}, TempDir: l.tmp}, l.env("/usr/bin"))
	for _, want := range []string{".gitconfig", ".config/git/config"} {
		if !slices.Contains(p.ReadExec, filepath.Join(l.home, want)) {
			t.Errorf("read lacks ~/%s: %v", want, p.ReadExec)
		}
	}
	for _, path := range append(p.ReadExec, p.ReadWrite...) {
		if path == l.home || path == filepath.Join(l.home, ".config") || path == filepath.Join(l.home, ".config", "git") ||
			strings.HasSuffix(path, "credentials") {
			t.Errorf("%s is granted: only the git config files of the home are", path)
		}
	}
}

func TestInProcess(t *testing.T) {
	for path, want := range map[string]bool{"/proc": true, "/proc/1": true, "/proc/123/environ": true,
		"/proc/cpuinfo": false, "/proc/sys/kernel": false, "/processes": false, "/usr/proc/1": false} {
		if got := inProcess(path); got != want {
			t.Errorf("inProcess(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestExposedNamesWhatARootCannotHide(t *testing.T) {
	l := newLayout(t)
	if got := Exposed([]string{l.ws}, l.state, l.home); len(got) != 0 {
		t.Errorf("a workspace exposes %v", got)
	}
	if got := Exposed([]string{l.ws, l.home}, l.state, l.home); !slices.Equal(got, []string{l.home, l.state}) {
		t.Errorf("the home as a root exposes %v, want the home and the state", got)
	}
}

func TestPolicyIsWidenedOnlyByTheSettings(t *testing.T) {
	l := newLayout(t)
	extraR, extraW := filepath.Join(l.home, "ro"), filepath.Join(l.home, "rw")
	for _, d := range []string{extraR, extraW} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	getenv := func(k string) string {
		return map[string]string{"IAC_CODE_SANDBOX_READ": extraR + string(os.PathListSeparator) + " ",
			"IAC_CODE_SANDBOX_WRITE": extraW, "IAC_CODE_SANDBOX_NETWORK": "off", "IAC_CODE_SANDBOX": "ON"}[k]
	}
	s, err := SettingsFromEnv(getenv, "", l.state)
	if err != nil {
		t.Fatal(err)
	}
	if s.Mode != On || s.Network {
		t.Errorf("settings = %+v, want mode on and the network off", s)
	}
	p := BuildPolicy(s, Request{Writable: []string{l.ws}, TempDir: l.tmp}, l.env(""))
	if !slices.Contains(p.ReadExec, extraR) || !slices.Contains(p.ReadWrite, extraW) {
		t.Errorf("widening lost: read-exec %v, read-write %v", p.ReadExec, p.ReadWrite)
	}
	if !p.Writable(filepath.Join(extraW, "a", "b")) || p.Writable(filepath.Join(extraR, "a")) || p.Writable(l.home) {
		t.Error("Writable disagrees with the read-write list")
	}

	for _, bad := range []map[string]string{{"IAC_CODE_SANDBOX": "maybe"}, {"IAC_CODE_SANDBOX_NETWORK": "no"},
		{"IAC_CODE_SANDBOX_WRITE": "relative/dir"}} {
		if _, err := SettingsFromEnv(func(k string) string { return bad[k] }, "", ""); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
	if s, err := SettingsFromEnv(getenv, "off", ""); err != nil || s.Mode != Off {
		t.Errorf("the --sandbox flag does not win over the variable: %+v %v", s, err)
	}
}

func TestEnvMovesCachesTheSandboxCannotWriteIntoTheTempDir(t *testing.T) {
	l := newLayout(t)
	widened := filepath.Join(l.root, "shared-gocache")
	p := Policy{ReadWrite: []string{l.ws, l.tmp, widened}}
	env := Env([]string{"HOME=" + l.home, "PATH=/usr/bin", "TMPDIR=/tmp", "GOCACHE=" + widened,
		"SSH_AUTH_SOCK=/tmp/ssh-x/agent.1", "UV_CACHE_DIR=" + filepath.Join(l.home, "uv-cache")}, p, l.tmp)
	got := lookup(env)
	if got("SSH_AUTH_SOCK") != "" || got("PATH") != "/usr/bin" {
		t.Errorf("SSH_AUTH_SOCK kept or PATH lost: %v", env)
	}
	if got("TMPDIR") != l.tmp {
		t.Errorf("TMPDIR = %q, want %q", got("TMPDIR"), l.tmp)
	}
	if got("GOCACHE") != widened {
		t.Errorf("GOCACHE = %q: a writable cache must be kept", got("GOCACHE"))
	}
	if got("XDG_CACHE_HOME") != filepath.Join(l.tmp, ".cache") || got("npm_config_cache") != filepath.Join(l.tmp, ".npm") ||
		got("UV_CACHE_DIR") != filepath.Join(l.tmp, ".cache", "uv") {
		t.Errorf("caches under the unreadable home not moved: %v", env)
	}
	if n := strings.Count(strings.Join(env, "\n"), "TMPDIR="); n != 1 {
		t.Errorf("TMPDIR set %d times", n)
	}
	env = Env([]string{"HOME=" + l.home}, p, l.tmp)
	if lookup(env)("GOCACHE") != filepath.Join(l.tmp, "go-build") {
		t.Errorf("GOCACHE under the home not moved: %v", env)
	}
}

func TestStatusMeta(t *testing.T) {
	on := Status{Settings: Settings{Mode: Auto, Network: true}, ABI: 7}
	if m := on.Meta(); m["mode"] != "landlock" || m["abi"] != 7 || m["network"] != true || m["scoped"] != true {
		t.Errorf("meta = %v", m)
	}
	refused := Status{Settings: Settings{Mode: On}, Reason: "no Landlock"}
	if m := refused.Meta(); m["mode"] != "unavailable" || refused.NewJail(nil) == nil {
		t.Errorf("on without Landlock: meta %v; its jail must exist and refuse", m)
	}
	if err := refused.NewJail(nil).Start(nil, func() error { t.Fatal("started"); return nil }); err == nil ||
		!strings.Contains(err.Error(), "no Landlock") {
		t.Errorf("refused jail start: %v", err)
	}
	if (Status{Settings: Settings{Mode: Auto}}).NewJail(nil) != nil || (Status{Settings: Settings{Mode: Off}, ABI: 7}).NewJail(nil) != nil {
		t.Error("auto without Landlock and off must not sandbox")
	}
}

// What a start asks to read comes from a client (an MCP server's command
// and arguments) or a repository (its root): never the home or the
// server's state. The spill directory, inside the state, is read by name
// only: it holds every session's outputs.
func TestPolicyRefusesAskedDirectoriesThatOpenTheHomeOrTheState(t *testing.T) {
	l := newLayout(t)
	mcpDir := filepath.Join(l.home, "mcp", "server")
	spill := filepath.Join(l.state, "tool-outputs")
	for _, d := range []string{mcpDir, spill} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := BuildPolicy(Settings{Home: l.state, UserHome: l.home}, Request{Writable: []string{l.ws}, TempDir: l.tmp, Listless: []string{spill},
		ReadOnly: []string{l.home, l.state, filepath.Join(l.state, "sessions"), l.root, mcpDir}}, l.env("/usr/bin"))
	for _, path := range p.ReadExec {
		if path == l.home || path == l.root || within(path, l.state) {
			t.Errorf("%s is granted: an asked directory opened the home or the state", path)
		}
	}
	if !slices.Contains(p.ReadExec, mcpDir) {
		t.Errorf("read lacks the MCP server's own directory %s: %v", mcpDir, p.ReadExec)
	}
	if !slices.Equal(p.ReadFiles, []string{spill}) {
		t.Errorf("read-by-name = %v, want only the spill directory", p.ReadFiles)
	}
}

// The home the policy protects is the server's, never the one a child's
// environment names: an MCP server entry's env (sent by the client) that
// moves HOME away and puts the real home on PATH opens nothing, and a
// gitconfig its HOME holds is not a way out of it.
func TestPolicyProtectsTheServersHomeWhateverTheChildsHOMESays(t *testing.T) {
	l := newLayout(t)
	secret := filepath.Join(l.home, ".ssh", "id_ed25519")
	fakeHome := filepath.Join(l.ws, "fake-home")
	state := filepath.Join(l.root, "srv-state") // outside the home: only the home's own check keeps it closed
	for _, d := range []string{filepath.Dir(secret), fakeHome, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(secret, []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(fakeHome, ".gitconfig")); err != nil {
		t.Fatal(err)
	}
	server := map[string]string{"HOME": l.home}
	s, err := SettingsFromEnv(func(k string) string { return server[k] }, "", state)
	if err != nil {
		t.Fatal(err)
	}
	path := strings.Join([]string{l.home, filepath.Dir(l.home), "/usr/bin"}, string(os.PathListSeparator))
	for _, childHome := range []string{"/nonexistent", l.sibling, fakeHome} {
		child := map[string]string{"HOME": childHome, "PATH": path}
		p := BuildPolicy(s, Request{Writable: []string{l.ws}, TempDir: l.tmp}, func(k string) string { return child[k] })
		for _, granted := range append(p.ReadExec, p.ReadWrite...) {
			if within(l.home, granted) || within(secret, granted) {
				t.Errorf("child HOME=%s: %s is granted: it opens the server's home", childHome, granted)
			}
		}
	}
}

// A server's package root is granted as found (resolved), never when it
// opens the home or the state, holds or is another session's workspace,
// or resolves elsewhere since it was found (a symlink swapped in).
func TestPolicyGrantsAPackageRootOnlyWhereItOpensNothingElse(t *testing.T) {
	l := newLayout(t)
	srv := filepath.Join(l.home, "mcp", "weather")
	work := filepath.Dir(l.ws) // holds ws (this session) and sibling (another's)
	link := filepath.Join(l.root, "link-to-weather")
	if err := os.MkdirAll(srv, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(srv, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, root string
		granted    bool
	}{
		{"a package under the home", srv, true},
		{"the home itself", l.home, false},
		{"an ancestor of the home", l.root, false},
		{"the server's state", l.state, false},
		{"a directory holding another session's workspace", work, false},
		{"another session's workspace", l.sibling, false},
		{"a path that is a symlink now", link, false},
		{"a relative path", "mcp/weather", false},
	} {
		p := BuildPolicy(Settings{Home: l.state, UserHome: l.home}, Request{Writable: []string{l.ws}, TempDir: l.tmp,
			Packages: []string{c.root}, Others: []string{l.sibling}}, l.env("/usr/bin"))
		if got := slices.Contains(p.ReadExec, c.root); got != c.granted {
			t.Errorf("%s (%s): granted %v, want %v", c.name, c.root, got, c.granted)
		}
		for _, d := range []string{l.home, l.state, l.sibling, work, srv} {
			if d != c.root && (d != srv || !c.granted) && slices.Contains(p.ReadExec, d) {
				t.Errorf("%s: %s granted as well: %v", c.name, d, p.ReadExec)
			}
		}
	}
}

// The live jails' roots are what "another session's workspace" means; a
// closed jail's are forgotten.
func TestWorkspacesAreTheOtherOpenJailsRoots(t *testing.T) {
	st := Status{Settings: Settings{Mode: On}, ABI: 1}
	a, b := st.NewJail([]string{"/w/a"}), st.NewJail([]string{"/w/b", "/w/b2"})
	if got := workspaces.others(a); !slices.Contains(got, "/w/b") || !slices.Contains(got, "/w/b2") || slices.Contains(got, "/w/a") {
		t.Errorf("others of a = %v", got)
	}
	b.SetRoots([]string{"/w/c"})
	if got := workspaces.others(a); !slices.Contains(got, "/w/c") || slices.Contains(got, "/w/b") {
		t.Errorf("after SetRoots, others of a = %v", got)
	}
	b.Close()
	if got := workspaces.others(a); slices.Contains(got, "/w/c") {
		t.Errorf("after Close, others of a = %v", got)
	}
	a.Close()
}
