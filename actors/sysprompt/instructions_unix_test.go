//go:build unix

package sysprompt

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestInstructionsFIFOAndDirectoryAreSkipped(t *testing.T) {
	root, nested := repo(t)
	if err := syscall.Mkfifo(filepath.Join(root, FileName), 0o644); err != nil {
		t.Skip("no mkfifo:", err)
	}
	if err := os.Mkdir(filepath.Join(nested, FileName), 0o755); err != nil {
		t.Fatal(err)
	}
	done := make(chan *Instructions, 1)
	go func() { in, _ := NewProject(nested, "").Refresh(); done <- in }()
	select {
	case in := <-done:
		if len(in.Files) != 0 || len(in.Skipped) != 2 {
			t.Errorf("instructions = %+v", in)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a FIFO named AGENTS.md hung the loader")
	}
}
