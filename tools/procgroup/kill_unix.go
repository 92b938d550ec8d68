//go:build unix

package procgroup

import (
	"errors"
	"syscall"
	"time"
)

// Kill ends process group pgid: SIGTERM (with SIGCONT for stopped
// members), then SIGKILL when members are still alive after grace. It
// returns once no live member is left (or after a last short wait).
func Kill(pgid int, grace time.Duration) { killGroups([]int{pgid}, grace) }

// killGroups is Kill for several groups at once, sharing the grace.
func killGroups(pgids []int, grace time.Duration) {
	var live []int
	for _, g := range pgids {
		if g > 1 {
			_ = syscall.Kill(-g, syscall.SIGTERM)
			_ = syscall.Kill(-g, syscall.SIGCONT)
			live = append(live, g)
		}
	}
	if live = waitGone(live, grace); len(live) == 0 {
		return
	}
	for _, g := range live {
		_ = syscall.Kill(-g, syscall.SIGKILL)
	}
	waitGone(live, time.Second)
}

// waitGone polls until every group is gone or d has passed, and returns
// those still alive.
func waitGone(pgids []int, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		live := pgids[:0]
		for _, g := range pgids {
			if Alive(g) {
				live = append(live, g)
			}
		}
		pgids = live
		if len(pgids) == 0 || time.Now().After(deadline) {
			return pgids
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Alive reports whether process group pgid has a member that is not a
// zombie (killed orphans may stay zombies until their new parent reaps
// them; they run nothing).
func Alive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	return hasLiveMember(pgid)
}
