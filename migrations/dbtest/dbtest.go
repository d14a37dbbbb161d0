// Package dbtest gives tests fresh, migrated databases on both engines.
//
// Postgres comes from DATABASE_URL: every call creates a new schema, points
// the pool's search_path at it, applies every migration and drops the schema
// (CASCADE) when the test ends. Without DATABASE_URL the local default
// server is used; when no server answers the Postgres half is skipped with
// a "needs postgres: …" reason, or fails when CI is set (internal/testenv).
// SQLite is a file in t.TempDir().
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/routebalance/routebalance/internal/testenv"
	"github.com/routebalance/routebalance/migrations"
	"github.com/routebalance/routebalance/tenants/sqlstore"
)

// DefaultDatabaseURL is the local test server scripts/test.sh uses when
// DATABASE_URL is unset.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Postgres returns a pool on a fresh migrated schema of DATABASE_URL (or
// DefaultDatabaseURL). Without a server it skips the test (testenv.Need).
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = DefaultDatabaseURL
	}
	return PoolAt(t, url, Schema(t, url))
}

// Schema creates a fresh schema on the Postgres server at url, applies
// every migration in it and drops it (CASCADE) when the test ends; it
// returns the schema's name. Tests that reach the server another way (a
// proxy that can cut it off) open their pool on it with PoolAt.
func Schema(t testing.TB, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b [6]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand does not fail
	schema := "rbtest_" + hex.EncodeToString(b[:])

	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		testenv.Need(t, "postgres", "no server answers (set DATABASE_URL or start one at 127.0.0.1:5432): "+testenv.Cause(err))
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	pool := PoolAt(t, url, schema)
	if _, err := migrations.ApplyPostgres(ctx, pool); err != nil {
		t.Fatalf("migrate %s: %v", schema, err)
	}
	return schema
}

// PoolAt opens a pool on url with search_path set to schema; it is closed
// when the test ends (before the schema is dropped).
func PoolAt(t testing.TB, url, schema string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close) // LIFO: runs before Schema's drop
	return pool
}

// SQLite returns a fresh migrated SQLite database in a temporary directory.
func SQLite(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sqlstore.OpenSQLite(filepath.Join(t.TempDir(), "test.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := migrations.ApplySQLite(context.Background(), db); err != nil {
		t.Fatalf("migrate sqlite: %v", err)
	}
	return db
}

// Engine is one storage engine under test.
type Engine struct {
	Name   string
	Pool   *pgxpool.Pool // set for postgres
	SQLite *sql.DB       // set for sqlite
}

// Each runs fn as a subtest once per engine with a fresh database: sqlite
// always, postgres when a server answers (skipped with a reason
// otherwise, failed under CI).
func Each(t *testing.T, fn func(t *testing.T, e Engine)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, Engine{Name: "sqlite", SQLite: SQLite(t)}) })
	t.Run("postgres", func(t *testing.T) { fn(t, Engine{Name: "postgres", Pool: Postgres(t)}) })
}
