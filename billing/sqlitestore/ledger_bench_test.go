package sqlitestore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/sqlitestore"
	"github.com/routebalance/routebalance/migrations"
	"github.com/routebalance/routebalance/tenants/sqlstore"
)

// BenchmarkInsert writes batches of 32 usage events (the size of a 10 ms
// batch at ~3,000 requests/s; BATCH=n changes it) into a SQLite file opened as serve opens it
// (WAL, synchronous=NORMAL); ns/op, allocs/op and cpu-µs/event (the
// process's CPU time, which the machine's load does not inflate as it
// does ns/op) are per event.
//
//	go test -run '^$' -bench Insert -benchmem ./billing/sqlitestore/
func BenchmarkInsert(b *testing.B) {
	db, err := sqlstore.OpenSQLite(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := migrations.ApplySQLite(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	s := sqlitestore.New(db)
	batch := 32
	if v, err := strconv.Atoi(os.Getenv("BATCH")); err == nil {
		batch = v
	}
	now := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	evs := make([]billing.UsageEvent, b.N)
	for i := range evs {
		evs[i] = benchEvent(now, i, rng)
	}
	// A context that can end, as the meter's writers pass.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := 0; i < b.N; i += batch {
		ids, err := s.Insert(ctx, evs[i:min(i+batch, b.N)])
		if err != nil {
			b.Fatal(err)
		}
		if len(ids) != min(batch, b.N-i) {
			b.Fatalf("inserted %d of %d", len(ids), min(batch, b.N-i))
		}
	}
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/event")
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchEvent is the i-th event of a gateway's ledger: 8 tenants, 13
// instances, request ids as the API makes them (benchID).
func benchEvent(now time.Time, i int, rng *rand.Rand) billing.UsageEvent {
	tenant := fmt.Sprintf("t%d", i%8)
	return billing.UsageEvent{
		RequestID: benchID(i, rng), TenantID: tenant, KeyID: "key-" + tenant,
		ClusterID: "c1", InstanceID: fmt.Sprintf("i%d", i%13), Model: "m", Policy: "routebalance",
		PromptTokens: 90, OutputTokens: 120, Cost: 1_234_567, Billed: 1_500_000, PredictedQuality: 0.81,
		TTFT: 20 * time.Millisecond, E2E: 100 * time.Millisecond, Status: "ok", HTTPStatus: 200,
		StartedAt: now.Add(time.Duration(i) * time.Millisecond), FinishedAt: now.Add(time.Duration(i)*time.Millisecond + 100*time.Millisecond),
		Weights: billing.Weights{Quality: 0.5, Cost: 0.3, Latency: 0.2}, Attempts: 1,
	}
}

// benchID is the API's request id (api.requestIDAt): the millisecond
// (here three events per millisecond) and 64 random bits; TIMEID=0 makes
// the earlier 24 random hex digits instead, to compare.
func benchID(i int, rng *rand.Rand) string {
	if os.Getenv("TIMEID") == "0" {
		return fmt.Sprintf("%016x%08x", rng.Uint64(), rng.Uint32())
	}
	return fmt.Sprintf("%012x%016x", 1_767_607_200_000+i/3, rng.Uint64())
}
