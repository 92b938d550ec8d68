//go:build unix

package tools

import "syscall"

// readAllInto reads a whole file into *buf (grown as needed) with raw
// open/read/close calls: os.Open would add an fcntl and a poller
// registration per file, which dominates a search of many small files.
// Files larger than maxBytes, and unreadable ones, are skipped; so is a
// file replaced by a symlink (or a FIFO) since the walk listed it.
func readAllInto(abs string, buf *[]byte, maxBytes int64) ([]byte, bool) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(abs, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, false
	}
	defer syscall.Close(fd)
	b := (*buf)[:0]
	if cap(b) < 64<<10 {
		b = make([]byte, 0, 64<<10)
	}
	for {
		if len(b) == cap(b) {
			if int64(len(b)) > maxBytes {
				return nil, false
			}
			b = append(b, 0)[:len(b)]
		}
		n, err := syscall.Read(fd, b[len(b):cap(b)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, false
		}
		if n == 0 {
			break
		}
		b = b[:len(b)+n]
	}
	if int64(len(b)) > maxBytes {
		return nil, false
	}
	if cap(b) <= 4<<20 {
		*buf = b
	}
	return b, true
}
