//go:build !unix

package store

import (
	"os"
	"runtime"
)

func openFile(path string, flag int, perm uint32) (*os.File, error) {
	return os.OpenFile(path, flag, os.FileMode(perm))
}

func renameFile(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// syncDir makes renames and creations in dir durable. Windows cannot fsync
// a directory; there it is a no-op.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
