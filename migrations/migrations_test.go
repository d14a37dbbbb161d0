package migrations_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/migrations"
	"github.com/routebalance/routebalance/migrations/dbtest"
)

// TestApplyIsIdempotent checks both engines: dbtest applied everything,
// so nothing is pending and a second apply is a no-op.
func TestApplyIsIdempotent(t *testing.T) {
	ctx := context.Background()
	dbtest.Each(t, func(t *testing.T, e dbtest.Engine) {
		var pending, again []int
		var err error
		if e.Pool != nil {
			if again, err = migrations.ApplyPostgres(ctx, e.Pool); err == nil {
				pending, err = migrations.PendingPostgres(ctx, e.Pool)
			}
		} else {
			if again, err = migrations.ApplySQLite(ctx, e.SQLite); err == nil {
				pending, err = migrations.PendingSQLite(ctx, e.SQLite)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff([]int(nil), again); d != "" {
			t.Errorf("second apply applied (-want +got):\n%s", d)
		}
		if len(pending) != 0 {
			t.Errorf("pending after apply: %v", pending)
		}
	})
	for _, engine := range []string{"postgres", "sqlite"} {
		ms, err := migrations.List(engine)
		if err != nil || len(ms) == 0 || ms[0].Version != 1 {
			t.Errorf("%s migrations: %v %v", engine, ms, err)
		}
	}
}
