//go:build !unix

package llm

import "os"

// lockEdits does not lock across processes here (no flock); edits within
// one process are serialised by their callers where it matters
// (settingsEdits).
func lockEdits(path string, perm os.FileMode) (unlock func(), err error) {
	return func() {}, nil
}
