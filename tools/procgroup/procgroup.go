// Package procgroup owns the process groups the server starts for tools
// (bash commands, later MCP servers): killing a group, telling whether it
// still runs, and making sure none outlives the server however it dies.
//
// Every group is registered while it may run. A watchdog process (the same
// binary re-executed, see StartWatchdog and RunWatchdog; the server starts
// it at the first registration, StartWatchdogOnDemand) holds the read end
// of a pipe from the server and learns every registration; when the server
// dies, even by SIGKILL, the kernel closes the pipe, the watchdog reads EOF
// and kills the groups still registered. A process that leaves its group
// (setsid, setpgid) escapes; that is the documented limit.
package procgroup

import (
	"fmt"
	"io"
	"sync"
	"time"
)

var reg = struct {
	sync.Mutex
	groups map[int]struct{}
	// pipe is the write end to the watchdog (nil when none runs).
	pipe io.Writer
	// broken: a write to the watchdog failed; reported once.
	broken func(error)
	// onDemand starts the watchdog at the first registration.
	onDemand *OnDemand
}{groups: map[int]struct{}{}}

// Register records process group pgid as started by the server: the
// watchdog kills it if the server dies before Unregister. Call it right
// after the group leader started.
func Register(pgid int) { record('+', pgid) }

// Unregister forgets pgid. Call it once the group has ended (no member
// left), so the watchdog never signals a reused id.
func Unregister(pgid int) { record('-', pgid) }

func record(op byte, pgid int) {
	if pgid <= 1 {
		return
	}
	reg.Lock()
	defer reg.Unlock()
	if op == '+' {
		reg.groups[pgid] = struct{}{}
	} else {
		delete(reg.groups, pgid)
	}
	if reg.pipe == nil {
		if op == '+' && reg.onDemand != nil && !reg.onDemand.tried {
			reg.onDemand.startLocked() // it is told every group, this one included
		}
		return
	}
	if _, err := fmt.Fprintf(reg.pipe, "%c%d\n", op, pgid); err != nil {
		reg.pipe = nil
		if reg.broken != nil {
			reg.broken(err)
		}
	}
}

// Registered returns the groups registered now.
func Registered() []int {
	reg.Lock()
	defer reg.Unlock()
	out := make([]int, 0, len(reg.groups))
	for g := range reg.groups {
		out = append(out, g)
	}
	return out
}

// KillAll ends every registered group (SIGTERM, then SIGKILL after grace)
// and returns when none is left: the last step of an orderly shutdown, for
// groups whose tool did not get to kill them itself.
func KillAll(grace time.Duration) int {
	groups := Registered()
	killGroups(groups, grace)
	for _, g := range groups {
		Unregister(g)
	}
	return len(groups)
}
