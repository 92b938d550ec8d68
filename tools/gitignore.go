package tools

import (
	"bufio"
	"bytes"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// This file implements the common subset of gitignore(5) used by grep:
// blank lines and # comments, trailing-space trimming (unless escaped),
// `!` negation, `/`-suffixed directory-only patterns, patterns anchored to
// their .gitignore's directory when they contain a `/` (a leading `/` is
// dropped), basename matching at any depth otherwise, `*`, `?`, `[…]`,
// `**` (leading `**/`, trailing `/**`, inner `/**/`), backslash escapes,
// the last matching line of a file deciding, and deeper .gitignore files
// taking precedence over shallower ones. Like git, a file inside an ignored
// directory cannot be re-included (the walk does not enter the directory).
// Not read: .git/info/exclude and the global core.excludesFile.

type ignoreRule struct {
	pattern  string // doublestar pattern
	negate   bool
	dirOnly  bool
	anchored bool // match the path relative to the .gitignore's dir, not the basename
	// fast paths for unanchored patterns
	literal string // exact basename
	suffix  string // "*.ext" → ".ext"
	// trailing "/**": must not match the directory itself
	notSelf string
}

// ignoreNode is one .gitignore in the chain from the root down to a
// directory; base is its directory relative to the walk root ("" = root).
type ignoreNode struct {
	parent *ignoreNode
	base   string
	rules  []ignoreRule
}

func parseGitignore(data []byte) []ignoreRule {
	var rules []ignoreRule
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		if r, ok := parseIgnoreLine(sc.Text()); ok {
			rules = append(rules, r)
		}
	}
	return rules
}

func parseIgnoreLine(line string) (ignoreRule, bool) {
	var r ignoreRule
	line = strings.TrimSuffix(line, "\r")
	if line == "" || line[0] == '#' {
		return r, false
	}
	// Trailing spaces are ignored unless escaped with a backslash.
	for strings.HasSuffix(line, " ") && !strings.HasSuffix(line, "\\ ") {
		line = line[:len(line)-1]
	}
	if line[0] == '!' {
		r.negate = true
		line = line[1:]
	}
	if strings.HasSuffix(line, "/") {
		r.dirOnly = true
		line = strings.TrimRight(line, "/")
	}
	if line == "" {
		return r, false
	}
	if strings.Contains(line, "/") {
		r.anchored = true
		line = strings.TrimPrefix(line, "/")
		if line == "" {
			return r, false
		}
	}
	// gitignore has no {a,b} alternation: make braces literal for doublestar.
	var b strings.Builder
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c == '\\' && i+1 < len(line) {
			b.WriteByte(c)
			b.WriteByte(line[i+1])
			i++
			continue
		}
		if c == '{' || c == '}' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	r.pattern = b.String()
	if !doublestar.ValidatePattern(r.pattern) {
		return r, false
	}
	if strings.HasSuffix(r.pattern, "/**") {
		r.notSelf = strings.TrimSuffix(r.pattern, "/**")
	}
	if !r.anchored {
		switch {
		case !strings.ContainsAny(r.pattern, `*?[\`):
			r.literal = r.pattern
		case strings.HasPrefix(r.pattern, "*") && !strings.ContainsAny(r.pattern[1:], `*?[\`):
			r.suffix = r.pattern[1:]
		}
	}
	return r, true
}

func (r *ignoreRule) match(rel, name string, isDir bool) bool {
	if r.dirOnly && !isDir {
		return false
	}
	if !r.anchored {
		switch {
		case r.literal != "":
			return name == r.literal
		case r.suffix != "":
			return strings.HasSuffix(name, r.suffix)
		}
		return doublestar.MatchUnvalidated(r.pattern, name)
	}
	if !doublestar.MatchUnvalidated(r.pattern, rel) {
		return false
	}
	return r.notSelf == "" || !doublestar.MatchUnvalidated(r.notSelf, rel)
}

// ignored reports whether rel (slash-separated, relative to the walk root)
// is ignored. The deepest .gitignore with a matching rule decides; within
// one file the last matching rule does.
func (n *ignoreNode) ignored(rel string, isDir bool) bool {
	name := path.Base(rel)
	for ; n != nil; n = n.parent {
		sub := rel
		if n.base != "" {
			if !strings.HasPrefix(rel, n.base+"/") {
				continue
			}
			sub = rel[len(n.base)+1:]
		}
		for i := len(n.rules) - 1; i >= 0; i-- {
			if n.rules[i].match(sub, name, isDir) {
				return !n.rules[i].negate
			}
		}
	}
	return false
}

// withGitignore returns the chain extended by dir's .gitignore, if any.
func (n *ignoreNode) withGitignore(dirAbs, dirRel string) *ignoreNode {
	data, err := os.ReadFile(filepath.Join(dirAbs, ".gitignore"))
	if err != nil {
		return n
	}
	rules := parseGitignore(data)
	if len(rules) == 0 {
		return n
	}
	return &ignoreNode{parent: n, base: dirRel, rules: rules}
}

// ignoreChainFor builds the .gitignore chain that applies above root: when
// root lies inside a git work tree, the .gitignore files from the top of
// the work tree down to root's parent (root's own is read by the walk).
// It returns the chain and root's slash path relative to the top of the
// work tree ("" when root is the top or not in a work tree), which is the
// base of every path the chain is asked about.
func ignoreChainFor(root string) (*ignoreNode, string) {
	top := ""
	for dir := root; ; {
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
			top = dir
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if top == "" || top == root {
		return nil, ""
	}
	relRoot, err := filepath.Rel(top, root)
	if err != nil || relRoot == "." || strings.HasPrefix(relRoot, "..") {
		return nil, ""
	}
	relRoot = filepath.ToSlash(relRoot)
	chain := (*ignoreNode)(nil).withGitignore(top, "")
	segs := strings.Split(relRoot, "/")
	cur := ""
	for _, seg := range segs[:len(segs)-1] {
		if cur == "" {
			cur = seg
		} else {
			cur += "/" + seg
		}
		chain = chain.withGitignore(filepath.Join(top, filepath.FromSlash(cur)), cur)
	}
	return chain, relRoot
}
