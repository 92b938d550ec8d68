package llm

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"go.yaml.in/yaml/v3"
)

// Writing the files under IAC_CODE_HOME: `iac-code login` (a key), ACP
// logout (forget it), and the defaults a user's choices leave in
// settings.yml. Every write replaces the file atomically (a temporary file
// in the same directory, fsynced, renamed over it, the directory fsynced),
// so a reader never sees half a file and a crash leaves the old one or the
// new one; comments and other entries are kept. Each read-modify-write
// holds an exclusive lock on a file beside the edited one (on unix:
// .credentials.yml.lock, settings.yml.lock), so two processes on one home
// (two servers, or `iac-code login` while a server saves a default or logs
// out) never lose one of two simultaneous edits.

// SaveCredential sets provider's API key in home/.credentials.yml (mode
// 0600, created with home when missing).
func SaveCredential(home, provider, key string) error {
	if home == "" {
		return fmt.Errorf("no IAC_CODE_HOME to keep the key in")
	}
	return EditYAML(filepath.Join(home, CredentialsFile), 0o600, func(root *yaml.Node) bool {
		setScalar(root, provider, key)
		return true
	})
}

// ForgetCredential removes provider's entry from home/.credentials.yml and
// reports whether there was one.
func ForgetCredential(home, provider string) (bool, error) {
	if home == "" {
		return false, nil
	}
	found := false
	err := EditYAML(filepath.Join(home, CredentialsFile), 0o600, func(root *yaml.Node) bool {
		found = deleteKey(root, provider)
		return found
	})
	return found, err
}

// SetActiveProvider writes activeProvider to home/settings.yml.
func SetActiveProvider(home, provider string) error {
	return EditYAML(filepath.Join(home, SettingsFile), 0o600, func(root *yaml.Node) bool {
		setScalar(root, "activeProvider", provider)
		return true
	})
}

// lockSuffix names the lock file of an edited file (see lockEdits).
const lockSuffix = ".lock"

// EditYAML reads the mapping in path (empty when the file is missing),
// lets edit change it and, when edit reports a change, writes it back
// atomically with mode perm, all under path's edit lock (lockEdits). A
// malformed file is an error and is left as it is.
func EditYAML(path string, perm os.FileMode, edit func(root *yaml.Node) bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	unlock, err := lockEdits(path, perm)
	if err != nil {
		return err
	}
	defer unlock()
	root, err := parseYAML(path)
	if err != nil {
		return err
	}
	if root == nil {
		root = &yaml.Node{Kind: yaml.MappingNode}
	}
	if !edit(root) {
		return nil
	}
	data, err := yaml.Marshal(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return writeAtomic(path, data, perm)
}

// writeAtomic replaces path with data. The temporary file has mode perm
// from its creation (never readable by others, even for a moment).
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename there is nothing to remove
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable. Windows cannot fsync a directory;
// there it is a no-op.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// setScalar sets key to the string value in the mapping m and reports
// whether that changed m (false: key had that very string already).
func setScalar(m *yaml.Node, key, value string) bool {
	v := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			old := m.Content[i+1]
			if old.Kind == yaml.ScalarNode && old.Tag == "!!str" && old.Value == value {
				return false
			}
			m.Content[i+1] = v
			return true
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
	return true
}

// deleteKey removes every entry of key from the mapping m.
func deleteKey(m *yaml.Node, key string) bool {
	found := false
	out := m.Content[:0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			found = true
			continue
		}
		out = append(out, m.Content[i], m.Content[i+1])
	}
	m.Content = out
	return found
}

// The defaults a user's choices leave: settings.yml sessionDefaults for
// the home's own user (principal "": stdio, the shared HTTP token), and
// principalDefaults.<principal> for each named principal of a multi-user
// server, so one user's choice never changes another's new sessions. A
// named principal's own value wins; an option it never chose falls back
// to sessionDefaults (what the home's owner chose, the old shared place).
// Edits of the file are serialised (EditYAML's lockEdits): two users
// choosing at once both keep their value.

// SessionDefaults are the option values principal chose last, for their
// new sessions ("" is the home's own user). A missing or malformed file
// gives none: the server reported a malformed one at start.
func SessionDefaults(home, principal string) map[string]string {
	out := map[string]string{}
	if home == "" {
		return out
	}
	root, err := parseYAML(filepath.Join(home, SettingsFile))
	if err != nil || root == nil {
		return out
	}
	readScalars(mappingOf(root, "sessionDefaults"), out)
	if principal != "" {
		readScalars(mappingOf(mappingOf(root, "principalDefaults"), principal), out)
	}
	return out
}

// mappingOf is the last mapping value of key in the mapping m (nil when
// there is none, or m is nil).
func mappingOf(m *yaml.Node, key string) *yaml.Node {
	var out *yaml.Node
	for i := 0; m != nil && i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key && m.Content[i+1].Kind == yaml.MappingNode {
			out = m.Content[i+1]
		}
	}
	return out
}

func readScalars(m *yaml.Node, into map[string]string) {
	for j := 0; m != nil && j+1 < len(m.Content); j += 2 {
		if m.Content[j+1].Kind == yaml.ScalarNode {
			into[m.Content[j].Value] = m.Content[j+1].Value
		}
	}
}

// ensureMapping is the mapping value of key in m, created (replacing a
// value of another kind) when missing.
func ensureMapping(m *yaml.Node, key string) *yaml.Node {
	if v := mappingOf(m, key); v != nil {
		return v
	}
	deleteKey(m, key)
	v := &yaml.Node{Kind: yaml.MappingNode}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
	return v
}

// SaveSessionDefault keeps value as principal's default of option id for
// new sessions: settings.yml sessionDefaults.<id> for "" (the home's own
// user), principalDefaults.<principal>.<id> for another.
func SaveSessionDefault(home, principal, id, value string) error {
	if home == "" {
		return nil
	}
	return EditYAML(filepath.Join(home, SettingsFile), 0o600, func(root *yaml.Node) bool {
		var m *yaml.Node
		if principal == "" {
			m = ensureMapping(root, "sessionDefaults")
		} else {
			m = ensureMapping(ensureMapping(root, "principalDefaults"), principal)
		}
		// The same choice again (most of them) is a read, not a write.
		return setScalar(m, id, value)
	})
}
