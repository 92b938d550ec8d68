package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
)

// Policy is what a sandboxed process may reach. Every path is absolute,
// clean and resolved (Landlock rules hold on the inode a path leads to);
// paths that do not exist are left out.
type Policy struct {
	// ReadWrite: read, write, create, remove, rename and link beneath.
	ReadWrite []string
	// ReadExec: read and execute beneath (directories or single files).
	ReadExec []string
	// ReadFiles: read the files beneath, but not list the directories:
	// only a name the process already knows can be opened (the spill
	// directory, shared by every session).
	ReadFiles []string
	// Devices: read, write and ioctl on these device files.
	Devices []string
	// Network: TCP connect and bind are allowed.
	Network bool
}

// Request is what one sandboxed start needs beyond the system.
type Request struct {
	// Writable are the session's roots: its cwd and additional directories.
	Writable []string
	// TempDir is the session's own temporary directory (TMPDIR).
	TempDir string
	// Listless are directories whose files may be read by name, without
	// listing them: the tool-output spill directory.
	Listless []string
	// ReadOnly are more directories a start asks to read: an MCP server's
	// own directory, the repository root above the cwd. They come from
	// what a client or a repository names, so one that would open the home
	// or the server's state (see opens) is left out.
	ReadOnly []string
	// Packages are the package roots of a stdio MCP server's files (see
	// mcp's ownDirs), found by markers in directories anyone may plant
	// them in: each must be given resolved, and is left out when it
	// resolves otherwise now (a symlink swapped in since), opens the home
	// or the server's state, or is or holds the workspace of another
	// session (Others).
	Packages []string
	// Others are the roots of the other sessions' jails (see workspaces).
	Others []string
}

// systemDirs are read and executed by every sandboxed process: programs,
// libraries, configuration. /etc is taken entry by entry (etcHidden), /proc
// too (procGlobal).
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
	"/nix/store", "/sys"}

// etcHidden are the entries of /etc a sandboxed process does not read
// (secrets readable by a server that runs as root).
var etcHidden = map[string]bool{"shadow": true, "shadow-": true, "gshadow": true, "gshadow-": true,
	"sudoers": true, "sudoers.d": true, "ssh": true, "ssl": true, "credstore": true, "credstore.encrypted": true,
	"security": true}

// procHidden: of /proc only what describes the machine is read, never a
// process: not the /proc/<pid> directories (another process's environ is
// readable across Landlock domains), not self, thread-self and the links
// into them (net, mounts: the server's), not kernel memory or the keyring.
// /dev/stdout, /dev/fd/N and `<(…)` still work: they reach pipes, which
// Landlock does not restrict.
func procHidden(name string) bool {
	if name == "" || strings.Trim(name, "0123456789") == "" {
		return true
	}
	switch name {
	case "self", "thread-self", "net", "mounts", "kcore", "kmsg", "kpagecgroup", "kpagecount", "kpageflags",
		"keys", "key-users", "sysrq-trigger", "timer_list", "vmallocinfo", "kallsyms":
		return true
	}
	fi, err := os.Lstat(filepath.Join("/proc", name))
	return err != nil || fi.Mode()&os.ModeSymlink != 0
}

// inProcess reports whether path is /proc itself or lies in a process's
// directory of it.
func inProcess(path string) bool {
	rest, ok := strings.CutPrefix(path, "/proc")
	if !ok || (rest != "" && rest[0] != '/') {
		return false
	}
	if rest == "" || rest == "/" {
		return true
	}
	first, _, _ := strings.Cut(rest[1:], "/")
	return strings.Trim(first, "0123456789") == ""
}

// gitConfig are the user's git configuration files, read by every git
// command: an unreadable one (EACCES, unlike a missing one) makes git stop
// with "unknown error occurred while reading the configuration files".
// Credentials stay out: ~/.git-credentials is not among them.
var gitConfig = []string{".gitconfig", ".config/git/config", ".config/git/ignore", ".config/git/attributes"}

// devices are the device files programs open as a matter of course.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// BuildPolicy is the policy of one start: the request's directories, the
// system, the toolchains on PATH, the module cache, the settings'
// widening. getenv is the environment the process will get (PATH, HOME,
// GOPATH, GOMODCACHE). A PATH entry that is, contains or lies inside the
// server's state (IAC_CODE_HOME), or that is the server's $HOME
// (Settings.UserHome) or an ancestor of it, is not added: a PATH entry
// never opens the home. The child's HOME only locates its git config and
// module cache; it never decides which home is protected.
func BuildPolicy(s Settings, req Request, getenv func(string) string) Policy {
	var b builder
	home := resolve(s.ProtectedHome())
	state := resolve(s.Home)
	for _, w := range req.Writable {
		b.rw(w)
	}
	b.rw(req.TempDir)
	for _, w := range s.Write {
		b.rw(w)
	}
	for _, r := range req.Listless {
		b.add(&b.p.ReadFiles, r)
	}
	for _, r := range req.ReadOnly {
		if dir := resolve(r); dir != "" && !opens(dir, home, state) {
			b.rx(dir)
		}
	}
	for _, r := range req.Packages {
		if packageAllowed(r, home, state, req.Others) {
			b.rx(r)
		}
	}
	for _, r := range s.Read {
		b.rx(r)
	}
	for _, d := range systemDirs {
		b.rx(d)
	}
	b.etc()
	b.entries("/proc", procHidden)
	for _, entry := range filepath.SplitList(getenv("PATH")) {
		if !filepath.IsAbs(entry) {
			continue // "." and relative entries depend on the cwd, which is covered
		}
		dir := resolve(entry)
		if dir == "" || opens(dir, home, state) {
			continue
		}
		b.rx(dir)
		// A toolchain's bin: its root holds the rest (GOROOT's src and
		// pkg/tool, a node prefix's lib); not for a bin under $HOME, whose
		// parent (~/.cargo, ~/.local) may hold credentials.
		if filepath.Base(dir) == "bin" {
			if root := filepath.Dir(dir); !opens(root, home, state) && !within(root, home) {
				b.rx(root)
			}
		}
	}
	if mod := goModCache(getenv); mod != "" && !opens(mod, home, state) {
		b.rx(mod) // modules already downloaded build offline; a download needs IAC_CODE_SANDBOX_WRITE
	}
	b.gitConfig(home, resolve(getenv("HOME")), state)
	for _, d := range devices {
		if p := resolve(d); p != "" {
			b.p.Devices = append(b.p.Devices, p)
		}
	}
	b.p.Network = s.Network
	return b.p
}

// Exposed are the protected directories (the home, the server's state)
// that a writable root contains, which the sandbox therefore cannot hide:
// a session whose cwd is the home directory, or holds IAC_CODE_HOME.
func Exposed(roots []string, state, home string) []string {
	resolved := make([]string, len(roots)) // each once: a stat per path component
	for i, r := range roots {
		resolved[i] = resolve(r)
	}
	var out []string
	for _, p := range resolvedProtected(state, home) {
		for _, r := range resolved {
			if within(p, r) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// protectedCache holds the last protected directories Exposed resolved:
// the server's state and its user's home are the same for every session,
// and every session's first turn asks (a stat per path component of each).
// Kept only when both resolved: a directory made later is looked for again.
var protectedCache atomic.Pointer[protectedDirs]

type protectedDirs struct{ state, home, resolvedHome, resolvedState string }

// resolvedProtected is {resolve(home), resolve(state)}, from protectedCache
// when it holds these two. The result only names what Exposed warns of; the
// policy resolves every path it grants or denies itself (BuildPolicy).
func resolvedProtected(state, home string) [2]string {
	if c := protectedCache.Load(); c != nil && c.state == state && c.home == home {
		return [2]string{c.resolvedHome, c.resolvedState}
	}
	h, st := resolve(home), resolve(state)
	if h != "" && st != "" {
		protectedCache.Store(&protectedDirs{state: state, home: home, resolvedHome: h, resolvedState: st})
	}
	return [2]string{h, st}
}

// Writable reports whether path (absolute) lies beneath a ReadWrite entry.
func (p Policy) Writable(path string) bool {
	path = filepath.Clean(path)
	for _, w := range p.ReadWrite {
		if within(path, w) {
			return true
		}
	}
	return false
}

type builder struct {
	p    Policy
	seen map[string]bool
}

func (b *builder) add(list *[]string, path string) {
	p := resolve(path)
	if p == "" || inProcess(p) {
		return // also a link into a process's /proc directory (/etc/mtab)
	}
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	if b.seen[p] {
		return // the first grant of a path wins (write before read)
	}
	b.seen[p] = true
	*list = append(*list, p)
}

func (b *builder) rw(path string) { b.add(&b.p.ReadWrite, path) }
func (b *builder) rx(path string) { b.add(&b.p.ReadExec, path) }

// gitConfig adds the git configuration files of the server's home and of
// the child's HOME when that is another directory. The child's are its
// own: one that leads (by a symlink) out of its HOME, into the server's
// home or into the state is left out.
func (b *builder) gitConfig(home, childHome, state string) {
	for _, h := range []string{home, childHome} {
		if h == "" || (h != home && opens(h, home, state)) {
			continue
		}
		for _, f := range gitConfig {
			p := resolve(filepath.Join(h, f))
			if p == "" || within(p, state) || (h != home && (!within(p, h) || within(p, home))) {
				continue
			}
			b.rx(p)
		}
	}
}

// etc adds the entries of /etc but the hidden ones; of /etc/ssh and
// /etc/ssl all but the private keys (host keys, ssl/private).
func (b *builder) etc() {
	b.entries("/etc", func(n string) bool { return etcHidden[n] })
	b.entries("/etc/ssh", func(n string) bool { return strings.HasPrefix(n, "ssh_host_") && strings.HasSuffix(n, "_key") })
	b.entries("/etc/ssl", func(n string) bool { return n == "private" })
}

// entries adds dir's entries except those hidden says.
func (b *builder) entries(dir string, hidden func(string) bool) {
	names, err := readDirNames(dir)
	if err != nil {
		return
	}
	for _, n := range names {
		if !hidden(n) {
			b.rx(filepath.Join(dir, n))
		}
	}
}

func readDirNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

// goModCache is where the go command keeps modules for this environment.
func goModCache(getenv func(string) string) string {
	if m := getenv("GOMODCACHE"); m != "" {
		return resolve(m)
	}
	gopath := getenv("GOPATH")
	if gopath == "" {
		if h := getenv("HOME"); h != "" {
			gopath = filepath.Join(h, "go")
		}
	}
	if list := filepath.SplitList(gopath); len(list) > 0 && filepath.IsAbs(list[0]) {
		return resolve(filepath.Join(list[0], "pkg", "mod"))
	}
	return ""
}

// resolve is path absolute, clean and with its symlinks resolved; "" when
// it is empty, relative or does not exist.
func resolve(path string) string {
	if path == "" || !filepath.IsAbs(path) {
		return ""
	}
	p, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ""
	}
	return filepath.Clean(p)
}

// ProtectedHome is the home the sandbox protects: the settings', else the
// server process's $HOME.
func (s Settings) ProtectedHome() string {
	if s.UserHome != "" {
		return s.UserHome
	}
	return os.Getenv("HOME")
}

// within reports whether path is dir or lies beneath it.
func within(path, dir string) bool {
	if path == "" || dir == "" {
		return false
	}
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// packageAllowed: root (resolved when found) may be granted as a
// server's package root. It is decided on that resolved value alone: a
// root that resolves to another path now is refused, not followed.
func packageAllowed(root, home, state string, others []string) bool {
	if root == "" || resolve(root) != root || opens(root, home, state) {
		return false
	}
	for _, o := range others {
		if within(resolve(o), root) {
			return false
		}
	}
	return true
}

// opens reports whether granting dir would open the home (dir is $HOME or
// an ancestor of it) or the server's state (dir is it, an ancestor of it,
// or inside it).
func opens(dir, home, state string) bool {
	return within(home, dir) || within(state, dir) || within(dir, state)
}
