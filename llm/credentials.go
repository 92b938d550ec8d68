package llm

import (
	"fmt"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"
)

// Writing the files under IAC_CODE_HOME: `iac-code login` (a key), ACP
// logout (forget it), and the defaults a user's choices leave in
// settings.yml. Every write replaces the file atomically (a temporary file
// in the same directory, renamed over it), so a reader never sees half a
// file and a crash leaves the old one; comments and other entries are kept.

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

// EditYAML reads the mapping in path (empty when the file is missing),
// lets edit change it and, when edit reports a change, writes it back
// atomically with mode perm. A malformed file is an error and is left
// as it is.
func EditYAML(path string, perm os.FileMode, edit func(root *yaml.Node) bool) error {
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
	return os.Rename(tmp, path)
}

// setScalar sets key to the string value in the mapping m.
func setScalar(m *yaml.Node, key, value string) {
	v := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
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

// SessionDefaults are the option values a user chose last (settings.yml
// sessionDefaults), for their new sessions. A missing or malformed file
// gives none: the server reported a malformed one at start.
func SessionDefaults(home string) map[string]string {
	out := map[string]string{}
	if home == "" {
		return out
	}
	root, err := parseYAML(filepath.Join(home, SettingsFile))
	if err != nil || root == nil {
		return out
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "sessionDefaults" || root.Content[i+1].Kind != yaml.MappingNode {
			continue
		}
		m := root.Content[i+1]
		for j := 0; j+1 < len(m.Content); j += 2 {
			if m.Content[j+1].Kind == yaml.ScalarNode {
				out[m.Content[j].Value] = m.Content[j+1].Value
			}
		}
	}
	return out
}

// SaveSessionDefault keeps value as the default of option id for new
// sessions (settings.yml sessionDefaults.<id>).
func SaveSessionDefault(home, id, value string) error {
	if home == "" {
		return nil
	}
	return EditYAML(filepath.Join(home, SettingsFile), 0o600, func(root *yaml.Node) bool {
		var m *yaml.Node
		for i := 0; i+1 < len(root.Content); i += 2 {
			if root.Content[i].Value == "sessionDefaults" && root.Content[i+1].Kind == yaml.MappingNode {
				m = root.Content[i+1]
			}
		}
		if m == nil {
			deleteKey(root, "sessionDefaults")
			m = &yaml.Node{Kind: yaml.MappingNode}
			root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "sessionDefaults"}, m)
		}
		setScalar(m, id, value)
		return true
	})
}
