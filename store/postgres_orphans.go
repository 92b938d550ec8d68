package store

import "context"

// OrphanedTurns lists, oldest turn first and at most limit, the sessions
// whose running turn nobody carries on: a turn is recorded (TurnRecorder)
// and nobody holds the lease — released by a pod that paused the turn for
// a hand-off that did not happen, or held by an incarnation declared dead.
// A lease that merely expired is not listed: its holder may be alive and
// only late renewing it (a pod under load), and taking its running turns
// would cut them; a load takes such a session over (and resumes its turn),
// and a holder cut off for good is declared dead. A pod of the
// cluster adopts them (transport/cluster); which pod does is decided by the
// lease acquisition, so several pods may list the same sessions at once.
// One query; no index: it reads the sessions table (see docs/cluster.md).
func (s *PGStore) OrphanedTurns(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT s.id FROM iac_sessions s
		WHERE s.turn_started_at IS NOT NULL AND (s.lease_owner IS NULL OR `+ownerDead+`)
		ORDER BY s.turn_started_at, s.id LIMIT $1`, limit)
	if err != nil {
		return nil, s.dbErr("list orphaned turns", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, s.dbErr("list orphaned turns", err)
		}
		ids = append(ids, id)
	}
	return ids, s.dbErr("list orphaned turns", rows.Err())
}
