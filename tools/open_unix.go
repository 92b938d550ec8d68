//go:build unix

package tools

import "syscall"

// openNoFollow makes an open fail on a final symlink: a resolved path has
// none, so one there now was swapped in after the check.
const openNoFollow = syscall.O_NOFOLLOW

// openNonBlock keeps an open from waiting on a FIFO swapped in for a file.
const openNonBlock = syscall.O_NONBLOCK
