package proc

import (
	"time"

	"golang.org/x/sys/unix"
)

// processCPU reads the CPU time of pid's whole thread group (pid 0: this
// process) from its process CPU clock (clock_gettime of the clock
// clock_getcpuclockid names): the scheduler's runtime in nanoseconds,
// exited threads included. It is the quantity /proc/<pid>/stat's utime +
// stime add up to (the kernel scales the sampled split to it), without
// their 10 ms ticks, which moved a 0.15 s reading by ±7 %.
func processCPU(pid int) (time.Duration, bool) {
	// MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) of the kernel's headers.
	const cpuclockSched = 2
	clock := int32(^uint32(pid)<<3) | cpuclockSched
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
