//go:build !unix

package procgroup

import (
	"errors"
	"io"
	"os/exec"
	"time"

	"github.com/rs/zerolog"
)

// WatchdogGrace: see the unix build.
const WatchdogGrace = time.Second

// Watchdog: none without process groups.
type Watchdog struct{}

// StartWatchdog is not supported here.
func StartWatchdog(*exec.Cmd, io.Writer, func(error)) (*Watchdog, error) {
	return nil, errors.New("process group watchdog: not supported on this platform")
}

func (*Watchdog) Pid() int            { return 0 }
func (*Watchdog) Close(time.Duration) {}

// OnDemand: none without process groups.
type OnDemand struct{ tried bool }

// StartWatchdogOnDemand tells started at once that there is none.
func StartWatchdogOnDemand(_ func() *exec.Cmd, _ io.Writer, started func(int, error), _ func(error)) *OnDemand {
	if started != nil {
		started(0, errors.New("process group watchdog: not supported on this platform"))
	}
	return nil
}

func (*OnDemand) startLocked()        {}
func (*OnDemand) Started() *Watchdog  { return nil }
func (*OnDemand) Close(time.Duration) {}

// RunWatchdog returns at once.
func RunWatchdog(io.Reader, time.Duration, zerolog.Logger) int { return 0 }

// Kill and Alive: no process groups.
func Kill(int, time.Duration)         {}
func Alive(int) bool                  { return false }
func killGroups([]int, time.Duration) {}
