package sandbox

import "sync"

// workspaces are the roots of every open jail in the process: a package
// root an MCP server's files are found in is not granted when it is or
// holds another session's workspace (Request.Others).
var workspaces = &liveRoots{byJail: map[*Jail][]string{}}

type liveRoots struct {
	mu     sync.Mutex
	byJail map[*Jail][]string
}

func (l *liveRoots) set(j *Jail, roots []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byJail[j] = append([]string(nil), roots...)
}

func (l *liveRoots) drop(j *Jail) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.byJail, j)
}

// others are the roots of every jail but j.
func (l *liveRoots) others(j *Jail) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for o, roots := range l.byJail {
		if o != j {
			out = append(out, roots...)
		}
	}
	return out
}
