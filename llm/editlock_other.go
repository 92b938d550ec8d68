//go:build !unix

package llm

import (
	"os"
	"sync"
)

// editsInProcess serialises the edits of this process where there is no
// flock to do it (and to exclude other processes, which it cannot).
var editsInProcess sync.Mutex

// lockEdits does not lock across processes here (no flock); the edits of
// one process are serialised.
func lockEdits(path string, perm os.FileMode) (unlock func(), err error) {
	editsInProcess.Lock()
	return editsInProcess.Unlock, nil
}
