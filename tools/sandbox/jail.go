package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Jail is one session's sandbox: the directories its processes may write
// (its roots), its own temporary directory (made at the first start,
// removed by Close) and the ruleset last built. Its methods are safe for
// concurrent use; a nil Jail runs nothing sandboxed.
type Jail struct {
	status   Status
	readOnly []string

	// mu: starts hold it shared, SetRoots and Close exclusively (they
	// wait for them).
	mu     sync.RWMutex
	roots  []string
	closed bool
	// state guards what starts change: the temporary directory and the
	// cached ruleset (retired ones may still be in use until SetRoots or
	// Close, which wait for every start).
	state   sync.Mutex
	tmp     string
	cached  *ruleset
	policy  Policy
	key     string
	retired []*ruleset
}

// NewJail is the jail of a session whose processes may write roots (its
// cwd, then its additional directories) and read readOnly (the spill
// directory). It is nil when commands are not sandboxed: IAC_CODE_SANDBOX
// off, or auto on a kernel without Landlock.
func (s Status) NewJail(roots []string, readOnly ...string) *Jail {
	if !s.Active() && !s.Refused() {
		return nil
	}
	j := &Jail{status: s, roots: roots, readOnly: readOnly}
	workspaces.set(j, roots)
	return j
}

// Status is what the jail enforces.
func (j *Jail) Status() Status { return j.status }

// Meta is the jail's entry for a _meta object (see Status.Meta).
func (j *Jail) Meta() map[string]any { return j.status.Meta() }

// SetRoots replaces the writable roots (the session's additional
// directories changed); the next start builds its ruleset anew. The
// rulesets built for the old roots are closed here: holding j.mu
// exclusively, no start is using them.
func (j *Jail) SetRoots(roots []string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.roots = append([]string(nil), roots...)
	workspaces.set(j, j.roots)
	j.state.Lock()
	j.dropRulesets()
	j.state.Unlock()
}

// dropRulesets closes the cached and retired rulesets. Called with j.mu
// locked exclusively (no start holds one) and j.state locked.
func (j *Jail) dropRulesets() {
	j.cached.close()
	for _, rs := range j.retired {
		rs.close()
	}
	j.cached, j.retired, j.key = nil, nil, ""
}

// Start starts cmd inside the jail. Its environment (cmd.Env, which must
// be set: the tool environment, without the server's secrets) gets TMPDIR
// and the cache redirections (Env); then start — cmd.Start when nil, or a
// transport's Connect that starts cmd — runs on a thread restricted to the
// policy, readOnly added. An error means nothing was started: the kernel
// refused, the temporary directory could not be made, or
// IAC_CODE_SANDBOX=on without Landlock.
func (j *Jail) Start(cmd *exec.Cmd, start func() error, readOnly ...string) error {
	return j.StartWith(cmd, start, Reads{Dirs: readOnly})
}

// Reads are the directories one start asks to read beyond the session's.
type Reads struct {
	// Dirs: the command's own directories, the repository root above the
	// cwd (Request.ReadOnly).
	Dirs []string
	// Packages: the package roots of a server's files, resolved once when
	// found (Request.Packages).
	Packages []string
}

// StartWith is Start with reads: a stdio MCP server's own directories and
// package roots.
func (j *Jail) StartWith(cmd *exec.Cmd, start func() error, reads Reads) error {
	if j.status.Refused() {
		return errors.New("sandbox: IAC_CODE_SANDBOX=on but " + j.status.Reason + "; the command was not run")
	}
	if start == nil {
		start = cmd.Start
	}
	env := cmd.Env
	if env == nil {
		return errors.New("sandbox: the command has no environment (it would get the server's)")
	}
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.closed {
		return errors.New("sandbox: the session is closed")
	}
	tmp, err := j.tempDir()
	if err != nil {
		return err
	}
	getenv := lookup(env)
	rs, p, done, err := j.ruleset(tmp, getenv, reads)
	if err != nil {
		return err
	}
	defer done()
	cmd.Env = Env(env, p, tmp)
	return rs.enforce(start)
}

// ruleset returns the ruleset and policy of a start: the cached ones when
// the policy's inputs are those of the last start (bash calls: always),
// else new ones (an MCP server's directory: for this start only). Called
// with j.mu read-locked.
func (j *Jail) ruleset(tmp string, getenv func(string) string, reads Reads) (*ruleset, Policy, func(), error) {
	// A directory a root holds is granted already: asking for it again
	// (the repository root when it is the cwd) keeps the cached ruleset.
	granted := func(r string) bool {
		dir := resolve(r)
		return dir != "" && slices.ContainsFunc(j.roots, func(root string) bool { return within(dir, resolve(root)) })
	}
	readOnly := slices.DeleteFunc(slices.Clone(reads.Dirs), granted)
	packages := slices.DeleteFunc(slices.Clone(reads.Packages), granted)
	key := strings.Join(append(append([]string{getenv("PATH"), getenv("HOME"), getenv("GOPATH"), getenv("GOMODCACHE")},
		readOnly...), packages...), "\x00")
	j.state.Lock()
	if j.key == key && j.cached != nil {
		rs, p := j.cached, j.policy
		j.state.Unlock()
		return rs, p, func() {}, nil
	}
	j.state.Unlock()
	req := Request{Writable: j.roots, TempDir: tmp, Listless: j.readOnly, ReadOnly: readOnly, Packages: packages}
	if len(packages) > 0 {
		req.Others = workspaces.others(j)
	}
	p := BuildPolicy(j.status.Settings, req, getenv)
	rs, err := newRuleset(p)
	if err != nil {
		return nil, p, nil, err
	}
	if len(readOnly) > 0 || len(packages) > 0 {
		return rs, p, rs.close, nil
	}
	j.state.Lock()
	defer j.state.Unlock()
	if j.cached != nil {
		// Maybe still in use by a concurrent start: Close, which waits
		// for every start, closes it.
		j.retired = append(j.retired, j.cached)
	}
	j.cached, j.policy, j.key = rs, p, key
	return rs, p, func() {}, nil
}

// tempDir is the session's temporary directory, made on first use.
func (j *Jail) tempDir() (string, error) {
	j.state.Lock()
	defer j.state.Unlock()
	if j.tmp != "" {
		return j.tmp, nil
	}
	dir, err := os.MkdirTemp("", "iac-code-session-")
	if err != nil {
		return "", errors.New("sandbox: cannot make the session's temporary directory: " + err.Error())
	}
	j.tmp = dir
	return dir, nil
}

// TempDir is the session's temporary directory ("" before the first start).
func (j *Jail) TempDir() string {
	j.state.Lock()
	defer j.state.Unlock()
	return j.tmp
}

// Close ends the jail when its session ends: no more starts, the
// rulesets closed, the temporary directory removed. Processes still
// running keep their domain.
func (j *Jail) Close() {
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	j.closed = true
	workspaces.drop(j)
	j.state.Lock()
	j.dropRulesets()
	j.state.Unlock()
	if j.tmp != "" {
		removeAll(j.tmp)
	}
}

// removeAll removes dir, making read-only directories inside it (the go
// command's module cache) writable first when it has to.
func removeAll(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

// Env is env for a process in policy p with temporary directory tmp:
// TMPDIR is tmp, and a cache the process could not write (the go
// command's build cache, the XDG cache, npm's, uv's) is moved into tmp, so that
// `go build` or `npm test` work without widening the sandbox. A cache
// directory that IAC_CODE_SANDBOX_WRITE made writable is kept.
// SSH_AUTH_SOCK is dropped (see dropped).
func Env(env []string, p Policy, tmp string) []string {
	getenv := lookup(env)
	home := getenv("HOME")
	cacheHome := getenv("XDG_CACHE_HOME")
	if cacheHome == "" && home != "" {
		cacheHome = filepath.Join(home, ".cache")
	}
	set := map[string]string{"TMPDIR": tmp}
	redirect := func(name, current, inTmp string) {
		if current == "" || !p.Writable(nearest(current)) {
			set[name] = filepath.Join(tmp, inTmp)
		}
	}
	goCache := getenv("GOCACHE")
	if goCache == "" && cacheHome != "" {
		goCache = filepath.Join(cacheHome, "go-build")
	}
	redirect("GOCACHE", goCache, "go-build")
	redirect("XDG_CACHE_HOME", cacheHome, ".cache")
	npmCache := getenv("npm_config_cache")
	if npmCache == "" && home != "" {
		npmCache = filepath.Join(home, ".npm")
	}
	redirect("npm_config_cache", npmCache, ".npm")
	if uvCache := getenv("UV_CACHE_DIR"); uvCache != "" {
		// uv's default is under XDG_CACHE_HOME, moved above.
		redirect("UV_CACHE_DIR", uvCache, filepath.Join(".cache", "uv"))
	}

	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := set[name]; !ok && !dropped[name] {
			out = append(out, kv)
		}
	}
	for _, name := range []string{"TMPDIR", "GOCACHE", "XDG_CACHE_HOME", "npm_config_cache", "UV_CACHE_DIR"} {
		if v, ok := set[name]; ok {
			out = append(out, name+"="+v)
		}
	}
	return out
}

// dropped are variables a sandboxed process does not get: the way to the
// user's SSH agent (Landlock before ABI 9 does not restrict connecting to
// a unix socket; the agent would sign as the user).
var dropped = map[string]bool{"SSH_AUTH_SOCK": true}

// nearest is path resolved as far as it exists (a cache directory may not
// exist yet; its parent decides where it would be made).
func nearest(path string) string {
	path = filepath.Clean(path)
	for p := path; ; p = filepath.Dir(p) {
		if r := resolve(p); r != "" {
			rel, _ := filepath.Rel(p, path)
			return filepath.Join(r, rel)
		}
		if p == filepath.Dir(p) {
			return path
		}
	}
}

// lookup is getenv over a "NAME=value" list (the last one wins).
func lookup(env []string) func(string) string {
	return func(name string) string {
		for i := len(env) - 1; i >= 0; i-- {
			if k, v, ok := strings.Cut(env[i], "="); ok && k == name {
				return v
			}
		}
		return ""
	}
}
