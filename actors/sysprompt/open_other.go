//go:build !unix

package sysprompt

import (
	"errors"
	"os"
)

// openRegular opens path for reading if it is a regular file.
func openRegular(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, errors.New("cannot be opened")
	}
	return f, nil
}
