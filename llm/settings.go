package llm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// settings is what settings.yml says about providers. Unknown keys are
// ignored: the file is shared with other parts of iac-code.
//
//	activeProvider: anthropic
//	providers:
//	  anthropic:
//	    model: claude-sonnet-5-5
//	    apiBase: https://api.anthropic.com
//	    models: [claude-opus-5-5]   # extra choices for the model option
//	    contextWindow: 200000
//	    maxTokens: 16000
//	    thinkingBudget: 8000
type settings struct {
	activeProvider setting
	providers      map[string]providerSettings
}

type providerSettings struct {
	model, apiBase                           setting
	models                                   []string
	contextWindow, maxTokens, thinkingBudget intSetting
}

// setting is a string value and where it was read ("file:line").
type setting struct {
	value string
	where string
	set   bool
}

type intSetting struct {
	value int
	where string
	set   bool
}

type credential struct {
	value string
	where string
}

// fileError names the file and line of a problem.
func fileError(path string, line int, format string, args ...any) error {
	if line > 0 {
		return fmt.Errorf("%s:%d: %s", path, line, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...))
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlParserProblems are the parser's (not the scanner's) error messages:
// yaml v3 reports their line 0-based, the scanner's 1-based.
var yamlParserProblems = []string{
	"did not find expected ',' or ']'", "did not find expected ',' or '}'", "did not find expected '-' indicator",
	"did not find expected <", "did not find expected key", "did not find expected node content",
	"found duplicate %", "found incompatible YAML document", "found undefined tag handle",
}

// parseYAML reads path into a node tree; nil when the file does not exist
// or is empty.
func parseYAML(path string) (*yaml.Node, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read: %w", path, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := err.Error()
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			for _, p := range yamlParserProblems {
				if strings.HasPrefix(m[2], p) {
					line++
					break
				}
			}
			return nil, fileError(path, line, "malformed YAML: %s", m[2])
		}
		return nil, fileError(path, 0, "malformed YAML: %s", strings.TrimPrefix(msg, "yaml: "))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fileError(path, root.Line, "want a mapping of keys to values, got %s", kindName(root))
	}
	return root, nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

// pairs walks a mapping node, rejecting duplicate and non-scalar keys.
func pairs(path string, m *yaml.Node, fn func(key string, k, v *yaml.Node) error) error {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return fileError(path, k.Line, "keys must be plain names")
		}
		if line, dup := seen[k.Value]; dup {
			return fileError(path, k.Line, "%q is already set on line %d", k.Value, line)
		}
		seen[k.Value] = k.Line
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		if err := fn(k.Value, k, v); err != nil {
			return err
		}
	}
	return nil
}

func stringValue(path, name string, v *yaml.Node) (setting, error) {
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		return setting{}, fileError(path, v.Line, "%s: want a string, got %s", name, kindName(v))
	}
	return setting{value: strings.TrimSpace(v.Value), where: fmt.Sprintf("%s:%d", path, v.Line), set: true}, nil
}

func intValue(path, name string, v *yaml.Node) (intSetting, error) {
	if v.Kind == yaml.ScalarNode {
		if i, err := strconv.Atoi(strings.ReplaceAll(v.Value, "_", "")); err == nil && i >= 0 {
			return intSetting{value: i, where: fmt.Sprintf("%s:%d", path, v.Line), set: true}, nil
		}
	}
	return intSetting{}, fileError(path, v.Line, "%s: want a whole number of tokens, got %s", name, kindName(v))
}

func readSettings(path string) (settings, error) {
	st := settings{providers: map[string]providerSettings{}}
	root, err := parseYAML(path)
	if root == nil || err != nil {
		return st, err
	}
	err = pairs(path, root, func(key string, _, v *yaml.Node) error {
		switch key {
		case "activeProvider":
			s, err := stringValue(path, key, v)
			st.activeProvider = s
			return err
		case "providers":
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
				return nil
			}
			if v.Kind != yaml.MappingNode {
				return fileError(path, v.Line, "providers: want a mapping of provider keys, got %s", kindName(v))
			}
			return pairs(path, v, func(name string, _, pv *yaml.Node) error {
				ps, err := readProviderSettings(path, name, pv)
				st.providers[name] = ps
				return err
			})
		}
		return nil
	})
	return st, err
}

func readProviderSettings(path, name string, v *yaml.Node) (providerSettings, error) {
	var ps providerSettings
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return ps, nil
	}
	if v.Kind != yaml.MappingNode {
		return ps, fileError(path, v.Line, "providers.%s: want a mapping (model, apiBase, …), got %s", name, kindName(v))
	}
	err := pairs(path, v, func(key string, _, fv *yaml.Node) error {
		field := "providers." + name + "." + key
		var err error
		switch key {
		case "model":
			ps.model, err = stringValue(path, field, fv)
		case "apiBase":
			ps.apiBase, err = stringValue(path, field, fv)
		case "models":
			if fv.Kind != yaml.SequenceNode {
				return fileError(path, fv.Line, "%s: want a list of model names, got %s", field, kindName(fv))
			}
			for _, m := range fv.Content {
				s, err := stringValue(path, field, m)
				if err != nil {
					return err
				}
				ps.models = append(ps.models, s.value)
			}
		case "contextWindow":
			ps.contextWindow, err = intValue(path, field, fv)
		case "maxTokens":
			ps.maxTokens, err = intValue(path, field, fv)
		case "thinkingBudget":
			ps.thinkingBudget, err = intValue(path, field, fv)
		}
		return err
	})
	return ps, err
}

// readCredentials reads "<provider key>: <api key>" lines. warn is set when
// other users may read the file.
func readCredentials(path string) (creds map[string]credential, warn string, err error) {
	creds = map[string]credential{}
	root, err := parseYAML(path)
	if root == nil || err != nil {
		return creds, "", err
	}
	err = pairs(path, root, func(key string, _, v *yaml.Node) error {
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			return nil // "anthropic:" with no key yet
		}
		if v.Kind != yaml.ScalarNode {
			return fileError(path, v.Line, "%s: want the API key as a string, got %s", key, kindName(v))
		}
		creds[key] = credential{value: strings.TrimSpace(v.Value), where: fmt.Sprintf("%s:%d", path, v.Line)}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	if info, statErr := os.Stat(path); statErr == nil && info.Mode().Perm()&0o077 != 0 {
		warn = fmt.Sprintf("%s can be read by other users (mode %v); chmod 600 it", path, info.Mode().Perm())
	}
	return creds, warn, nil
}
