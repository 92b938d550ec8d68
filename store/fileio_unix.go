//go:build unix

package store

import (
	"errors"
	"os"
	"syscall"
)

// The file store's own file operations. os.OpenFile tries to register every
// descriptor with the network poller, which a regular file or a directory
// refuses: four fcntl(2) and an epoll_ctl(2) wasted per open. os.Rename
// stats the target first. Here each is the system call it needs; files
// written once and closed (meta.json, its temp copies) and the lock file
// never become an *os.File (os.NewFile adds an fcntl).

// openFD is open(2) with O_CLOEXEC, retried on EINTR.
func openFD(path string, flag int, perm uint32) (int, error) {
	for {
		fd, err := syscall.Open(path, flag|syscall.O_CLOEXEC, perm)
		if err == nil {
			return fd, nil
		}
		if !errors.Is(err, syscall.EINTR) {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
	}
}

// openFile is os.OpenFile for regular files.
func openFile(path string, flag int, perm uint32) (*os.File, error) {
	fd, err := openFD(path, flag, perm)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// writeNew creates path (which must not exist) with data, fsynced.
func writeNew(path string, data []byte) error {
	fd, err := openFD(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return err
	}
	err = writeAll(fd, data)
	if err == nil {
		err = fsync(fd)
	}
	if cerr := syscall.Close(fd); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

func writeAll(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := syscall.Write(fd, data)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func fsync(fd int) error {
	for {
		if err := syscall.Fsync(fd); !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// renameFile is os.Rename without its stat of newpath: rename(2) itself
// refuses to replace a non-empty directory, and callers that replace a
// file mean to.
func renameFile(oldpath, newpath string) error {
	for {
		err := syscall.Rename(oldpath, newpath)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EINTR) { // retried, as os.Rename does
			return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
		}
	}
}

// syncDir makes renames and creations in dir durable.
func syncDir(dir string) error {
	fd, err := openFD(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	err = fsync(fd)
	if cerr := syscall.Close(fd); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: "sync", Path: dir, Err: err}
	}
	return nil
}

// fileIdent is what a path named when a file was opened (identOf): its
// device and inode.
type fileIdent struct{ dev, ino uint64 }

// identOf is the identity of open file f, by an fstat(2) of it.
func identOf(f *os.File) (fileIdent, error) {
	var st syscall.Stat_t
	sc, err := f.SyscallConn()
	if err != nil {
		return fileIdent{}, err
	}
	if cerr := sc.Control(func(fd uintptr) { err = syscall.Fstat(int(fd), &st) }); cerr != nil {
		return fileIdent{}, cerr
	}
	return fileIdent{dev: uint64(st.Dev), ino: st.Ino}, err
}

// names reports whether path names the file of identity id still (not
// removed, moved away or replaced since): one stat(2), into the stack.
func names(path string, id fileIdent) bool {
	var st syscall.Stat_t
	return syscall.Stat(path, &st) == nil && uint64(st.Dev) == id.dev && st.Ino == id.ino
}
