package sqlitestore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/sqlitestore"
	"github.com/routebalance/routebalance/migrations/dbtest"
)

// A batch that fails part-way (a row the database refuses) commits none
// of its rows, and the retry of the same batch on the same Store (its
// prepared statement kept across the failure) inserts each event exactly
// once and reports each id once: a failed batch neither loses nor
// double-counts an event.
func TestInsertFailedBatchCommitsNothingAndRetriesOnce(t *testing.T) {
	ctx := context.Background()
	db := dbtest.SQLite(t)
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

// cancelAt is the Go side of the SQL function rb_test_cancel(n): a row
// trigger calls it for every inserted row, and at the n-th it cancels
// the context cancelAt holds.
var cancelAt struct {
	mu     sync.Mutex
	seen   int
	cancel context.CancelFunc
}

func init() {
	sqlite.MustRegisterScalarFunction("rb_test_cancel", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		cancelAt.mu.Lock()
		defer cancelAt.mu.Unlock()
		cancelAt.seen++
		if n, _ := args[0].(int64); cancelAt.seen == int(n) && cancelAt.cancel != nil {
			cancelAt.cancel()
		}
		return nil, nil
	})
}

// A batch whose context ends part-way (here: at its 5th row, from inside
// SQLite, so no timing is involved) commits none of its rows, although
// the rows run without the context's cancellation (Insert checks it
// between rows and database/sql rolls the transaction back), and the
// retry with a live context inserts each event once.
func TestInsertCancelledMidBatchCommitsNothing(t *testing.T) {
	ctx := context.Background()
	db := dbtest.SQLite(t)
	if _, err := db.ExecContext(ctx, `CREATE TRIGGER cancel_at BEFORE INSERT ON billing_usage
		BEGIN SELECT rb_test_cancel(5); END`); err != nil {
		t.Fatal(err)
	}
	s := sqlitestore.New(db)
	rng := rand.New(rand.NewPCG(5, 6))
	evs := make([]billing.UsageEvent, 20)
	for i := range evs {
		evs[i] = benchEvent(time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC), i, rng)
	}
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cancelAt.mu.Lock()
	cancelAt.seen, cancelAt.cancel = 0, cancel
	cancelAt.mu.Unlock()
	if ids, err := s.Insert(bctx, evs); err == nil {
		t.Fatalf("a batch whose context ended at row 5 succeeded (%d ids)", len(ids))
	}
	if n := countRows(t, db); n != 0 {
		t.Fatalf("rows after the cancelled batch = %d, want 0", n)
	}
	cancelAt.mu.Lock()
	cancelAt.cancel = nil
	cancelAt.mu.Unlock()
	ids, err := s.Insert(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(evs) || countRows(t, db) != len(evs) {
		t.Errorf("retry: %d ids, %d rows; want %d of each", len(ids), countRows(t, db), len(evs))
	}
}
