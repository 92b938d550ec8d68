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

// RunWatchdog returns at once.
func RunWatchdog(io.Reader, time.Duration, zerolog.Logger) int { return 0 }

// Kill and Alive: no process groups.
func Kill(int, time.Duration)         {}
func Alive(int) bool                  { return false }
func killGroups([]int, time.Duration) {}
