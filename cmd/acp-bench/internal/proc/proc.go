// Package proc reads the resident memory and CPU time of a process from
// /proc (Linux) and samples them over a run.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// userHZ is the unit of utime/stime in /proc/<pid>/stat; the kernel fixes
// it at 100 for user space (USER_HZ) on every Linux architecture Go runs on.
const userHZ = 100

// Usage is one reading of a process.
type Usage struct {
	// RSS is VmRSS in bytes.
	RSS int64
	// PeakRSS is VmHWM in bytes: the highest RSS since the process started.
	PeakRSS int64
	// AnonRSS is RssAnon in bytes: the resident memory that is the
	// process's own (heap, stacks), without the mapped binary's pages.
	AnonRSS int64
	// FileRSS is RssFile in bytes: the mapped files' pages (the binary's,
	// mostly) that are in this process's page tables.
	FileRSS int64
	// CPU is user + system time, in ns from the process CPU clock on
	// Linux (stat's 10 ms ticks elsewhere); SysCPU the system (kernel)
	// part, in ticks of stat.
	CPU    time.Duration
	SysCPU time.Duration
	// Threads is the number of OS threads.
	Threads int
	// ReadCalls and WriteCalls count the read and write system calls
	// (syscr, syscw of /proc/<pid>/io; 0 when unreadable).
	ReadCalls, WriteCalls int64
}

// Read reads pid's usage (pid 0: this process).
func Read(pid int) (Usage, error) {
	dir := "/proc/self"
	if pid > 0 {
		dir = "/proc/" + strconv.Itoa(pid)
	}
	var u Usage
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return u, err
	}
	if u.RSS, err = statusField(status, "VmRSS:"); err != nil {
		return u, err
	}
	u.RSS *= 1024
	if hwm, err := statusField(status, "VmHWM:"); err == nil {
		u.PeakRSS = hwm * 1024
	}
	if anon, err := statusField(status, "RssAnon:"); err == nil {
		u.AnonRSS = anon * 1024
	}
	if file, err := statusField(status, "RssFile:"); err == nil {
		u.FileRSS = file * 1024
	}
	if th, err := statusField(status, "Threads:"); err == nil {
		u.Threads = int(th)
	}
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return u, err
	}
	u.CPU, u.SysCPU, err = cpuFromStat(stat)
	if cpu, ok := processCPU(pid); ok && err == nil {
		u.CPU = cpu // the same sum, in ns instead of 10 ms ticks
	}
	if io, ierr := os.ReadFile(dir + "/io"); ierr == nil {
		u.ReadCalls, _ = ioField(io, "syscr:")
		u.WriteCalls, _ = ioField(io, "syscw:")
	}
	return u, err
}

// ioField parses a "name: 123" line of /proc/<pid>/io.
func ioField(io []byte, name string) (int64, error) { return statusField(io, name) }

// statusField parses "Name:   123 kB" lines of /proc/<pid>/status.
func statusField(status []byte, name string) (int64, error) {
	i := bytes.Index(status, []byte("\n"+name))
	if i < 0 {
		if !bytes.HasPrefix(status, []byte(name)) {
			return 0, fmt.Errorf("proc: no %s in status", name)
		}
	} else {
		status = status[i+1:]
	}
	line := status[len(name):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	fields := bytes.Fields(line)
	if len(fields) == 0 {
		return 0, fmt.Errorf("proc: empty %s", name)
	}
	return strconv.ParseInt(string(fields[0]), 10, 64)
}

// cpuFromStat sums utime and stime (fields 14 and 15) of /proc/<pid>/stat,
// and returns stime too. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from the last ')'.
func cpuFromStat(stat []byte) (total, sys time.Duration, err error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, errors.New("proc: malformed stat")
	}
	f := bytes.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime is field 14 → f[11], stime f[12].
	if len(f) < 13 {
		return 0, 0, errors.New("proc: short stat")
	}
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, errors.New("proc: bad utime/stime")
	}
	return time.Duration(ut+st) * time.Second / userHZ, time.Duration(st) * time.Second / userHZ, nil
}

// Sample is a reading at an offset from the sampler's start.
type Sample struct {
	T time.Duration `json:"t"`
	Usage
}

// Sampler reads a process at a fixed interval until stopped.
type Sampler struct {
	pid   int
	start time.Time
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	list  []Sample
	peak  int64
	anon  int64
	// pss is the highest PSS of the process tree (shared pages counted
	// once), read with every sample when tree is set.
	pss  int64
	tree bool
	max  int
}

// StartSampler samples pid every interval (keeping at most maxSamples; when
// full it keeps every second sample and doubles the interval, so any run
// length fits).
func StartSampler(pid int, interval time.Duration, maxSamples int) *Sampler {
	return startSampler(pid, interval, maxSamples, false)
}

// StartTreeSampler is StartSampler that also follows the PSS of pid's
// process tree (PeakPSS).
func StartTreeSampler(pid int, interval time.Duration, maxSamples int) *Sampler {
	return startSampler(pid, interval, maxSamples, true)
}

func startSampler(pid int, interval time.Duration, maxSamples int, tree bool) *Sampler {
	s := &Sampler{pid: pid, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{}), max: max(maxSamples, 16), tree: tree}
	s.take()
	go s.loop(interval)
	return s
}

func (s *Sampler) loop(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if s.take() {
				interval *= 2
				t.Reset(interval)
			}
		}
	}
}

// take records one sample; it reports that the list was thinned.
func (s *Sampler) take() bool {
	u, err := Read(s.pid)
	if err != nil {
		return false
	}
	var t Tree
	if s.tree {
		t, _ = ReadTree(s.pid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pss = max(s.pss, t.PSS)
	s.peak = max(s.peak, u.RSS)
	s.anon = max(s.anon, u.AnonRSS)
	s.list = append(s.list, Sample{T: time.Since(s.start), Usage: u})
	if len(s.list) < s.max {
		return false
	}
	j := 0
	for i := 0; i < len(s.list); i += 2 {
		s.list[j] = s.list[i]
		j++
	}
	s.list = s.list[:j]
	return true
}

// Stop takes a last sample and stops the sampler.
func (s *Sampler) Stop() {
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	<-s.done
	s.take()
}

// Samples returns a copy of the samples so far.
func (s *Sampler) Samples() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sample(nil), s.list...)
}

// Peak is the highest RSS seen.
func (s *Sampler) Peak() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// PeakPSS is the highest PSS of the process tree seen (0 unless started
// with StartTreeSampler).
func (s *Sampler) PeakPSS() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pss
}

// PeakAnon is the highest anonymous RSS seen.
func (s *Sampler) PeakAnon() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.anon
}

// RaiseNoFile lifts this process's open-file soft limit to its hard limit
// (children inherit it) and returns the new soft limit.
func RaiseNoFile() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return rl.Cur, err
		}
	}
	return rl.Cur, nil
}

// System is the machine-wide CPU time from /proc/stat.
type System struct {
	// Busy is the CPU time spent on anything but idle and iowait, over
	// all CPUs.
	Busy time.Duration
	// Total includes idle time.
	Total time.Duration
}

// ReadSystem reads the aggregate "cpu" line of /proc/stat.
func ReadSystem() (System, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return System{}, err
	}
	return parseSystem(b)
}

func parseSystem(b []byte) (System, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[0]) != "cpu" {
		return System{}, errors.New("proc: malformed /proc/stat")
	}
	var s System
	for i, x := range f[1:] {
		v, err := strconv.ParseInt(string(x), 10, 64)
		if err != nil {
			return System{}, err
		}
		d := time.Duration(v) * time.Second / userHZ
		// Fields: user nice system idle iowait irq softirq steal guest guest_nice;
		// guest time is already counted in user.
		if i >= 8 {
			continue
		}
		s.Total += d
		if i != 3 && i != 4 {
			s.Busy += d
		}
	}
	return s, nil
}

// Tree is the memory of a process and all its descendants (the server and
// its watchdog, bash and MCP children), from /proc/<pid>/smaps_rollup.
// PSS counts a page shared by n processes as 1/n in each, so the binary's
// pages mapped by the server and its watchdog are counted once in the sum,
// where summed RSS counts them twice.
type Tree struct {
	Procs   int
	RSS     int64 // bytes, summed over the tree
	PSS     int64 // bytes, summed over the tree
	AnonPSS int64 // Pss_Anon, bytes
}

// ReadTree reads pid's tree (pid 0: this process's).
func ReadTree(pid int) (Tree, error) {
	if pid <= 0 {
		pid = os.Getpid()
	}
	var t Tree
	for _, p := range descendants(pid) {
		rollup, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/smaps_rollup")
		if err != nil {
			if p == pid {
				return t, err
			}
			continue // a child that just exited
		}
		rss, err1 := statusField(rollup, "Rss:")
		pss, err2 := statusField(rollup, "Pss:")
		if err1 != nil || err2 != nil {
			continue
		}
		anon, _ := statusField(rollup, "Pss_Anon:")
		t.Procs++
		t.RSS += rss * 1024
		t.PSS += pss * 1024
		t.AnonPSS += anon * 1024
	}
	return t, nil
}

// descendants is pid and every process below it, from the children files of
// its threads.
func descendants(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(out[i]) + "/task")
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(out[i]) + "/task/" + task.Name() + "/children")
			if err != nil {
				continue
			}
			for _, f := range bytes.Fields(b) {
				if c, err := strconv.Atoi(string(f)); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// Mem is one process's memory in bytes: RssAnon, RssFile and RssShmem of
// /proc/<pid>/status (a binary on tmpfs is RssShmem, not RssFile) and Rss,
// Pss, Pss_Anon and Pss_File of smaps_rollup.
type Mem struct {
	Pid                                  int
	Cmd                                  string // argv[1] ("acp", "internal-watchdog"), else argv[0]
	AnonRSS, FileRSS, ShmemRSS           int64
	RSS, PSS, AnonPSS, FilePSS, ShmemPSS int64
}

// ReadTreeMem reads Mem for pid and each of its descendants; a child that
// exits meanwhile is left out.
func ReadTreeMem(pid int) ([]Mem, error) {
	var out []Mem
	for _, p := range descendants(pid) {
		dir := "/proc/" + strconv.Itoa(p)
		status, err1 := os.ReadFile(dir + "/status")
		rollup, err2 := os.ReadFile(dir + "/smaps_rollup")
		if err1 != nil || err2 != nil {
			if p == pid {
				return nil, errors.Join(err1, err2)
			}
			continue
		}
		m := Mem{Pid: p}
		if cmd, err := os.ReadFile(dir + "/cmdline"); err == nil {
			args := bytes.Split(bytes.TrimRight(cmd, "\x00"), []byte{0})
			m.Cmd = string(args[0])
			if len(args) > 1 {
				m.Cmd = string(args[1])
			}
		}
		kib := func(b []byte, name string) int64 { v, _ := statusField(b, name); return v * 1024 }
		m.AnonRSS, m.FileRSS, m.ShmemRSS = kib(status, "RssAnon:"), kib(status, "RssFile:"), kib(status, "RssShmem:")
		m.RSS, m.PSS = kib(rollup, "Rss:"), kib(rollup, "Pss:")
		m.AnonPSS, m.FilePSS, m.ShmemPSS = kib(rollup, "Pss_Anon:"), kib(rollup, "Pss_File:"), kib(rollup, "Pss_Shmem:")
		out = append(out, m)
	}
	return out, nil
}
