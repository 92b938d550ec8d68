package mcp

import (
	"os"
	"path/filepath"
	"strings"
)

// ownDirs are the directories a sandboxed stdio server reads besides the
// session's: the command's directory and its symlink target's (an npm
// .bin link), the node_modules tree the target lies in (its
// dependencies), and the directory of each argument that names an
// existing file (`node /opt/srv/index.js`, `sh -c '…' /path/server`).
func ownDirs(path string, args []string) []string {
	var out []string
	add := func(file string) {
		out = append(out, filepath.Dir(file))
		real, err := filepath.EvalSymlinks(file)
		if err != nil {
			return
		}
		out = append(out, filepath.Dir(real))
		const nm = string(filepath.Separator) + "node_modules" + string(filepath.Separator)
		if i := strings.Index(real, nm); i >= 0 {
			out = append(out, real[:i+len(nm)-1])
		}
	}
	add(path)
	for _, a := range args {
		if filepath.IsAbs(a) {
			if fi, err := os.Stat(a); err == nil && !fi.IsDir() {
				add(a)
			}
		}
	}
	return out
}
