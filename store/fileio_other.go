//go:build !unix

package store

import (
	"os"
	"runtime"
)

func openFile(path string, flag int, perm uint32) (*os.File, error) {
	return os.OpenFile(path, flag, os.FileMode(perm))
}

// writeNew creates path (which must not exist) with data, fsynced.
func writeNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
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

// fileIdent is what a path named when a file was opened (identOf).
type fileIdent struct{ info os.FileInfo }

// identOf is the identity of open file f.
func identOf(f *os.File) (fileIdent, error) {
	info, err := f.Stat()
	return fileIdent{info}, err
}

// names reports whether path names the file of identity id still (not
// removed, moved away or replaced since).
func names(path string, id fileIdent) bool {
	info, err := os.Stat(path)
	return err == nil && id.info != nil && os.SameFile(info, id.info)
}
