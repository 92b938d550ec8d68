package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
)

// The schema of the shared store: numbered files NNNN_name.sql, applied in
// order, each once, each in its own transaction. A migration is never edited
// after release; a change is a new file.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in order; versions must run
// 1, 2, 3… without gaps or duplicates.
func migrations() ([]migration, error) {
	ents, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range ents {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("migration %s: want NNNN_name.sql", name)
		}
		data, err := migrationFiles.ReadFile(path.Join("migrations", name))
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(data)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: want version %d", m.name, i+1)
		}
	}
	return out, nil
}

// SchemaVersion is the schema version this binary migrates the shared store to.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// migrate brings the schema (in the connection's current schema) up to date.
// Concurrent starts are serialised by a session-level advisory lock keyed by
// the schema name: the first applies, the others then find nothing to do. The
// lock goes with the connection if the process dies mid-way, and each
// migration commits with its version row, so a crash never leaves a half
// applied one. It returns the schema version found in the database after it
// ran (higher than SchemaVersion when a newer binary migrated first).
func migrate(ctx context.Context, pool *pgxpool.Pool, log zerolog.Logger) (int, error) {
	ms, err := migrations()
	if err != nil {
		return 0, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	const key = `hashtext('iac-code schema migrations ' || coalesce(current_schema(), ''))`
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock("+key+")"); err != nil {
		return 0, fmt.Errorf("migration lock: %w", err)
	}
	defer func() {
		// Not ctx: the lock must go even when ctx has expired.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, "SELECT pg_advisory_unlock("+key+")"); err != nil {
			conn.Conn().Close(uctx) // closing the connection releases the lock
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS iac_schema_migrations (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, fmt.Errorf("migrations table: %w", err)
	}
	applied := map[int]bool{}
	rows, err := conn.Query(ctx, "SELECT version FROM iac_schema_migrations")
	if err != nil {
		return 0, err
	}
	latest := 0
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return 0, err
		}
		applied[v] = true
		latest = max(latest, v)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return 0, err
		}
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			_ = tx.Rollback(ctx)
			return 0, fmt.Errorf("migration %s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO iac_schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
			_ = tx.Rollback(ctx)
			return 0, fmt.Errorf("migration %s: %w", m.name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, fmt.Errorf("migration %s: %w", m.name, err)
		}
		log.Info().Str("migration", m.name).Msg("applied schema migration")
		latest = max(latest, m.version)
	}
	return latest, nil
}
