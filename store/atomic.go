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
func writeFileAtomic(dir, name string, data []byte) error {
	var tmp string
	for try := 0; ; try++ {
		tmp = filepath.Join(dir, "."+name+".tmp-"+strconv.FormatUint(rand.Uint64(), 36))
		err := writeNew(tmp, data)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			_ = os.Remove(tmp)
			return err
		}
		if try == 100 {
			return err
		}
	}
	if err := renameFile(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// writeFileSynced creates dir/name (which must not exist) with data, fsynced.
func writeFileSynced(dir, name string, data []byte) error {
	return writeNew(filepath.Join(dir, name), data)
}
