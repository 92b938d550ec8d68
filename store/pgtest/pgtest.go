// Package pgtest starts a throwaway PostgreSQL server for tests: initdb and
// postgres under a temp dir, listening on a free loopback port (and a unix
// socket inside the temp dir), password authentication over TCP. When the
// test runs as root the server runs as the `postgres` user (PostgreSQL
// refuses root) through runuser or su, and the temp dir is handed to it.
//
// The server cannot outlive the test process: it is started by a small shell
// that holds a pipe from the test process and stops the server when the pipe
// reaches end of file, which happens when Stop closes it or when the test
// process dies in any way (a test timeout's panic, kill -9).
//
// Use one server per test package (Shared / StopShared) and one database per
// spec (NewDatabase): starting a server costs about a second, a database a few
// milliseconds.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrUnavailable means the PostgreSQL server binaries are not installed.
// Callers skip their PostgreSQL tests with a loud message (see SkipMessage).
var ErrUnavailable = errors.New("PostgreSQL server binaries (initdb, postgres) not found in PATH or /usr/lib/postgresql/*/bin")

// SkipMessage is what a test prints when it skips for ErrUnavailable.
const SkipMessage = "!!! SKIPPING the PostgreSQL tests: initdb/postgres not found (PATH, /usr/lib/postgresql/*/bin). " +
	"Install Debian's postgresql package (.ci/run does it) to run them."

// User is the superuser of the test server.
const User = "postgres"

// Server is a running throwaway PostgreSQL server.
type Server struct {
	dir      string // temp dir: data/, sock/, server.log
	port     int
	password string
	// stop's write end keeps the server alive; closing it stops it.
	stop *os.File
	cmd  *exec.Cmd
	done chan struct{} // closed when the watchdog shell exited
	dbs  atomic.Int64
	once sync.Once
	err  error
}

// Options tune Start.
type Options struct {
	// Durable keeps PostgreSQL's durability settings (fsync, synchronous
	// commit, full page writes). Off by default: tests do not survive power
	// loss and run faster without them. Benchmarks set it.
	Durable bool
}

// FindBin returns the directory holding initdb and postgres: PATH first,
// then the newest /usr/lib/postgresql/*/bin.
func FindBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if isExec(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrUnavailable
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(p string) bool {
	info, err := os.Stat(p)
	return err == nil && !info.IsDir() && info.Mode()&0o111 != 0
}

// Start initialises a cluster in a new temp dir and starts the server.
// ErrUnavailable when the binaries are missing.
func Start(opts Options) (*Server, error) {
	bin, err := FindBin()
	if err != nil {
		return nil, err
	}
	runAs, err := serverUser()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, password: randomHex(16), done: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	if err := s.initdb(bin, runAs); err != nil {
		return nil, err
	}
	// A free port can be taken between the probe and the server's bind:
	// try a few.
	for attempt := 0; ; attempt++ {
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
		err = s.start(bin, runAs, opts)
		if err == nil || attempt == 2 {
			break
		}
		s.done = make(chan struct{})
	}
	if err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// runAs is nil when the test does not run as root, else the user to run
// the server as.
type runAs struct {
	uid, gid int
}

func serverUser() (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root and there is no postgres user to run the server as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &runAs{uid: uid, gid: gid}, nil
}

// command runs name as the server user: directly, or via runuser/su as root.
func command(r *runAs, name string, args ...string) *exec.Cmd {
	if r == nil {
		return exec.Command(name, args...)
	}
	if p, err := exec.LookPath("runuser"); err == nil {
		return exec.Command(p, append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	// su runs a command line through a shell: pass the words as arguments.
	return exec.Command("su", append([]string{"-s", "/bin/sh", "postgres", "-c", `exec "$0" "$@"`, name}, args...)...)
}

func (s *Server) initdb(bin string, r *runAs) error {
	pwfile := filepath.Join(s.dir, "pw")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		return err
	}
	for _, d := range []string{"sock"} {
		if err := os.Mkdir(filepath.Join(s.dir, d), 0o700); err != nil {
			return err
		}
	}
	if r != nil {
		// The temp dir and everything in it belong to the server user.
		if err := filepath.WalkDir(s.dir, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, r.uid, r.gid)
		}); err != nil {
			return err
		}
	}
	cmd := command(r, filepath.Join(bin, "initdb"), "-D", filepath.Join(s.dir, "data"), "-U", User,
		"--pwfile", pwfile, "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
		"--no-locale", "--no-sync", "--no-instructions")
	out, err := cmd.CombinedOutput()
	_ = os.Remove(pwfile)
	if err != nil {
		return fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	return nil
}

// watchdog starts postgres and stops it (fast shutdown) when its stdin, a
// pipe from the test process, reaches EOF; it exits with the server. When it
// was the EOF that stopped the server (the test process is done or dead),
// it also removes the temp dir in PGTEST_DIR.
const watchdog = `exec 3<&0
"$0" "$@" </dev/null &
pid=$!
( read -r _ <&3; kill -INT "$pid" 2>/dev/null ) &
reader=$!
wait "$pid"
code=$?
if kill -0 "$reader" 2>/dev/null; then
	kill "$reader" 2>/dev/null
else
	rm -rf "$PGTEST_DIR"
fi
exit "$code"`

func (s *Server) start(bin string, r *runAs, opts Options) error {
	args := []string{"-D", filepath.Join(s.dir, "data"), "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + filepath.Join(s.dir, "sock"),
		"-c", "max_connections=300", "-c", "logging_collector=off"}
	if !opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	rd, wr, err := os.Pipe()
	if err != nil {
		return err
	}
	defer rd.Close()
	cmd := command(r, "/bin/sh", append([]string{"-c", watchdog, filepath.Join(bin, "postgres")}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = rd, logf, logf
	cmd.Env = append(os.Environ(), "PGTEST_DIR="+s.dir)
	// Its own process group: a Ctrl-C of go test reaches the server through
	// the pipe, in order, not as a signal racing the test's own cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		wr.Close()
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	s.cmd, s.stop = cmd, wr
	done := s.done
	go func() { _ = cmd.Wait(); close(done) }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		select {
		case <-done:
			wr.Close()
			return fmt.Errorf("pgtest: postgres exited at start:\n%s", s.logTail())
		case <-ctx.Done():
			_ = s.Stop()
			return fmt.Errorf("pgtest: postgres not ready after 60 s:\n%s", s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Server) logTail() string {
	data, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// Port is the server's loopback TCP port.
func (s *Server) Port() int { return s.port }

// Password is the superuser's password (random per server).
func (s *Server) Password() string { return s.password }

// URL is the TCP connection URL of database db as the superuser.
func (s *Server) URL(db string) string { return s.URLAt(fmt.Sprintf("127.0.0.1:%d", s.port), db) }

// URLAt is URL with another host:port, e.g. a Proxy in front of the server.
func (s *Server) URLAt(hostport, db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(User, s.password), Host: hostport, Path: "/" + db,
		RawQuery: "sslmode=disable"}
	return u.String()
}

// NewDatabase creates an empty database with a unique name and returns its
// URL. Drop it with DropDatabase when the test is done, or leave it to Stop.
func (s *Server) NewDatabase() (name, dbURL string, err error) {
	name = fmt.Sprintf("t%d_%s", s.dbs.Add(1), randomHex(4))
	return name, s.URL(name), s.Exec(context.Background(), "CREATE DATABASE "+name)
}

// NewSchema creates an empty schema with a unique name in the postgres
// database and returns a URL whose search_path is that schema: tables created
// through it land there. A schema costs a few milliseconds where a database
// costs 200 ms. Drop it with DropSchema.
func (s *Server) NewSchema() (name, schemaURL string, err error) {
	name = fmt.Sprintf("s%d_%s", s.dbs.Add(1), randomHex(4))
	return name, s.URL("postgres") + "&search_path=" + name, s.Exec(context.Background(), "CREATE SCHEMA "+name)
}

// DropSchema drops a schema made by NewSchema and everything in it.
func (s *Server) DropSchema(name string) error {
	return s.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
}

// DropDatabase drops a database, closing connections still open to it.
func (s *Server) DropDatabase(name string) error {
	return s.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// Exec runs one statement in the postgres database as the superuser.
func (s *Server) Exec(ctx context.Context, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// Stop shuts the server down and removes its temp dir.
func (s *Server) Stop() error {
	s.once.Do(func() {
		if s.stop != nil {
			_ = s.stop.Close()
			select {
			case <-s.done:
			case <-time.After(30 * time.Second):
				_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
				<-s.done
				s.err = errors.New("pgtest: postgres did not stop within 30 s; killed")
			}
		}
		if err := os.RemoveAll(s.dir); err != nil && s.err == nil {
			s.err = err
		}
	})
	return s.err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var shared struct {
	mu  sync.Mutex
	srv *Server
	err error
}

// Shared returns the test package's server, starting it on first use; the
// first call's options win. Stop it with StopShared (from TestMain, or an
// AfterSuite).
func Shared(opts Options) (*Server, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil && shared.err == nil {
		shared.srv, shared.err = Start(opts)
	}
	return shared.srv, shared.err
}

var skipLoudly sync.Once

// SharedOrSkip is Shared for a spec: when the binaries are not installed it
// prints SkipMessage to stderr (once per process, so that a run without
// PostgreSQL is noticed) and calls skip (ginkgo.Skip) with it.
func SharedOrSkip(skip func(message string, callerSkip ...int)) (*Server, error) {
	srv, err := Shared(Options{})
	if err == ErrUnavailable {
		skipLoudly.Do(func() { fmt.Fprintln(os.Stderr, SkipMessage) })
		skip(SkipMessage)
	}
	return srv, err
}

// StopShared stops the server Shared started, if any.
func StopShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil {
		return nil
	}
	err := shared.srv.Stop()
	shared.srv, shared.err = nil, nil
	return err
}

// Available reports whether the binaries are installed, for a skip decision
// before anything is started.
func Available() bool {
	_, err := FindBin()
	return err == nil
}
