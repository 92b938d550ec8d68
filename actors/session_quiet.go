package actors

// The four answers the session gives today to "is it idle" (issue 28):
// each of its decisions asks its own question, spelled out here so that a
// table test pins them (session_quiet_test.go) before they are merged.

// evictable: the idle timer may ask the connection to retire the session
// (session.go, idleTick).
func (s *session) evictable() bool {
	return s.clients.only() != nil && s.turn == nil && !s.retiring && !s.failed && !s.mcpWaiting() && s.queue.empty() &&
		s.acq == nil && len(s.held) == 0
}

// idleReleasable: the release timer may let go of the store handle, the
// session being inactive for SessionRelease (releaseIfIdle); holdsStore
// first, else nothing to release.
func (s *session) holdsStore() bool { return !s.released && !s.failed && s.store != nil }

func (s *session) idleReleasable() bool { return s.turn == nil && s.mcp.held == nil }

// releasableBetweenTurns: a file store's lock may go as soon as the
// session received a message and nothing runs (releaseBetweenTurns).
func (s *session) releasableBetweenTurns() bool {
	return s.holdsStore() && !s.closing && s.turn == nil && !s.mcpWaiting() && s.queue.empty()
}

// queueMayStart: the next queued prompt may start (startQueued).
func (s *session) queueMayStart() bool {
	return s.turn == nil && s.mcp.held == nil && !s.closing && len(s.handingOff) == 0
}
