//go:build unix

package acpserver

import (
	"syscall"

	"github.com/rs/zerolog"
)

// checkFileLimit logs the descriptor limit the server runs with. Go raises
// the soft RLIMIT_NOFILE to the hard limit at start (and gives child
// processes the original back); where that did not happen, do it here.
func checkFileLimit(log zerolog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	if lim.Cur+1 < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			lim = raised
		}
	}
	log.Debug().Uint64("soft", lim.Cur).Uint64("hard", lim.Max).Msg("descriptor limit")
}
