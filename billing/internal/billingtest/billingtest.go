// Package billingtest has the test fixtures of the billing packages: a
// fresh Postgres schema or SQLite file with the migrations applied, a TCP
// proxy that can cut a database off, stripe-mock, and the fake clock of
// the clock-shift guard. Postgres and stripe-mock are needed tools
// (internal/testenv): missing, they skip the test, or fail it under CI.
package billingtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/routebalance/routebalance/internal/testenv"
	"github.com/routebalance/routebalance/migrations"
)

// DefaultDatabaseURL is the local test server scripts/test.sh uses.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DatabaseURL returns $DATABASE_URL or the local default.
func DatabaseURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return DefaultDatabaseURL
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// PGSchema creates a fresh schema, applies the migrations in it and drops
// it when the test ends. It returns the schema name.
func PGSchema(t testing.TB) string {
	t.Helper()
	schema := PGEmptySchema(t)
	pool := PGPoolAt(t, DatabaseURL(), schema)
	if _, err := migrations.ApplyPostgres(context.Background(), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	pool.Close()
	return schema
}

// PGEmptySchema creates a fresh schema without any migration (for tests of
// a migration itself) and drops it when the test ends.
func PGEmptySchema(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, DatabaseURL())
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = admin.Ping(pctx)
	cancel()
	if err != nil {
		admin.Close()
		testenv.Need(t, "postgres", "no server answers (set DATABASE_URL or start one at 127.0.0.1:5432): "+testenv.Cause(err))
	}
	schema := "billing_t_" + randHex(6)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		t.Fatalf("postgres at %s: create schema: %v (is the server running?)", DatabaseURL(), err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		admin.Close()
	})
	return schema
}

// PGPoolAt opens a pool on url with search_path set to schema, closed when
// the test ends.
func PGPoolAt(t testing.TB, url, schema string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// PG returns a pool on a fresh migrated schema.
func PG(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PGPoolAt(t, DatabaseURL(), PGSchema(t))
}

// SQLite opens a fresh migrated database file in the test's temp dir.
func SQLite(t testing.TB) *sql.DB {
	t.Helper()
	db := SQLiteEmpty(t)
	if _, err := migrations.ApplySQLite(context.Background(), db); err != nil {
		t.Fatalf("migrate sqlite: %v", err)
	}
	return db
}

// SQLiteEmpty opens a fresh database file without any migration.
func SQLiteEmpty(t testing.TB) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "billing.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatalf("sqlite: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// ProxiedURL rewrites a postgres URL's host:port to addr.
func ProxiedURL(t testing.TB, url, addr string) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	c := cfg.ConnConfig
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", c.User, addr, c.Database)
}

// PGTarget returns the host:port of the test database.
func PGTarget(t testing.TB) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(DatabaseURL())
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port))
}
