//go:build linux

package sandbox

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// mainThreadStart is what a start from the main thread left behind (see
// TestMain); errNotOnMain when the test binary did not begin there.
var mainThreadStart error

var errNotOnMain = errors.New("TestMain did not run on the main thread (or no Landlock ABI 6)")

// TestMain starts a jailed command while on the main thread, the process's
// leader, before the tests. The caller blocks, so the runtime would run the
// start goroutine on this very thread; enforce must restrict another one,
// or the leader's credentials — those /proc and signals are checked
// against — would be the command's domain, for good. Observable: the
// command could signal the process.
func TestMain(m *testing.M) {
	mainThreadStart = errNotOnMain
	if unix.Gettid() == unix.Getpid() {
		mainThreadStart = startFromHere()
	}
	os.Exit(m.Run())
}

func startFromHere() error {
	st := Probe(Settings{Mode: On, Network: true})
	if st.ABI < 6 {
		return errNotOnMain
	}
	ws, err := os.MkdirTemp("", "sandbox-main-ws-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ws)
	j := st.NewJail([]string{ws})
	defer j.Close()
	cmd := exec.Command("bash", "-c", "kill -0 "+strconv.Itoa(os.Getpid()))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if err := j.Start(cmd, nil); err != nil {
		return err
	}
	if cmd.Wait() == nil {
		return errors.New("a command started from the main thread could signal the process: the main thread was restricted")
	}
	return nil
}

func TestAStartFromTheMainThreadLeavesItUnrestricted(t *testing.T) {
	if errors.Is(mainThreadStart, errNotOnMain) {
		t.Skip(mainThreadStart)
	}
	if mainThreadStart != nil {
		t.Fatal(mainThreadStart)
	}
}

func landlockOrSkip(t testing.TB) Status {
	st := Probe(Settings{Mode: On, Network: true})
	if st.ABI == 0 {
		t.Skip("no Landlock: " + st.Reason)
	}
	return st
}

// run runs a shell script in jail j and returns its combined output and
// whether it succeeded.
func run(t *testing.T, j *Jail, dir, script string) (string, bool) {
	t.Helper()
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := j.Start(cmd, nil); err != nil {
		t.Fatalf("start: %v", err)
	}
	err := cmd.Wait()
	return out.String(), err == nil
}

func TestAJailedProcessReachesItsSessionAndNothingElse(t *testing.T) {
	st := landlockOrSkip(t)
	l := newLayout(t)
	key := filepath.Join(l.home, ".ssh", "id_ed25519")
	if err := os.MkdirAll(filepath.Dir(key), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, []byte("PRIVATE"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.sibling, "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	st.Settings.Home = l.state
	st.Settings.Network = false
	j := st.NewJail([]string{l.ws})
	defer j.Close()

	t.Setenv("HOME", l.home)
	checks := []struct {
		script string
		ok     bool
	}{
		{"echo hi > inside && cat inside", true},
		{"echo hi > $TMPDIR/t && cat $TMPDIR/t", true},
		{"cat " + key, false},
		{"ls " + l.sibling, false},
		{"echo x > " + filepath.Join(l.root, "outside"), false},
		{"ls " + l.state, false},
		{"(sleep 0.01; cat " + key + ") & wait $!", false}, // a background job is inside too
		{"kill -0 " + strconv.Itoa(os.Getpid()), st.ABI < 6},
		{"cat /proc/" + strconv.Itoa(os.Getpid()) + "/environ", false}, // the server's environment
		{"cat /proc/self/environ", false},                              // no process's /proc directory
		{"grep -q processor /proc/cpuinfo && head -c1 /proc/meminfo && cat /proc/sys/kernel/ostype", true},
		{"echo to-stderr > /dev/stderr && cat <(echo substituted) && echo x | cat /dev/stdin", true},
		{"echo > /dev/null && head -c1 /dev/urandom | wc -c && ls /usr/bin >/dev/null", true},
	}
	for _, c := range checks {
		out, ok := run(t, j, l.ws, c.script)
		if ok != c.ok {
			t.Errorf("%q: succeeded=%v, want %v; output: %s", c.script, ok, c.ok, out)
		}
	}

	// A unix socket outside: reachable before ABI 9 (documented), not after.
	sockDir := t.TempDir()
	unixLn, err := net.Listen("unix", filepath.Join(sockDir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer unixLn.Close()
	go func() {
		if c, err := unixLn.Accept(); err == nil {
			c.Close()
		}
	}()
	if _, err := exec.LookPath("python3"); err == nil {
		script := "python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('" + filepath.Join(sockDir, "s.sock") + "')\""
		if out, ok := run(t, j, l.ws, script); ok != (st.ABI < 9) {
			t.Errorf("connect to a unix socket outside: succeeded=%v with ABI %d; output: %s", ok, st.ABI, out)
		}
	}

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if st.ABI >= 4 {
		out, ok := run(t, j, l.ws, "exec 3<>/dev/tcp/127.0.0.1/"+strconv.Itoa(port))
		if ok {
			t.Errorf("TCP connect with the network off succeeded: %s", out)
		}
	}

	tmp := j.TempDir()
	if _, err := os.Stat(tmp); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("the session's temp dir %s outlives Close: %v", tmp, err)
	}
	// The server itself is not restricted by any of this.
	if _, err := os.ReadFile(key); err != nil {
		t.Errorf("the server lost access: %v", err)
	}
	if err := syscall.Kill(os.Getpid(), 0); err != nil {
		t.Errorf("the server cannot signal itself: %v", err)
	}
}

// BenchmarkStart is the cost the jail adds to starting `true`: compare
// off (plain Start) and on.
func BenchmarkStart(b *testing.B) {
	st := landlockOrSkip(b)
	dir := b.TempDir()
	j := st.NewJail([]string{dir})
	defer j.Close()
	for _, mode := range []string{"off", "on"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command("/bin/true")
				cmd.Dir, cmd.Env = dir, []string{}
				var err error
				if mode == "on" {
					err = j.Start(cmd, nil)
				} else {
					err = cmd.Start()
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := cmd.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The spill directory is shared by every session: a jailed process reads a
// spilled output by its name but cannot list the others.
func TestAJailedProcessReadsTheSpillDirectoryByNameOnly(t *testing.T) {
	st := Probe(Settings{Mode: On, Network: true})
	if !st.Active() {
		t.Skip("no Landlock: " + st.Reason)
	}
	ws, spill := t.TempDir(), t.TempDir()
	known := filepath.Join(spill, "known.txt")
	if err := os.WriteFile(known, []byte("spilled"), 0o600); err != nil {
		t.Fatal(err)
	}
	j := st.NewJail([]string{ws}, spill)
	defer j.Close()
	run := func(script string) error {
		cmd := exec.Command("bash", "-c", script)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		if err := j.Start(cmd, nil); err != nil {
			t.Fatal(err)
		}
		return cmd.Wait()
	}
	if err := run("cat " + known); err != nil {
		t.Errorf("reading a spilled output by name failed: %v", err)
	}
	if err := run("ls " + spill); err == nil {
		t.Error("the spill directory could be listed")
	}
}

// openFDs is how many descriptors the test process has open.
func openFDs(t *testing.T) int {
	t.Helper()
	names, err := readDirNames("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// Each roots change builds a new ruleset at the next start; the one it
// replaces is closed then, not kept open until the session ends.
func TestChangingRootsDoesNotLeakTheOldRuleset(t *testing.T) {
	st := landlockOrSkip(t)
	l := newLayout(t)
	j := st.NewJail([]string{l.ws})
	defer j.Close()
	cycle := func(i int) {
		roots := []string{l.ws}
		if i%2 == 1 {
			roots = append(roots, l.sibling)
		}
		j.SetRoots(roots)
		if out, ok := run(t, j, l.ws, "true"); !ok {
			t.Fatalf("cycle %d: %s", i, out)
		}
	}
	cycle(0) // the temporary directory, the first ruleset
	before := openFDs(t)
	const cycles = 50
	for i := 1; i <= cycles; i++ {
		cycle(i)
	}
	if after := openFDs(t); after > before+2 {
		t.Errorf("%d roots changes: open descriptors %d -> %d (a ruleset per change kept open)", cycles, before, after)
	}
}
