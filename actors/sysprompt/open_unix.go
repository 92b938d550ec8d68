//go:build unix

package sysprompt

import (
	"errors"
	"os"
	"syscall"
)

// openRegular opens path for reading if it is a regular file. O_NONBLOCK:
// a FIFO planted as AGENTS.md must not hang the open; O_NOFOLLOW: the path
// was resolved already, a symlink now is a swap.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, errors.New("cannot be opened")
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, errors.New("not a regular file")
	}
	return f, nil
}
