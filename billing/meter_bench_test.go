package billing_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/internal/billingtest"
	"github.com/routebalance/routebalance/billing/pgstore"
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
