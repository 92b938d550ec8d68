package actors

// The session's one definition of idle (issue 28). It had four, one per
// decision: evicting it, releasing its lease after SessionRelease,
// releasing a file store's lock between turns, starting the next queued
// prompt; session_quiet_test.go has what each answers, and what changed
// when they were merged.

// turnFree: a prompt may start a turn now (the next queued one).
func (s *session) turnFree() bool {
	return s.phase.serving() && !s.turn.running() && s.mcp.held == nil
}

// quiet is the session's one definition of idle: it serves (live, or
// asked to retire), no turn runs, no prompt is queued or waits for the MCP
// servers, no start waits for them, and no message waits for the store
// handle. An idle session may be evicted (with one client) and let go of
// its lease.
func (s *session) quiet() bool {
	return s.turnFree() && s.queue.empty() && !s.mcpWaiting() && !s.lease.acquiring() && len(s.stash) == 0
}

// evictable: the idle timer may ask the connection to retire the session:
// idle, live (not asked already), with one client (several would each
// have to agree).
func (s *session) evictable() bool {
	return s.phase.kind == phaseLive && s.quiet() && s.clients.only() != nil
}

// holdsStore: the session holds its store handle (and lease).
func (s *session) holdsStore() bool {
	return s.store != nil && (s.lease.state == leaseHeld || s.lease.state == leaseFenced)
}
