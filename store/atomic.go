package store

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

const (
	dirPerm  = 0o700
	filePerm = 0o600
)

// writeFileAtomic replaces dir/name with data: temp file in the same
// directory, fsync, rename, fsync of the directory. A crash leaves either the
// old or the new content (and at worst a stray temp file, never read).
func writeFileAtomic(dir, name string, data []byte) (err error) {
	f, tmp, err := createTemp(dir, "."+name+".tmp-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = renameFile(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

// createTemp is os.CreateTemp (a new file, mode 0600, under a random name
// starting with prefix) through openFile.
func createTemp(dir, prefix string) (*os.File, string, error) {
	for try := 0; ; try++ {
		path := filepath.Join(dir, prefix+strconv.FormatUint(rand.Uint64(), 36))
		f, err := openFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, filePerm)
		if err == nil || !errors.Is(err, fs.ErrExist) || try == 100 {
			return f, path, err
		}
	}
}

// writeFileSynced creates dir/name (which must not exist) with data, fsynced.
func writeFileSynced(dir, name string, data []byte) error {
	f, err := openFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
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
