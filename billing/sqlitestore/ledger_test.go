package sqlitestore_test

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/sqlitestore"
	"github.com/routebalance/routebalance/migrations"
	"github.com/routebalance/routebalance/tenants/sqlstore"
)

// A batch that fails part-way (a row the database refuses) commits none
// of its rows, and the retry of the same batch on the same Store (its
// prepared statement kept across the failure) inserts each event exactly
// once and reports each id once: a failed batch neither loses nor
// double-counts an event.
func TestInsertFailedBatchCommitsNothingAndRetriesOnce(t *testing.T) {
	ctx := context.Background()
	db, err := sqlstore.OpenSQLite(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := migrations.ApplySQLite(ctx, db); err != nil {
		t.Fatal(err)
	}
	s := sqlitestore.New(db)
	now := time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)
	rng := rand.New(rand.NewPCG(3, 4))
	evs := make([]billing.UsageEvent, 40)
	for i := range evs {
		evs[i] = benchEvent(now, i, rng)
	}
	// A first batch goes in (and prepares the statement).
	if ids, err := s.Insert(ctx, evs[:10]); err != nil || len(ids) != 10 {
		t.Fatalf("first batch: %d ids, %v", len(ids), err)
	}
	// The database refuses one row of the next batch.
	evs[25].TenantID = "refused"
	if _, err := db.ExecContext(ctx, `CREATE TRIGGER refuse BEFORE INSERT ON billing_usage
		WHEN NEW.tenant_id = 'refused' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.Insert(ctx, evs[10:]); err == nil {
		t.Fatalf("a batch with a refused row succeeded (ids %d)", len(ids))
	}
	if n := countRows(t, db); n != 10 {
		t.Fatalf("rows after the failed batch = %d, want 10 (none of it committed)", n)
	}
	if _, err := db.ExecContext(ctx, `DROP TRIGGER refuse`); err != nil {
		t.Fatal(err)
	}
	// The retry (as the meter retries, or replays a spill line) writes the
	// whole batch, plus the first batch again, which is ignored.
	ids, err := s.Insert(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range evs[10:] {
		want = append(want, e.RequestID)
	}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("retry reported %d ids, want the %d of the failed batch, each once", len(ids), len(want))
	}
	if n := countRows(t, db); n != len(evs) {
		t.Errorf("rows = %d, want %d", n, len(evs))
	}
	var sum int64
	if err := db.QueryRowContext(ctx, `SELECT sum(cost_nano) FROM billing_usage`).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if want := int64(len(evs)) * int64(evs[0].Cost); sum != want {
		t.Errorf("cost sum = %d, want %d", sum, want)
	}
}

func countRows(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM billing_usage`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
