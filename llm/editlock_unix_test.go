//go:build unix

package llm

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// editsEach is how many keys and defaults each of the two processes adds.
const editsEach = 60

// addEdits adds editsEach credentials and session defaults named after who
// to home, alternating between the two files.
func addEdits(home, who string) error {
	for i := range editsEach {
		key := who + "-" + strconv.Itoa(i)
		if err := SaveCredential(home, key, "sk-"+key); err != nil {
			return err
		}
		if err := SaveSessionDefault(home, "", key, "v-"+key); err != nil {
			return err
		}
	}
	return nil
}

// TestEditsOfTwoProcessesAreAllKept runs the test binary a second time as
// another process editing the same home at the same moment as this one:
// every key and default both added is there at the end, none lost to the
// other's read-modify-write.
func TestEditsOfTwoProcessesAreAllKept(t *testing.T) {
	if home := os.Getenv("LLM_EDITS_CHILD_HOME"); home != "" {
		// The child: wait for the parent's go, then edit.
		if _, err := io.ReadFull(os.Stdin, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		if err := addEdits(home, "child"); err != nil {
			t.Fatal(err)
		}
		return
	}
	home := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run", "^TestEditsOfTwoProcessesAreAllKept$", "-test.count=1")
	child.Env = append(os.Environ(), "LLM_EDITS_CHILD_HOME="+home)
	var out bytes.Buffer
	child.Stdout, child.Stderr = &out, &out
	start, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := start.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	parentErr := addEdits(home, "parent")
	if err := child.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out.Bytes())
	}
	if parentErr != nil {
		t.Fatal(parentErr)
	}

	creds, warn, err := readCredentials(filepath.Join(home, CredentialsFile))
	if err != nil || warn != "" {
		t.Fatalf("credentials: %q %v", warn, err)
	}
	defaults := SessionDefaults(home, "")
	lost := 0
	for _, who := range []string{"parent", "child"} {
		for i := range editsEach {
			key := who + "-" + strconv.Itoa(i)
			if creds[key].value != "sk-"+key {
				lost++
				t.Errorf("credential %s lost", key)
			}
			if defaults[key] != "v-"+key {
				lost++
				t.Errorf("default %s lost", key)
			}
		}
	}
	if len(creds) != 2*editsEach || len(defaults) != 2*editsEach {
		t.Errorf("%d credentials and %d defaults, want %d each", len(creds), len(defaults), 2*editsEach)
	}
	if lost > 0 {
		t.Fatalf("%d of %d edits lost", lost, 4*editsEach)
	}
	for _, name := range []string{CredentialsFile, CredentialsFile + lockSuffix, SettingsFile, SettingsFile + lockSuffix} {
		fi, err := os.Stat(filepath.Join(home, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", name, fi, err)
		}
	}
	entries, _ := os.ReadDir(home)
	if len(entries) != 4 {
		t.Errorf("temporary files left: %v", entries)
	}
}
