//go:build unix

package procgroup

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// The test binary plays two more roles, chosen by PROCGROUP_TEST_ROLE:
// "watchdog" (RunWatchdog on fd 3) and "server" (starts a watchdog and a
// process group with a background child, prints the group id, then waits
// to be killed).
func TestMain(m *testing.M) {
	switch os.Getenv("PROCGROUP_TEST_ROLE") {
	case "watchdog":
		RunWatchdog(os.NewFile(3, "registrations"), 200*time.Millisecond, zerolog.New(os.Stderr))
		os.Exit(0)
	case "server":
		runServer()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func watchdogCmd() *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{"PROCGROUP_TEST_ROLE=watchdog"}
	return cmd
}

// startGroup starts `sh -c 'sleep 60 & sleep 60'` in its own group; the
// background sleep is what a parent-death signal on the leader would miss.
// ignoreTERM makes both ignore SIGTERM, so only SIGKILL ends them.
func startGroup(t testing.TB, ignoreTERM bool) int {
	script := "sleep 60 & sleep 60"
	if ignoreTERM {
		script = "trap '' TERM; " + script
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		if t != nil {
			t.Fatal(err)
		}
		panic(err)
	}
	go func() { _ = cmd.Wait() }() // reap the leader, like bash's runner
	return cmd.Process.Pid
}

func runServer() {
	if os.Getenv("ON_DEMAND") == "1" { // as iac-code does: the watchdog starts at Register
		StartWatchdogOnDemand(watchdogCmd, os.Stderr, func(_ int, err error) {
			if err != nil {
				panic(err)
			}
		}, nil)
	} else if _, err := StartWatchdog(watchdogCmd(), os.Stderr, nil); err != nil {
		panic(err)
	}
	pgid := startGroup(nil, os.Getenv("IGNORE_TERM") == "1")
	Register(pgid)
	fmt.Println(pgid)
	select {}
}

func waitGroupGone(t *testing.T, pgid int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for Alive(pgid) {
		if time.Since(start) > within {
			syscall.Kill(-pgid, syscall.SIGKILL)
			t.Fatalf("process group %d still alive after %v", pgid, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func TestWatchdogKillsTheGroupsOfAServerKilledWithSIGKILL(t *testing.T) {
	for _, c := range []struct{ ignoreTERM, onDemand bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		ignoreTERM := c.ignoreTERM
		t.Run(fmt.Sprintf("ignoreTERM=%v,onDemand=%v", ignoreTERM, c.onDemand), func(t *testing.T) {
			srv := exec.Command(os.Args[0])
			srv.Env = []string{"PATH=" + os.Getenv("PATH"), "PROCGROUP_TEST_ROLE=server", "IGNORE_TERM=" + map[bool]string{true: "1"}[ignoreTERM],
				"ON_DEMAND=" + map[bool]string{true: "1"}[c.onDemand]}
			srv.Stderr = os.Stderr
			out, err := srv.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			pgid, _ := strconv.Atoi(strings.TrimSpace(line))
			if !Alive(pgid) {
				t.Fatal("the group should run")
			}
			if err := srv.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = srv.Wait()
			took := waitGroupGone(t, pgid, 5*time.Second)
			t.Logf("kill -9 of the server → process group %d gone in %v", pgid, took)
		})
	}
}

func TestOrderlyShutdownKillsWhatIsLeftAndForgetsWhatEnded(t *testing.T) {
	wd, err := StartWatchdog(watchdogCmd(), os.Stderr, nil)
	if err != nil {
		t.Fatal(err)
	}
	ended := startGroup(t, false)
	Register(ended)
	Kill(ended, time.Second)
	Unregister(ended)
	left := startGroup(t, false)
	Register(left)
	if got := Registered(); len(got) != 1 || got[0] != left {
		t.Fatalf("registered %v, want [%d]", got, left)
	}
	if n := KillAll(time.Second); n != 1 {
		t.Fatalf("KillAll killed %d groups, want 1", n)
	}
	if Alive(left) || len(Registered()) != 0 {
		t.Fatal("KillAll left a group behind")
	}
	wd.Close(5 * time.Second)
	select {
	case <-wd.done:
	default:
		t.Fatal("the watchdog did not exit after Close")
	}
}

func TestOnDemandWatchdogStartsWithTheFirstGroupOnly(t *testing.T) {
	var pids []int
	od := StartWatchdogOnDemand(watchdogCmd, os.Stderr, func(pid int, err error) {
		if err != nil {
			t.Error(err)
		}
		pids = append(pids, pid)
	}, nil)
	defer od.Close(5 * time.Second)
	Unregister(12345) // an unregistration starts nothing
	if od.Started() != nil || len(pids) != 0 {
		t.Fatalf("a watchdog started before any group: %v", pids)
	}
	first := startGroup(t, false)
	Register(first)
	wd := od.Started()
	if wd == nil || len(pids) != 1 || pids[0] != wd.Pid() || wd.Pid() <= 0 {
		t.Fatalf("after the first group: watchdog %v, started told %v", wd, pids)
	}
	second := startGroup(t, false)
	Register(second)
	if od.Started() != wd || len(pids) != 1 {
		t.Fatalf("a second group started another watchdog: %v", pids)
	}
	// The watchdog knows both: ended without KillAll, it kills them.
	od.Close(5 * time.Second)
	select {
	case <-wd.done:
	default:
		t.Fatal("the watchdog did not exit after Close")
	}
	if Alive(first) || Alive(second) {
		t.Fatal("the watchdog left a registered group alive")
	}
	Unregister(first)
	Unregister(second)
	third := startGroup(t, false)
	Register(third) // after Close: no watchdog again
	defer KillAll(time.Second)
	if len(pids) != 1 {
		t.Fatalf("a watchdog started after Close: %v", pids)
	}
}

func TestWatchdogIgnoresTheSignalsMeantForTheServer(t *testing.T) {
	wd, err := StartWatchdog(watchdogCmd(), os.Stderr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer wd.Close(5 * time.Second)
	pgid := startGroup(t, false)
	Register(pgid)
	defer KillAll(time.Second)
	waitIgnoring(t, wd.Pid(), 5*time.Second) // a fixed sleep lost the race under -race on a loaded machine
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		if err := syscall.Kill(wd.Pid(), sig); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-wd.done:
		t.Fatal("the watchdog died of a signal meant for the server")
	case <-time.After(200 * time.Millisecond):
	}
	if !Alive(pgid) {
		t.Fatal("the group was killed while the server lives")
	}
}

// waitIgnoring waits until process pid ignores SIGHUP, SIGINT and SIGTERM
// (its SigIgn mask in /proc), i.e. until RunWatchdog's signal.Ignore ran.
func waitIgnoring(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	const want = 1<<(syscall.SIGHUP-1) | 1<<(syscall.SIGINT-1) | 1<<(syscall.SIGTERM-1)
	deadline := time.Now().Add(within)
	for {
		status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			t.Skip("no /proc: ", err)
		}
		for _, line := range strings.Split(string(status), "\n") {
			if hex, ok := strings.CutPrefix(line, "SigIgn:"); ok {
				if mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64); err == nil && mask&want == want {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watchdog did not ignore SIGHUP, SIGINT and SIGTERM within %v", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func BenchmarkRegister(b *testing.B) {
	wd, err := StartWatchdog(watchdogCmd(), os.Stderr, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer wd.Close(5 * time.Second)
	for i := 0; i < b.N; i++ {
		Register(1_000_000 + i%1000)
		Unregister(1_000_000 + i%1000)
	}
}
