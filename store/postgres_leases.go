package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// leaseFree is true for a session row whose lease can be taken: released,
// expired, or held by an incarnation declared dead.
const leaseFree = `(s.lease_owner IS NULL OR s.lease_expires <= now() OR ` + ownerDead + `)`

// ownerDead is true for a session row whose lease holder was declared dead.
const ownerDead = `EXISTS (SELECT 1 FROM iac_incarnations i WHERE i.id = s.lease_owner AND i.dead_at IS NOT NULL)`

// noTurn clears the running turn of a session row (TurnRecorder): with
// the release of an idle session (Release, Close). A pause, an acquisition
// and the release of every lease of a process (ReleaseLeases) keep it for
// the next holder (TurnKeeper).
const noTurn = `turn_started_at = NULL, turn_prompt_request = NULL, turn_conn = NULL, turn_first_seq = NULL,
	turn_id = NULL, turn_epoch = NULL, turn_mcp_servers = NULL`

// renewing adds h to (or removes it from) the handles whose leases the
// renewal loop extends.
func (s *PGStore) renewing(h *pgSession, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.open[h] = struct{}{}
	} else {
		delete(s.open, h)
	}
}

// releaseLease gives up the lease of id if this store still holds it at
// epoch. Best effort: an unreleased lease expires after the TTL.
// keepTurn: the recorded turn stays for the next holder (Pause).
func (s *PGStore) releaseLease(id string, epoch int64, keepTurn bool) error {
	ctx, cancel := opCtx()
	defer cancel()
	clear := ", " + noTurn
	if keepTurn {
		clear = ""
	}
	_, err := s.pool.Exec(ctx, `UPDATE iac_sessions SET lease_owner = NULL, lease_expires = NULL`+clear+`
		WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3`, id, s.self, epoch)
	return s.dbErr("release lease of "+id, err)
}

// renewLoop extends the leases of open handles every renew interval until
// Close.
func (s *PGStore) renewLoop() {
	defer close(s.stopped)
	defer func() {
		if r := recover(); r != nil {
			s.log.Error().Interface("panic", r).Msg("lease renewal crashed; leases will expire")
		}
	}()
	t := time.NewTicker(s.renew)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.renewOnce()
		}
	}
}

// renewOnce extends, in one statement, the leases this process holds for
// its open handles, and heartbeats its incarnation when registered. A handle
// whose lease was taken over is logged once; its writes fail with ErrFenced.
func (s *PGStore) renewOnce() {
	s.mu.Lock()
	ids := make([]string, 0, len(s.open))
	handles := make([]*pgSession, 0, len(s.open))
	for h := range s.open {
		ids = append(ids, h.id)
		handles = append(handles, h)
	}
	registered := s.registered
	s.mu.Unlock()
	if len(ids) == 0 && !registered {
		return
	}
	// The epochs each handle holds now (h.mu is never taken under s.mu).
	epochs := make([]int64, len(handles))
	for i, h := range handles {
		h.mu.Lock()
		epochs[i] = h.epoch
		h.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(pgOpTimeout, s.ttl))
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(`UPDATE iac_sessions SET lease_expires = now() + $3::interval
		WHERE lease_owner = $1 AND id = ANY($2) RETURNING id, lease_epoch`, s.self, ids, s.ttl)
	if registered {
		b.Queue("UPDATE iac_incarnations SET heartbeat_at = now() WHERE id = $1", s.self)
	}
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		s.log.Warn().Err(s.dbErr("renew leases", err)).Int("sessions", len(ids)).Msg("lease renewal failed")
		return
	}
	held := make(map[string]int64, len(ids))
	for rows.Next() {
		var (
			id    string
			epoch int64
		)
		if err := rows.Scan(&id, &epoch); err == nil {
			held[id] = epoch
		}
	}
	if err := rows.Err(); err != nil {
		s.log.Warn().Err(s.dbErr("renew leases", err)).Int("sessions", len(ids)).Msg("lease renewal failed")
		return
	}
	for i, h := range handles {
		if epoch, ok := held[h.id]; ok && epoch == epochs[i] {
			continue
		}
		h.mu.Lock()
		// Released, closed or acquired again meanwhile: not this lease.
		current := !h.closed && !h.released && h.epoch == epochs[i]
		report := current && !h.lost
		h.lost = h.lost || current
		h.mu.Unlock()
		if report {
			s.log.Warn().Str("session", h.id).Int64("epoch", epochs[i]).Msg("session lease lost to another owner; its writes are refused")
		}
	}
}

// ReleaseLeases releases every lease incarnation id holds (the SIGTERM path:
// its sessions can be opened elsewhere at once) and returns how many. The
// epochs stay, so the old holder's handles are fenced; so do the turns
// recorded as running, for the next holders to resume (TurnKeeper).
func (s *PGStore) ReleaseLeases(ctx context.Context, id string) (int64, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE iac_sessions SET lease_owner = NULL, lease_expires = NULL
		WHERE lease_owner = $1`, id)
	if err != nil {
		return 0, s.dbErr("release leases", err)
	}
	return tag.RowsAffected(), nil
}
