//go:build unix

package httpsse

import "syscall"

// fileLimit is the soft RLIMIT_NOFILE (0 when unknown).
func fileLimit() uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	return lim.Cur
}
