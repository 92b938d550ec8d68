package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// Moved connections (cluster mode, docs/cluster.md): where an HTTP
// connection handed over by a draining pod lives now.

// MoveConnection records that connection connID is served by incarnation
// to from now on. Rows of connections whose incarnation is dead go at the
// same time: those connections are gone.
func (s *PGStore) MoveConnection(ctx context.Context, connID, to string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO iac_moved_connections (conn_id, incarnation) VALUES ($1, $2)
		ON CONFLICT (conn_id) DO UPDATE SET incarnation = EXCLUDED.incarnation, moved_at = now()`, connID, to)
	if err != nil {
		return s.dbErr("record moved connection", err)
	}
	_, err = s.pool.Exec(ctx, `DELETE FROM iac_moved_connections m USING iac_incarnations i
		WHERE m.incarnation = i.id AND i.dead_at IS NOT NULL`)
	if err != nil {
		return s.dbErr("forget connections of dead pods", err)
	}
	return nil
}

// MovedConnection is the incarnation connection connID was moved to, ""
// when it never moved.
func (s *PGStore) MovedConnection(ctx context.Context, connID string) (string, error) {
	var to string
	err := s.pool.QueryRow(ctx, "SELECT incarnation FROM iac_moved_connections WHERE conn_id = $1", connID).Scan(&to)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", s.dbErr("look up moved connection", err)
	}
	return to, nil
}

// ForgetConnection drops the record of a moved connection that closed.
func (s *PGStore) ForgetConnection(ctx context.Context, connID string) error {
	if _, err := s.pool.Exec(ctx, "DELETE FROM iac_moved_connections WHERE conn_id = $1", connID); err != nil {
		return s.dbErr("forget moved connection", err)
	}
	return nil
}
