package bench

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropFromPageCache asks the kernel to drop path's cached pages that no
// process maps.
func dropFromPageCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
