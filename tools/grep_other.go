//go:build !unix

package tools

import (
	"io"
	"os"
)

// readAllInto reads a whole file into *buf (grown as needed). Files larger
// than maxBytes, and unreadable ones, are skipped.
func readAllInto(abs string, buf *[]byte, maxBytes int64) ([]byte, bool) {
	f, err := os.Open(abs)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil || int64(len(b)) > maxBytes {
		return nil, false
	}
	return b, true
}
