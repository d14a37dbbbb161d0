// Package migrations holds the SQL schema of each storage engine, embedded
// in the binary, and the migrator that applies it.
//
// Files are named NNNN_title.sql under postgres/ and sqlite/; a version is
// the number NNNN. Applied versions are recorded in schema_migrations, so
// applying twice is a no-op. Ranges: 0001–0099 tenants, 0100–0199 billing,
// 0200–0299 routing (quality data, state), 0300+ anything else.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// Migration is one schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// List returns the migrations of an engine ("postgres" or "sqlite") in
// version order.
func List(engine string) ([]Migration, error) {
	if engine != "postgres" && engine != "sqlite" {
		return nil, fmt.Errorf("unknown engine %q", engine)
	}
	entries, err := fs.ReadDir(files, engine)
	if err != nil {
		return nil, fmt.Errorf("read %s migrations: %w", engine, err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s/%s: name must start with NNNN_", engine, name)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migration version %d used twice: %s and %s", v, prev, name)
		}
		seen[v] = name
		body, err := fs.ReadFile(files, path.Join(engine, name))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// execer is the little a migrator needs from a database.
type execer interface {
	exec(ctx context.Context, sql string, args ...any) error
	applied(ctx context.Context) (map[int]bool, error)
	// inTx runs fn in one transaction.
	inTx(ctx context.Context, fn func(e execer) error) error
}

// ApplyPostgres applies every pending migration to a Postgres database.
// Concurrent callers are serialised with an advisory lock. It returns the
// versions it applied.
func ApplyPostgres(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	const lockKey = 7465_2611 // arbitrary, stable
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return nil, fmt.Errorf("lock migrations: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockKey) //nolint:errcheck
	return apply(ctx, "postgres", pgExec{pool: pool}, "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
}

// ApplySQLite applies every pending migration to a SQLite database.
func ApplySQLite(ctx context.Context, db *sql.DB) ([]int, error) {
	return apply(ctx, "sqlite", sqlExec{db: db}, "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')))")
}

func apply(ctx context.Context, engine string, db execer, createTable string) ([]int, error) {
	all, err := List(engine)
	if err != nil {
		return nil, err
	}
	if err := db.exec(ctx, createTable); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	done, err := db.applied(ctx)
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	var applied []int
	for _, m := range all {
		if done[m.Version] {
			continue
		}
		err := db.inTx(ctx, func(tx execer) error {
			if err := tx.exec(ctx, m.SQL); err != nil {
				return err
			}
			return tx.exec(ctx, rebind(engine, "INSERT INTO schema_migrations (version, name) VALUES (?, ?)"), m.Version, m.Name)
		})
		if err != nil {
			return applied, fmt.Errorf("migration %s: %w", m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

func rebind(engine, q string) string {
	if engine != "postgres" {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// PendingPostgres returns the versions not yet applied to a Postgres
// database (all of them when schema_migrations does not exist yet is an
// error: the database was never migrated).
func PendingPostgres(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	return pending(ctx, "postgres", pgExec{pool: pool})
}

// PendingSQLite returns the versions not yet applied to a SQLite database.
func PendingSQLite(ctx context.Context, db *sql.DB) ([]int, error) {
	return pending(ctx, "sqlite", sqlExec{db: db})
}

func pending(ctx context.Context, engine string, db execer) ([]int, error) {
	all, err := List(engine)
	if err != nil {
		return nil, err
	}
	done, err := db.applied(ctx)
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	var out []int
	for _, m := range all {
		if !done[m.Version] {
			out = append(out, m.Version)
		}
	}
	return out, nil
}
