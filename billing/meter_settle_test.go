package billing_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/internal/billingtest"
	"github.com/routebalance/routebalance/internal/testwait"
)

// errAnswerLost stands for a connection that broke after the server
// committed, before the client read the answer.
var errAnswerLost = errors.New("connection lost after commit")

// hookLedger wraps a real ledger (Postgres or SQLite) with hooks that
// place a failure or a delay exactly where a race on a loaded machine
// would put it. The rows are really written by the wrapped store.
type hookLedger struct {
	billing.Ledger
	afterInsert func(evs []billing.UsageEvent, err error) error // nil: pass the answer through
	beforeSpend func() error                                    // nil: read the totals
	afterSpend  func()
}

func (h *hookLedger) Insert(ctx context.Context, evs []billing.UsageEvent) ([]string, error) {
	ids, err := h.Ledger.Insert(ctx, evs)
	if h.afterInsert != nil {
		if herr := h.afterInsert(evs, err); herr != nil {
			return nil, herr
		}
	}
	return ids, err
}

func (h *hookLedger) PeriodSpend(ctx context.Context, since time.Time) ([]billing.PeriodSpend, error) {
	if h.beforeSpend != nil {
		if err := h.beforeSpend(); err != nil {
			return nil, err
		}
	}
	rows, err := h.Ledger.PeriodSpend(ctx, since)
	if err == nil && h.afterSpend != nil {
		h.afterSpend()
	}
	return rows, err
}

func hasRequest(evs []billing.UsageEvent, id string) bool {
	return slices.ContainsFunc(evs, func(ev billing.UsageEvent) bool { return ev.RequestID == id })
}

// TestMeterSettlesOnceWhenStopRacesACommit stops the meter exactly while
// the commit of the last batch is answered (the answer is lost: the rows
// are stored, Insert reports an error): the shutdown writes that batch
// again and finds its rows stored. The Guard must count every event once —
// neither drop the batch as a duplicate nor, for a spill file whose replay
// was cut, take the spend of its already settled events out a second time
// (TestMeterSurvivesDatabaseOutage once saw 99 of 3,000 events' spend).
func TestMeterSettlesOnceWhenStopRacesACommit(t *testing.T) {
	for _, spilled := range []bool{false, true} {
		name := map[bool]string{false: "queued", true: "spilled"}[spilled]
		t.Run(name, func(t *testing.T) {
			for _, e := range engines(t) {
				t.Run(e.name, func(t *testing.T) { stopRacesCommit(t, e, spilled) })
			}
		})
	}
}

func stopRacesCommit(t *testing.T, e engine, spilled bool) {
	now := meterBase
	clk := billingtest.NewClock(now)
	n := 10
	cfg := testConfig(t.TempDir())
	gate := make(chan struct{}) // the spilled case holds writes until every event is recorded
	if spilled {
		n, cfg.Buffer = 1000, 8 // writers hold ≤ 2×Batch, the queue 8: the last event spills
	} else {
		close(gate)
	}
	last := event(now, n-1, "t1").RequestID
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var fired atomic.Bool
	h := &hookLedger{Ledger: e.ledger}
	h.afterInsert = func(evs []billing.UsageEvent, err error) error {
		if err == nil && hasRequest(evs, last) && fired.CompareAndSwap(false, true) {
			cancel() // the meter is stopped while the commit's answer is on its way
			return errAnswerLost
		}
		return nil
	}
	guard := billing.NewGuard(clk, time.Hour)
	m, err := billing.NewMeter(cfg, &gatedLedger{hookLedger: h, gate: gate}, guard, nil, clk)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	for i := range n {
		m.Record(event(now, i, "t1"))
	}
	if spilled {
		close(gate)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !fired.Load() {
		t.Fatal("the last event's batch was never written")
	}
	st := m.Stats()
	if spilled && st.Spilled == 0 {
		t.Fatalf("stats %+v: nothing spilled; the test did not exercise replay", st)
	}
	if rows, _ := e.count(t); rows != n {
		t.Errorf("rows = %d, want %d", rows, n)
	}
	if got, want := guard.Spent("t1"), billing.Nano(n*2_000_000); got != want {
		t.Errorf("spend = %v, want %v (stats %+v)", got, want, st)
	}
}

// gatedLedger holds every Insert until gate is closed.
type gatedLedger struct {
	*hookLedger
	gate chan struct{}
}

func (g *gatedLedger) Insert(ctx context.Context, evs []billing.UsageEvent) ([]string, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.hookLedger.Insert(ctx, evs)
}

// TestGuardReloadKeepsAConcurrentWrite lets a batch commit and settle
// while the periodic reload has read the ledger's totals but not yet
// installed them (the reload is held there for up to a second): the
// installed totals must not erase the batch's spend.
func TestGuardReloadKeepsAConcurrentWrite(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) {
			clk := billingtest.NewClock(meterBase)
			var calls atomic.Int32
			snapped, written := make(chan struct{}), make(chan struct{})
			var once sync.Once
			h := &hookLedger{Ledger: e.ledger}
			h.beforeSpend = func() error {
				if calls.Add(1) > 2 {
					return errors.New("later reloads fail, so the second one's result stays")
				}
				return nil
			}
			h.afterSpend = func() {
				if calls.Load() == 2 {
					close(snapped)
					select { // a write that can commit now does so well within this
					case <-written:
					case <-time.After(time.Second):
					}
				}
			}
			h.afterInsert = func(_ []billing.UsageEvent, err error) error {
				if err == nil {
					once.Do(func() { close(written) })
				}
				return nil
			}
			m, guard, stop := startRefreshing(t, h, clk)
			<-snapped
			m.Record(event(meterBase, 1, "t1"))
			testwait.Until(t, "the write and the reload after it", func() bool {
				return m.Stats().Written == 1 && calls.Load() > 2
			})
			if got, want := guard.Spent("t1"), billing.Nano(2_000_000); got != want {
				t.Errorf("spend = %v, want %v: the reload dropped a batch committed while it read the totals", got, want)
			}
			stop()
		})
	}
}

// TestGuardCountsAnUncertainBatchOnceAcrossAReload fails a batch's commit
// answer (the rows are stored) and lets the retry run only after a reload
// has read the ledger, which already holds the rows: the retry finds them
// stored, and the Guard must not add them on top of the reloaded totals.
func TestGuardCountsAnUncertainBatchOnceAcrossAReload(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) {
			clk := billingtest.NewClock(meterBase)
			var failed atomic.Bool
			var reloadsAfter atomic.Int32 // reloads since the lost answer
			h := &hookLedger{Ledger: e.ledger}
			h.afterInsert = func(_ []billing.UsageEvent, err error) error {
				if err == nil && failed.CompareAndSwap(false, true) {
					return errAnswerLost
				}
				if failed.Load() && reloadsAfter.Load() == 0 {
					return errors.New("database still unreachable") // retry until a reload ran
				}
				return nil
			}
			h.beforeSpend = func() error {
				if failed.Load() && reloadsAfter.Load() > 0 {
					return errors.New("later reloads fail, so the first one's result stays")
				}
				return nil
			}
			h.afterSpend = func() {
				if failed.Load() {
					reloadsAfter.Add(1)
				}
			}
			m, guard, stop := startRefreshing(t, h, clk)
			m.Record(event(meterBase, 1, "t1"))
			testwait.Until(t, "the retry after the reload", func() bool { return m.Stats().Duplicates == 1 })
			if got, want := guard.Spent("t1"), billing.Nano(2_000_000); got != want {
				t.Errorf("spend = %v, want %v: the batch was counted by the reload and again by its retry", got, want)
			}
			stop()
		})
	}
}

// startRefreshing runs a meter on ledger that reloads the spend every
// 20 ms.
func startRefreshing(t *testing.T, ledger billing.Ledger, clk billing.Clock) (*billing.Meter, *billing.Guard, func()) {
	cfg := testConfig(t.TempDir())
	cfg.SpendRefresh = 20 * time.Millisecond
	guard := billing.NewGuard(clk, time.Hour)
	m, err := billing.NewMeter(cfg, ledger, guard, nil, clk)
	if err != nil {
		t.Fatal(err)
	}
	return m, guard, runMeter(t, m)
}
