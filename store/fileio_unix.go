//go:build unix

package store

import (
	"errors"
	"os"
	"syscall"
)

// The file store's own open, rename and directory sync. os.OpenFile tries
// to register every descriptor with the network poller, which a regular
// file or a directory refuses: four fcntl(2) and an epoll_ctl(2) wasted per
// open (five of a churn cycle's eight opens). os.Rename stats the target
// first. Here each is the one system call it needs (os.NewFile adds one
// fcntl).

// openFile is os.OpenFile for regular files.
func openFile(path string, flag int, perm uint32) (*os.File, error) {
	for {
		fd, err := syscall.Open(path, flag|syscall.O_CLOEXEC, perm)
		if err == nil {
			return os.NewFile(uintptr(fd), path), nil
		}
		if !errors.Is(err, syscall.EINTR) {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
	}
}

// renameFile is os.Rename without its stat of newpath: rename(2) itself
// refuses to replace a non-empty directory, and callers that replace a
// file mean to.
func renameFile(oldpath, newpath string) error {
	if err := syscall.Rename(oldpath, newpath); err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}

// syncDir makes renames and creations in dir durable.
func syncDir(dir string) error {
	var (
		fd  int
		err error
	)
	for {
		fd, err = syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	for {
		err = syscall.Fsync(fd)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if cerr := syscall.Close(fd); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: "sync", Path: dir, Err: err}
	}
	return nil
}
