package billing_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/internal/billingtest"
	"github.com/routebalance/routebalance/billing/pgstore"
	"github.com/routebalance/routebalance/billing/sqlitestore"
	"github.com/routebalance/routebalance/internal/tcpproxy"
	"github.com/routebalance/routebalance/internal/testwait"
)

// engine is one real ledger under test with a way to count its rows.
type engine struct {
	name   string
	ledger billing.Ledger
	count  func(t *testing.T) (rows int, billed billing.Nano)
}

func pgEngine(t *testing.T, pool *pgxpool.Pool) engine {
	return engine{"postgres", pgstore.New(pool), func(t *testing.T) (int, billing.Nano) {
		var n int
		var s int64
		if err := pool.QueryRow(context.Background(), "SELECT count(*), coalesce(sum(billed_nano),0) FROM billing_usage").Scan(&n, &s); err != nil {
			t.Fatalf("count: %v", err)
		}
		return n, billing.Nano(s)
	}}
}

func sqliteEngine(t *testing.T, db *sql.DB) engine {
	return engine{"sqlite", sqlitestore.New(db), func(t *testing.T) (int, billing.Nano) {
		var n int
		var s int64
		if err := db.QueryRow("SELECT count(*), coalesce(sum(billed_nano),0) FROM billing_usage").Scan(&n, &s); err != nil {
			t.Fatalf("count: %v", err)
		}
		return n, billing.Nano(s)
	}}
}

func engines(t *testing.T) []engine {
	return []engine{pgEngine(t, billingtest.PG(t)), sqliteEngine(t, billingtest.SQLite(t))}
}

func testConfig(dir string) billing.Config {
	cfg := billing.DefaultConfig()
	cfg.SpillDir = dir
	cfg.MinBackoff = 5 * time.Millisecond
	cfg.MaxBackoff = 50 * time.Millisecond
	cfg.ReplayInterval = 20 * time.Millisecond
	cfg.Batch = 100
	cfg.Pricing = billing.Pricing{Markup: 2}
	return cfg
}

// meterBase is the fixed time the meter tests' clocks start from; the
// clock-shift guard (billingtest.RunShifted) also runs each test with it
// moved a year before and a year after the real date.
var meterBase = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// event is request i of tenant, finished at now.
func event(now time.Time, i int, tenant string) billing.UsageEvent {
	return billing.UsageEvent{
		RequestID: fmt.Sprintf("req-%s-%06d", tenant, i), TenantID: tenant, KeyID: "key-" + tenant,
		ClusterID: "c1", InstanceID: fmt.Sprintf("i%d", i%3), Model: "m", PromptTokens: 10, OutputTokens: 5,
		Cost: 1_000_000, TTFT: 20 * time.Millisecond, E2E: 100 * time.Millisecond, Status: "ok",
		HTTPStatus: 200, StartedAt: now.Add(-100 * time.Millisecond), FinishedAt: now,
	}
}

// runMeter starts m.Run and returns a stop function that cancels it and
// waits for it to return.
func runMeter(t *testing.T, m *billing.Meter) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestMeterWritesOnceAndFlushesOnShutdown(t *testing.T) {
	billingtest.RunShifted(t, meterBase, func(t *testing.T, now time.Time) {
		clk := billingtest.NewClock(now)
		for _, e := range engines(t) {
			t.Run(e.name, func(t *testing.T) {
				guard := billing.NewGuard(clk, time.Hour)
				m, err := billing.NewMeter(testConfig(t.TempDir()), e.ledger, guard, nil, clk)
				if err != nil {
					t.Fatal(err)
				}
				stop := runMeter(t, m)
				const n = 1000
				for i := range n {
					m.Record(event(now, i, "t1"))
				}
				// The same request recorded again (a buggy caller) is stored once
				// and its spend is taken back out.
				for i := range 10 {
					m.Record(event(now, i, "t1"))
				}
				stop() // the shutdown flush writes whatever is still queued
				rows, billed := e.count(t)
				want := billing.Nano(n * 2_000_000) // $0.002 each, exactly
				if rows != n {
					t.Errorf("rows = %d, want %d", rows, n)
				}
				if billed != want {
					t.Errorf("billed = %v, want %v", billed, want)
				}
				st := m.Stats()
				if diff := cmp.Diff(billing.MeterStats{Recorded: n + 10, Written: n, Duplicates: 10}, st); diff != "" {
					t.Errorf("stats (-want +got):\n%s", diff)
				}
				if got := guard.Spent("t1"); got != want {
					t.Errorf("guard spend = %v, want %v", got, want)
				}
			})
		}
	})
}

func TestMeterLoadsPeriodSpendAtStart(t *testing.T) {
	billingtest.RunShifted(t, meterBase, func(t *testing.T, now time.Time) {
		clk := billingtest.NewClock(now)
		for _, e := range engines(t) {
			t.Run(e.name, func(t *testing.T) {
				old := event(now, 0, "t1")
				old.FinishedAt = billing.PeriodStart(now).Add(-time.Hour) // last month
				cur := event(now, 1, "t1")
				cur.Billed = 4 * billing.NanoPerUSD
				if _, err := e.ledger.Insert(context.Background(), []billing.UsageEvent{old, cur}); err != nil {
					t.Fatal(err)
				}
				guard := billing.NewGuard(clk, time.Hour)
				m, err := billing.NewMeter(testConfig(t.TempDir()), e.ledger, guard, nil, clk)
				if err != nil {
					t.Fatal(err)
				}
				before := event(now, 2, "t1") // recorded before Run: booked once, not twice
				before.Billed = billing.NanoPerUSD
				m.Record(before)
				stop := runMeter(t, m)
				testwait.Until(t, "spend loaded and event written", func() bool { return m.Stats().Written == 1 })
				stop()
				if got := guard.Spent("t1"); got != 5*billing.NanoPerUSD {
					t.Errorf("spend = %v, want 5", got)
				}
				err = guard.Check(billing.Limits{TenantID: "t1", KeyID: "key-t1", TenantMonthlyUSD: 5})
				if err == nil {
					t.Error("budget of 5 with 5 spent: Check = nil, want BudgetError")
				}
			})
		}
	})
}

// TestMeterSurvivesDatabaseOutage cuts the Postgres connection (a TCP proxy
// between pool and server) while events stream in, with a queue small
// enough that events spill to disk, then restores it: every event is
// stored exactly once.
func TestMeterSurvivesDatabaseOutage(t *testing.T) {
	billingtest.RunShifted(t, meterBase, func(t *testing.T, now time.Time) {
		clk := billingtest.NewClock(now)
		schema := billingtest.PGSchema(t)
		proxy := tcpproxy.New(t, billingtest.PGTarget(t))
		pool := billingtest.PGPoolAt(t, billingtest.ProxiedURL(t, billingtest.DatabaseURL(), proxy.Addr()), schema)
		direct := billingtest.PGPoolAt(t, billingtest.DatabaseURL(), schema)
		e := pgEngine(t, direct)

		cfg := testConfig(t.TempDir())
		cfg.Buffer = 32
		cfg.Batch = 50
		guard := billing.NewGuard(clk, time.Hour)
		m, err := billing.NewMeter(cfg, pgstore.New(pool), guard, nil, clk)
		if err != nil {
			t.Fatal(err)
		}
		stop := runMeter(t, m)
		const n = 3000
		for i := range n {
			if i == 500 {
				testwait.Until(t, "first events written", func() bool { return m.Stats().Written > 0 })
				proxy.Down()
			}
			if i == 2500 {
				proxy.Up()
			}
			m.Record(event(now, i, "t1"))
			if i%100 == 0 {
				time.Sleep(2 * time.Millisecond) // let the flusher hit the dead connection mid-stream
			}
		}
		// Written may stay below n: a commit whose answer the outage cut is
		// retried and then finds its rows already stored.
		testwait.Until(t, "all events stored", func() bool { rows, _ := e.count(t); return rows >= n })
		stop()
		rows, _ := e.count(t)
		if rows != n {
			t.Errorf("rows = %d, want %d", rows, n)
		}
		st := m.Stats()
		if st.Spilled == 0 {
			t.Errorf("no events spilled during the outage (stats %+v); the test did not exercise the spill file", st)
		}
		if st.Lost != 0 || st.Written > n {
			t.Errorf("stats %+v: want Written ≤ %d, Lost 0", st, n)
		}
		if got, want := guard.Spent("t1"), billing.Nano(n*2_000_000); got != want {
			t.Errorf("spend = %v, want %v", got, want)
		}
	})
}

// TestMeterSpillsAtShutdownAndReplaysOnRestart stops the meter while the
// database is down: the events go to the spill file and the next meter
// (a restarted process) writes them before loading the period spend.
func TestMeterSpillsAtShutdownAndReplaysOnRestart(t *testing.T) {
	billingtest.RunShifted(t, meterBase, func(t *testing.T, now time.Time) {
		clk := billingtest.NewClock(now)
		schema := billingtest.PGSchema(t)
		proxy := tcpproxy.New(t, billingtest.PGTarget(t))
		pool := billingtest.PGPoolAt(t, billingtest.ProxiedURL(t, billingtest.DatabaseURL(), proxy.Addr()), schema)
		e := pgEngine(t, billingtest.PGPoolAt(t, billingtest.DatabaseURL(), schema))
		dir := t.TempDir()
		cfg := testConfig(dir)
		cfg.ShutdownTimeout = 100 * time.Millisecond

		proxy.Down()
		m1, err := billing.NewMeter(cfg, pgstore.New(pool), billing.NewGuard(clk, time.Hour), nil, clk)
		if err != nil {
			t.Fatal(err)
		}
		stop := runMeter(t, m1)
		const n = 400
		for i := range n {
			m1.Record(event(now, i, "t1"))
		}
		stop()
		if rows, _ := e.count(t); rows != 0 {
			t.Fatalf("rows with the database down = %d, want 0", rows)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "meter-*"))
		if len(files) == 0 {
			t.Fatal("no spill file after a shutdown with the database down")
		}

		proxy.Up()
		guard := billing.NewGuard(clk, time.Hour)
		m2, err := billing.NewMeter(cfg, pgstore.New(pool), guard, nil, clk)
		if err != nil {
			t.Fatal(err)
		}
		stop2 := runMeter(t, m2)
		testwait.Until(t, "replay", func() bool { return m2.Stats().Written == n })
		// Run loads the month's spend right after the leftover replay.
		testwait.Until(t, "spend load", func() bool { return guard.Spent("t1") > 0 })
		stop2()
		if rows, _ := e.count(t); rows != n {
			t.Errorf("rows after restart = %d, want %d", rows, n)
		}
		if got, want := guard.Spent("t1"), billing.Nano(n*2_000_000); got != want {
			t.Errorf("spend after restart = %v, want %v (leftover events booked once, by the ledger load)", got, want)
		}
		left, _ := filepath.Glob(filepath.Join(dir, "meter-*"))
		if len(left) != 0 {
			t.Errorf("spill files left after replay: %v", left)
		}
		_ = os.RemoveAll(dir)
	})
}

func TestLedgerInsertIsIdempotent(t *testing.T) {
	billingtest.RunShifted(t, meterBase, func(t *testing.T, now time.Time) {
		for _, e := range engines(t) {
			t.Run(e.name, func(t *testing.T) {
				ctx := context.Background()
				a, b, c := event(now, 1, "t"), event(now, 2, "t"), event(now, 3, "t")
				got, err := e.ledger.Insert(ctx, []billing.UsageEvent{a, a, b})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]string{a.RequestID, b.RequestID}, got, cmpopts.SortSlices(func(x, y string) bool { return x < y })); diff != "" {
					t.Errorf("first insert ids (-want +got):\n%s", diff)
				}
				got, err = e.ledger.Insert(ctx, []billing.UsageEvent{b, c})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]string{c.RequestID}, got); diff != "" {
					t.Errorf("second insert ids (-want +got):\n%s", diff)
				}
				if rows, _ := e.count(t); rows != 3 {
					t.Errorf("rows = %d, want 3", rows)
				}
			})
		}
	})
}

// TestGuardSeesOtherReplicas runs two meters (two replicas) on one
// database: each guard counts the other's spend after a reload, and its
// own at once.
func TestGuardSeesOtherReplicas(t *testing.T) {
	billingtest.RunShifted(t, meterBase, func(t *testing.T, now time.Time) {
		clk := billingtest.NewClock(now)
		schema := billingtest.PGSchema(t)
		newReplica := func() (*billing.Meter, *billing.Guard) {
			cfg := testConfig(t.TempDir())
			cfg.SpendRefresh = 20 * time.Millisecond
			g := billing.NewGuard(clk, time.Hour)
			m, err := billing.NewMeter(cfg, pgstore.New(billingtest.PGPoolAt(t, billingtest.DatabaseURL(), schema)), g, nil, clk)
			if err != nil {
				t.Fatal(err)
			}
			runMeter(t, m)
			return m, g
		}
		a, ga := newReplica()
		b, gb := newReplica()
		for i := range 100 {
			a.Record(event(now, i, "t1")) // $0.002 each
		}
		b.Record(event(now, 1000, "t1"))
		if got := ga.Spent("t1"); got < 200_000_000 {
			t.Errorf("replica A's own spend = %v, want ≥ 0.2 at once", got)
		}
		testwait.Until(t, "both replicas to see all spend", func() bool {
			return ga.Spent("t1") == 202_000_000 && gb.Spent("t1") == 202_000_000
		})
		err := gb.Check(billing.Limits{TenantID: "t1", TenantMonthlyUSD: 0.2})
		if err == nil {
			t.Error("replica B let a request through past the tenant budget spent on replica A")
		}
	})
}

// TestMeterReplaysLegacyFloatSpillLines writes a spill file the way the
// meter did before money became integers (CostUSD/BilledUSD floats) and
// checks the next meter stores the amounts as exact nano-USD.
func TestMeterReplaysLegacyFloatSpillLines(t *testing.T) {
	e := sqliteEngine(t, billingtest.SQLite(t))
	dir := t.TempDir()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	lines := `{"RequestID":"old-1","TenantID":"t1","CostUSD":0.001,"BilledUSD":0.0025,"StartedAt":"` + now + `","FinishedAt":"` + now + `"}
{"RequestID":"old-2","TenantID":"t1","CostUSD":0.5,"BilledUSD":0,"StartedAt":"` + now + `","FinishedAt":"` + now + `"}
{"RequestID":"torn","Ten`
	if err := os.WriteFile(filepath.Join(dir, "meter-spill.jsonl"), []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := billing.NewMeter(testConfig(dir), e.ledger, billing.NewGuard(nil, time.Hour), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runMeter(t, m)
	testwait.Until(t, "leftover replayed", func() bool { return m.Stats().Written == 2 })
	rows, billed := e.count(t)
	if rows != 2 || billed != 2_500_000 {
		t.Errorf("rows %d billed %d, want 2 rows and exactly 2 500 000 nano-USD", rows, billed)
	}
}
