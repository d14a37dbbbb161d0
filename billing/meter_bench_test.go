package billing_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/internal/billingtest"
	"github.com/routebalance/routebalance/billing/pgstore"
	"github.com/routebalance/routebalance/billing/sqlitestore"
	"github.com/routebalance/routebalance/migrations"
	"github.com/routebalance/routebalance/tenants/sqlstore"
)

// BenchmarkMeterPostgres measures end-to-end meter throughput: b.N Record
// calls (the hot path: pricing, spend booking, a channel send) until every
// event is committed to Postgres by the batching flusher. Reports events/s.
//
//	go test -run '^$' -bench MeterPostgres -benchtime 200000x ./billing/
func BenchmarkMeterPostgres(b *testing.B) {
	pool := billingtest.PG(b)
	cfg := billing.DefaultConfig()
	cfg.SpillDir = b.TempDir()
	cfg.Buffer = 1 << 20 // hold a whole burst: measure the flusher, not the spill file
	m, err := billing.NewMeter(cfg, pgstore.New(pool), billing.NewGuard(billingtest.NewClock(meterBase), time.Hour), nil, billingtest.NewClock(meterBase))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	evs := make([]billing.UsageEvent, b.N)
	for i := range evs {
		evs[i] = event(meterBase, i, fmt.Sprintf("t%d", i%50))
	}
	b.ResetTimer()
	start := time.Now()
	for i := range evs {
		m.Record(evs[i])
	}
	for m.Stats().Written < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	cancel()
	<-done
	st := m.Stats()
	b.ReportMetric(float64(st.Spilled), "spilled")
	if st.Written != int64(b.N) {
		b.Fatalf("written %d of %d", st.Written, b.N)
	}
}

// BenchmarkMeterRecord measures the hot path alone: Record with room in
// the queue (pricing, spend booking, channel send; no database).
//
//	go test -run '^$' -bench MeterRecord ./billing/
func BenchmarkMeterRecord(b *testing.B) {
	cfg := billing.DefaultConfig()
	cfg.SpillDir = b.TempDir()
	cfg.Buffer = b.N + 1
	m, err := billing.NewMeter(cfg, pgstore.New(nil), billing.NewGuard(billingtest.NewClock(meterBase), time.Hour), nil, billingtest.NewClock(meterBase))
	if err != nil {
		b.Fatal(err)
	}
	ev := event(meterBase, 0, "t1")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Record(ev)
	}
}

// countingLedger counts the transactions (Insert calls) of a ledger.
type countingLedger struct {
	billing.Ledger
	tx atomic.Int64
}

func (c *countingLedger) Insert(ctx context.Context, evs []billing.UsageEvent) ([]string, error) {
	c.tx.Add(1)
	return c.Ledger.Insert(ctx, evs)
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// meterArm is one configuration's result.
type meterArm struct {
	cpuPerEvent time.Duration
	txPerEvent  float64
	burstPerSec float64
}

// runMeterArm meters n events on a fresh SQLite file opened like serve
// opens it (WAL, synchronous=NORMAL), first paced (4 goroutines, each
// recording one event every gap, like requests finishing), then as one
// burst, and measures CPU per event, transactions per event (paced) and
// events/s (burst).
func runMeterArm(b *testing.B, n int, flush time.Duration, gap time.Duration, writers int) meterArm {
	b.Helper()
	db, err := sqlstore.OpenSQLite(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := migrations.ApplySQLite(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	led := &countingLedger{Ledger: sqlitestore.New(db)}
	cfg := billing.DefaultConfig()
	cfg.SpillDir = b.TempDir()
	cfg.Buffer = 2*n + 1 // hold a whole burst: measure the writer, not the spill file
	cfg.FlushInterval = flush
	cfg.Writers = writers
	m, err := billing.NewMeter(cfg, led, billing.NewGuard(nil, time.Hour), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitWritten := func(want int64) {
		for m.Stats().Written < want {
			time.Sleep(200 * time.Microsecond)
		}
	}
	var arm meterArm
	now := time.Now()
	// Paced: the gateway's shape, events arriving one by one.
	const producers = 4
	per := max(n/producers, 1)
	tx0, cpu0 := led.tx.Load(), cpuTime(b)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				m.Record(event(now, p*per+i, fmt.Sprintf("t%d", p%8)))
				time.Sleep(gap)
			}
		}()
	}
	wg.Wait()
	waitWritten(int64(producers * per))
	paced := float64(producers * per)
	arm.cpuPerEvent = time.Duration(float64(cpuTime(b)-cpu0) / paced)
	arm.txPerEvent = float64(led.tx.Load()-tx0) / paced
	// Burst: as fast as Record can go, until all is committed.
	base := producers * per
	start := time.Now()
	for i := range n {
		m.Record(event(now, base+i, "burst"))
	}
	waitWritten(int64(base + n))
	arm.burstPerSec = float64(n) / time.Since(start).Seconds()
	return arm
}

// BenchmarkMeterSQLiteBatching compares, in the same run, the meter's
// grouping of events into one transaction per FlushInterval (10 ms, the
// default) with the earlier write-what-is-queued (FlushInterval 0: one
// transaction per event when events arrive one at a time) on the embedded
// SQLite ledger. Reported per arm: process CPU per event (producers,
// meter and SQLite together) and transactions per event under paced
// arrivals (4 producers, one event each per millisecond: ≈ 4,000 events/s
// arriving one by one, the gateway's request rate), events/s in a burst
// (where both arms batch); and the CPU ratio. A third arm, one-writer, is
// the batched meter with one flusher goroutine (Config.Writers = 1, what
// serve runs on SQLite, which takes one writer at a time anyway) instead
// of the default two.
//
//	go test -run '^$' -bench MeterSQLiteBatching -benchtime 20000x ./billing/
func BenchmarkMeterSQLiteBatching(b *testing.B) {
	n := max(b.N, 640)
	const gap = time.Millisecond
	today := runMeterArm(b, n, 0, gap, billing.DefaultConfig().Writers)
	batched := runMeterArm(b, n, 10*time.Millisecond, gap, billing.DefaultConfig().Writers)
	one := runMeterArm(b, n, 10*time.Millisecond, gap, 1)
	b.ReportMetric(float64(today.cpuPerEvent.Nanoseconds())/1e3, "today-cpu-µs/ev")
	b.ReportMetric(float64(batched.cpuPerEvent.Nanoseconds())/1e3, "batched-cpu-µs/ev")
	b.ReportMetric(today.txPerEvent, "today-tx/ev")
	b.ReportMetric(batched.txPerEvent, "batched-tx/ev")
	b.ReportMetric(float64(today.cpuPerEvent)/float64(batched.cpuPerEvent), "cpu-ratio-today/batched")
	b.ReportMetric(1e9/float64(today.cpuPerEvent.Nanoseconds()), "today-ev/cpu-s")
	b.ReportMetric(1e9/float64(batched.cpuPerEvent.Nanoseconds()), "batched-ev/cpu-s")
	b.ReportMetric(float64(one.cpuPerEvent.Nanoseconds())/1e3, "one-writer-cpu-µs/ev")
	b.ReportMetric(one.txPerEvent, "one-writer-tx/ev")
	b.ReportMetric(today.burstPerSec, "today-burst-ev/s")
	b.ReportMetric(batched.burstPerSec, "batched-burst-ev/s")
}
