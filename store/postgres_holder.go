package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Holder is who holds a session's lease now, as HolderReader reads it.
type Holder struct {
	// Owner is the incarnation whose lease is live; "" when the lease is
	// free (released, expired, or its owner declared dead).
	Owner string
	// Turn: a running turn is recorded in the session (TurnRecorder). With
	// a free lease it is the turn of a holder that died or paused it, which
	// another process may adopt.
	Turn bool
}

// HolderReader reads who holds a session without taking its lease: a
// client following a session from a pod that let it go asks it until
// another pod took the session (actors, session_follow.go).
type HolderReader interface {
	// Holder: ErrNotFound for a session that does not exist.
	Holder(ctx context.Context, id string) (Holder, error)
}

// Holder implements HolderReader.
func (s *PGStore) Holder(ctx context.Context, id string) (Holder, error) {
	if !ValidID(id) {
		return Holder{}, fmt.Errorf("%w: invalid id %q", ErrNotFound, id)
	}
	var (
		owner *string
		h     Holder
	)
	err := s.pool.QueryRow(ctx, `SELECT CASE WHEN `+leaseFree+` THEN NULL ELSE s.lease_owner END,
		s.turn_started_at IS NOT NULL FROM iac_sessions s WHERE s.id = $1`, id).Scan(&owner, &h.Turn)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Holder{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	case err != nil:
		return Holder{}, s.dbErr("read the holder of "+id, err)
	}
	if owner != nil {
		h.Owner = *owner
	}
	return h, nil
}
