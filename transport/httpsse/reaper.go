package httpsse

import "time"

// reaper closes connections idle for longer than IdleTimeout, unused ones
// after UnusedTimeout, and cancels the turns of connections whose stream
// has been gone for longer than ReplayMaxAge.
func (e *Edge) reaper() {
	every := min(e.cfg.IdleTimeout/4, e.cfg.UnusedTimeout/4, e.cfg.ReplayMaxAge/2, 30*time.Second)
	t := time.NewTicker(max(every, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-e.quit:
			return
		case now := <-t.C:
			e.reapUnused(now.Add(-e.cfg.UnusedTimeout).UnixNano())
			cutoff := now.Add(-e.cfg.IdleTimeout).UnixNano()
			// Turns outlive their client for DetachedTurnMax (detach.go);
			// without it, nobody could receive what they produce once the
			// replay window is over.
			keep, why := e.cfg.ReplayMaxAge, "stream gone for longer than the replay window: cancelling running turns"
			if e.cfg.detachEnabled() {
				keep, why = e.cfg.DetachedTurnMax, "stream gone for longer than IAC_CODE_DETACHED_TURN_MAX: cancelling running turns"
			}
			abandoned := now.Add(-keep).UnixNano()
			detachedCutoff := now.Add(-max(e.cfg.IdleTimeout, keep+e.cfg.CloseTimeout)).UnixNano()
			for _, c := range e.snapshot() {
				if c.idleSince(cutoff, detachedCutoff) {
					go e.closeConn(c, reasonIdle, false, e.cfg.CloseTimeout)
				} else if c.abandoned(abandoned) {
					c.log.Info().Dur("after", keep).Msg(why)
					e.met.abandoned.Inc()
					c.actor.CancelTurns()
				}
			}
		}
	}
}

// addUnusedLocked queues a new connection as unused and returns the oldest
// unused ones beyond MaxUnused, to close. e.mu held.
func (e *Edge) addUnusedLocked(c *conn) []*conn {
	e.unused = append(e.unused, c)
	e.unusedN++
	var evict []*conn
	for e.unusedN > e.cfg.MaxUnused && len(e.unused) > 0 {
		old := e.unused[0]
		e.unused[0] = nil
		e.unused = e.unused[1:]
		if old.settled.CompareAndSwap(false, true) {
			e.unusedN--
			evict = append(evict, old)
		}
	}
	e.compactUnusedLocked()
	return evict
}

// settle marks c used (or closed): it leaves the unused count.
func (e *Edge) settle(c *conn) {
	if c.settled.CompareAndSwap(false, true) {
		e.mu.Lock()
		e.unusedN--
		e.compactUnusedLocked()
		e.mu.Unlock()
	}
}

// compactUnusedLocked drops settled connections from the queue once they
// are most of it, so it stays proportional to the unused ones.
func (e *Edge) compactUnusedLocked() {
	if len(e.unused) < 2*e.unusedN+64 {
		return
	}
	kept := e.unused[:0]
	for _, c := range e.unused {
		if !c.settled.Load() {
			kept = append(kept, c)
		}
	}
	clear(e.unused[len(kept):])
	e.unused = kept
}

// reapUnused closes, oldest first, the unused connections created before
// cutoff (the queue is in creation order).
func (e *Edge) reapUnused(cutoff int64) {
	e.mu.Lock()
	var expired []*conn
	for len(e.unused) > 0 {
		c := e.unused[0]
		if !c.settled.Load() {
			if c.lastActive.Load() >= cutoff || c.initPending() {
				break
			}
			if !c.settled.CompareAndSwap(false, true) {
				continue
			}
			e.unusedN--
			expired = append(expired, c)
		}
		e.unused[0] = nil
		e.unused = e.unused[1:]
	}
	e.mu.Unlock()
	for _, c := range expired {
		go e.closeConn(c, reasonUnused, false, e.cfg.CloseTimeout)
	}
}
