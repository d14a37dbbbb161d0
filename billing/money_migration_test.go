package billing_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/internal/billingtest"
	"github.com/routebalance/routebalance/billing/pgstore"
	"github.com/routebalance/routebalance/billing/sqlitestore"
	"github.com/routebalance/routebalance/migrations"
)

const repairsQuery = `SELECT table_name || '/' || row_key FROM billing_money_repairs`

func sqlStrings(ctx context.Context, db *sql.DB, q string) ([]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// migrateTo applies the engine's migrations up to version last through
// exec and records them the way the migrator does, so that the migrator
// applies only the later ones.
func migrateTo(t *testing.T, engine string, last int, exec func(q string, args ...any) error) {
	t.Helper()
	ms, err := migrations.List(engine)
	if err != nil {
		t.Fatal(err)
	}
	if err := exec(`CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at text NOT NULL DEFAULT '')`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version > last {
			break
		}
		if err := exec(m.SQL); err != nil {
			t.Fatalf("migration %s: %v", m.Name, err)
		}
		q := "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)"
		if engine == "sqlite" {
			q = "INSERT INTO schema_migrations (version, name) VALUES (?, ?)"
		}
		if err := exec(q, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
}

type legacyRow struct {
	id             string
	cost, billed   string // SQL literals in the old double/REAL columns
	wantC, wantB   billing.Nano
	repaired       bool
	postgresOnly   bool // NaN cannot be stored by SQLite (it becomes NULL)
	sqliteLiterals [2]string
}

// TestMigration0102ConvertsAndRepairsMoney stores rows in the pre-0102
// schema — fair amounts, +Infinity (the probe's 1e308 price), NaN, a huge
// and a negative amount — then migrates: fair amounts become exact
// nano-USD, bad ones 0 with their old values in billing_money_repairs, an
// unsent outbox row with a wrapped value is recomputed, and the usage and
// spend queries answer with finite numbers on both engines.
func TestMigration0102ConvertsAndRepairsMoney(t *testing.T) {
	rows := []legacyRow{
		{id: "fair", cost: "0.123456789", billed: "0.25", wantC: 123_456_789, wantB: 250_000_000},
		{id: "inf", cost: "'Infinity'", billed: "'Infinity'", repaired: true, sqliteLiterals: [2]string{"9e999", "9e999"}},
		{id: "nan", cost: "'NaN'", billed: "0.5", wantB: 500_000_000, repaired: true, postgresOnly: true}, // the fair column is kept
		{id: "huge", cost: "1e300", billed: "1e300", repaired: true},
		{id: "neg", cost: "-1", billed: "0.001", wantB: 1_000_000, repaired: true},
		{id: "tiny", cost: "1e-9", billed: "2e-9", wantC: 1, wantB: 2},
	}
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	for _, engine := range []string{"postgres", "sqlite"} {
		t.Run(engine, func(t *testing.T) {
			ctx := context.Background()
			var (
				exec     func(q string, args ...any) error
				repaired func() ([]string, error) // table/row of billing_money_repairs
				store    interface {
					billing.Ledger
					Usage(context.Context, billing.UsageQuery) (billing.UsageReport, error)
					PendingOutbox(context.Context, time.Time, int) ([]billing.OutboxItem, error)
				}
				apply func() error
				ph    = func(i int) string { return fmt.Sprintf("$%d", i) }
			)
			if engine == "postgres" {
				pool := billingtest.PGPoolAt(t, billingtest.DatabaseURL(), billingtest.PGEmptySchema(t))
				exec = func(q string, args ...any) error { _, err := pool.Exec(ctx, q, args...); return err }
				store = pgstore.New(pool)
				apply = func() error { _, err := migrations.ApplyPostgres(ctx, pool); return err }
				repaired = func() ([]string, error) {
					rows, err := pool.Query(ctx, repairsQuery)
					if err != nil {
						return nil, err
					}
					return pgx.CollectRows(rows, pgx.RowTo[string])
				}
			} else {
				db := billingtest.SQLiteEmpty(t)
				exec = func(q string, args ...any) error { _, err := db.ExecContext(ctx, q, args...); return err }
				store = sqlitestore.New(db)
				apply = func() error { _, err := migrations.ApplySQLite(ctx, db); return err }
				repaired = func() ([]string, error) { return sqlStrings(ctx, db, repairsQuery) }
				ph = func(int) string { return "?" }
			}
			migrateTo(t, engine, 101, exec)
			for _, r := range rows {
				if r.postgresOnly && engine == "sqlite" {
					continue
				}
				c, b := r.cost, r.billed
				var q string
				if engine == "sqlite" {
					if r.sqliteLiterals[0] != "" {
						c, b = r.sqliteLiterals[0], r.sqliteLiterals[1]
					}
					q = `INSERT INTO billing_usage (request_id, tenant_id, cost_usd, billed_usd, started_ms, finished_ms)
						VALUES (` + ph(1) + `, 't1', ` + c + `, ` + b + `, ` + fmt.Sprint(at.UnixMilli()) + `, ` + fmt.Sprint(at.UnixMilli()) + `)`
				} else {
					q = `INSERT INTO billing_usage (request_id, tenant_id, cost_usd, billed_usd, started_at, finished_at)
						VALUES (` + ph(1) + `, 't1', ` + c + `, ` + b + `, '2026-11-30T10:00:00Z', '2026-11-30T10:00:00Z')`
				}
				if err := exec(q, r.id); err != nil {
					t.Fatalf("insert %s: %v", r.id, err)
				}
			}
			// An unsent outbox row whose +Inf amount wrapped to MinInt64, and a
			// sent fair one that must keep what Stripe was told.
			inf := "'Infinity'"
			hour := "'2026-11-30T10:00:00Z'"
			// due at the hour (never the database's now(): no real clock)
			hourCol, sentCol, extra, extraV := "hour", "sent_at", ", next_attempt_at", ", "+hour
			if engine == "sqlite" {
				hour = fmt.Sprint(at.UnixMilli())
				inf, hourCol, sentCol, extra, extraV = "9e999", "hour_ms", "sent_ms", ", created_ms, next_attempt_ms", ", 0, "+hour
			}
			for _, o := range []struct{ id, billed, value, sent string }{
				{"1", inf, "-9223372036854775808", "NULL"},
				{"2", "0.75", "750000", hour},
			} {
				q := `INSERT INTO billing_outbox (id, tenant_id, ` + hourCol + `, seq, identifier, requests, tokens, billed_usd, value, ` + sentCol + extra + `)
					VALUES (` + o.id + `, 't1', ` + hour + `, ` + o.id + `, 'rb-t1-` + o.id + `', 1, 0, ` + o.billed + `, ` + o.value + `, ` + o.sent + extraV + `)`
				if err := exec(q); err != nil {
					t.Fatalf("insert outbox %s: %v", o.id, err)
				}
			}
			if err := apply(); err != nil {
				t.Fatalf("migrate: %v", err)
			}

			// Every row is there, with exact integer amounts.
			rep, err := store.Usage(ctx, billing.UsageQuery{TenantID: "t1", From: at.Add(-time.Hour), To: at.Add(time.Hour), GroupBy: billing.GroupKey})
			if err != nil {
				t.Fatalf("usage after migration: %v", err)
			}
			var wantReq int64
			var wantC, wantB billing.Nano
			for _, r := range rows {
				if r.postgresOnly && engine == "sqlite" {
					continue
				}
				wantReq++
				wantC += r.wantC
				wantB += r.wantB
			}
			if rep.Total.Requests != wantReq || rep.Total.Cost != wantC || rep.Total.Billed != wantB {
				t.Errorf("usage total %d requests, cost %d, billed %d; want %d, %d, %d",
					rep.Total.Requests, rep.Total.Cost, rep.Total.Billed, wantReq, wantC, wantB)
			}
			if _, err := json.Marshal(rep); err != nil {
				t.Errorf("usage report does not marshal: %v", err)
			}
			spend, err := store.PeriodSpend(ctx, billing.PeriodStart(at))
			if err != nil || len(spend) != 1 || spend[0].Billed != wantB {
				t.Errorf("period spend = %+v, %v; want %d", spend, err, wantB)
			}
			// Repaired rows are listed with their old values.
			got := map[string]bool{}
			var wantRepaired []string
			for _, r := range rows {
				if r.repaired && !(r.postgresOnly && engine == "sqlite") {
					wantRepaired = append(wantRepaired, "billing_usage/"+r.id)
				}
			}
			wantRepaired = append(wantRepaired, "billing_outbox/1")
			keys, err := repaired()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				got[k] = true
			}
			want := map[string]bool{}
			for _, k := range wantRepaired {
				want[k] = true
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("billing_money_repairs (-want +got):\n%s", d)
			}
			// The wrapped unsent meter value is recomputed from the repaired 0;
			// the sent row keeps its value.
			if err := store.(interface {
				SetCustomer(context.Context, string, string, time.Time) error
			}).SetCustomer(ctx, "t1", "cus_1", at); err != nil {
				t.Fatal(err)
			}
			items, err := store.PendingOutbox(ctx, at.Add(24*time.Hour), 10)
			if err != nil || len(items) != 1 || items[0].Value != 0 || items[0].Billed != 0 {
				t.Errorf("pending outbox = %+v, %v; want the repaired row with value 0", items, err)
			}
		})
	}
}
