package proc

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// The process clock counts what stat's ticks count, finer: read after
// the ticks, it is at least their sum and not a tick more than it plus
// the time between the two reads.
func TestProcessCPUIsStatsSumInNanoseconds(t *testing.T) {
	for end := time.Now().Add(60 * time.Millisecond); time.Now().Before(end); {
	}
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc")
	}
	ticks, _, err := cpuFromStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	cpu, ok := processCPU(os.Getpid())
	if !ok {
		t.Fatal("no process CPU clock for this process")
	}
	if cpu < ticks || cpu > ticks+50*time.Millisecond {
		t.Fatalf("clock %v, stat %v", cpu, ticks)
	}
	if cpu%(10*time.Millisecond) == 0 {
		t.Fatalf("clock %v is in ticks", cpu)
	}
	if self, ok := processCPU(0); !ok || self < cpu {
		t.Fatalf("pid 0: %v %v", self, ok)
	}

	// Another process (a child, as the benchmark's server is).
	cmd := exec.Command("sleep", "1")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// A child just started may not have run yet since its exec: 0 ns is
	// a reading.
	child, ok := processCPU(cmd.Process.Pid)
	if !ok || child < 0 || child > time.Second {
		t.Fatalf("child: %v %v", child, ok)
	}
	u, err := Read(cmd.Process.Pid)
	if err != nil || u.CPU < child {
		t.Fatalf("Read: %v %v (clock before it %v)", u.CPU, err, child)
	}
}
