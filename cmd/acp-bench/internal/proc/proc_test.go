package proc

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestCPUFromStat(t *testing.T) {
	// Field 2 with spaces and a parenthesis must not shift the fields.
	stat := []byte("1234 (my (odd) prog) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 1000 10 18446744073709551615\n")
	cpu, sys, err := cpuFromStat(stat)
	if err != nil || cpu != 3*time.Second || sys != 500*time.Millisecond {
		t.Fatalf("cpu %v sys %v err %v", cpu, sys, err)
	}
	if _, _, err := cpuFromStat([]byte("1 (x) S 1")); err == nil {
		t.Fatal("short stat accepted")
	}
}

func TestStatusField(t *testing.T) {
	status := []byte("Name:\tx\nVmPeak:\t  2000 kB\nVmRSS:\t    1536 kB\nThreads:\t7\n")
	if v, err := statusField(status, "VmRSS:"); err != nil || v != 1536 {
		t.Fatalf("%d %v", v, err)
	}
	if v, err := statusField(status, "Threads:"); err != nil || v != 7 {
		t.Fatalf("%d %v", v, err)
	}
	if _, err := statusField(status, "VmSwap:"); err == nil {
		t.Fatal("missing field found")
	}
}

func TestReadSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc")
	}
	u, err := Read(os.Getpid())
	if err != nil || u.RSS <= 0 || u.Threads <= 0 || u.PeakRSS < u.RSS || u.AnonRSS <= 0 || u.AnonRSS > u.RSS {
		t.Fatalf("%+v %v", u, err)
	}
	s := StartSampler(0, time.Millisecond, 16)
	time.Sleep(30 * time.Millisecond)
	s.Stop()
	s.Stop() // idempotent
	if n := len(s.Samples()); n < 2 || n > 16 || s.Peak() <= 0 {
		t.Fatalf("%d samples, peak %d", n, s.Peak())
	}
}

func TestParseSystem(t *testing.T) {
	s, err := parseSystem([]byte("cpu  100 5 50 800 20 1 2 3 7 0\ncpu0 1 2 3 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Busy != 1610*time.Millisecond || s.Total != 9810*time.Millisecond {
		t.Fatalf("%+v", s)
	}
	if _, err := parseSystem([]byte("intr 1 2")); err == nil {
		t.Fatal("malformed accepted")
	}
}

// A child is one of the tree's processes, and the tree's PSS (shared pages
// split between their users) is at most its summed RSS.
func TestReadTreeCountsChildrenAndSharesPages(t *testing.T) {
	if _, err := os.Stat("/proc/self/smaps_rollup"); err != nil {
		t.Skip("no smaps_rollup")
	}
	alone, err := ReadTree(0)
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	with, err := ReadTree(0)
	if err != nil {
		t.Fatal(err)
	}
	if with.Procs != alone.Procs+1 {
		t.Fatalf("tree of %d processes with a child, %d without", with.Procs, alone.Procs)
	}
	if with.PSS <= 0 || with.PSS > with.RSS || with.AnonPSS > with.PSS {
		t.Fatalf("pss %d rss %d anon pss %d", with.PSS, with.RSS, with.AnonPSS)
	}
}

// The test binary's own text: the code running now is in its page tables,
// and no section has more pages present than it spans.
func TestExecutablePagesOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/pagemap"); err != nil {
		t.Skip("no pagemap")
	}
	secs, err := ExecutablePages(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range secs {
		if s.Present < 0 || s.Present > s.Size+2*4096 {
			t.Fatalf("%s: %d bytes present of %d", s.Name, s.Present, s.Size)
		}
		if s.Name == ".text" {
			found = s.Present > 0
		}
	}
	if !found {
		t.Fatalf("no .text pages present: %+v", secs)
	}
}
