package autopilot

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func observeN(c *Controller, at time.Time, n int, e2e time.Duration) {
	for k := range n {
		c.Observe(Observation{At: at.Add(-time.Duration(k) * time.Millisecond), E2E: e2e, TTFT: e2e / 5, CostUSD: 1e-5, Quality: 0.6})
	}
}

// TestControllerStepsOnObservedWindows drives one controller with its own
// clock: misses fall back toward latency, windows and decisions are kept
// for the status, old observations leave the window.
func TestControllerStepsOnObservedWindows(t *testing.T) {
	cfg := LiveConfig{History: 3, Window: 10 * time.Second}.WithDefaults()
	cfg.Params.Persist = 1 // fall back at the first miss (Persist is Decide's, tested there)
	c := newController("c1", Targets{P95E2E: 2 * time.Second}, cfg, t0)
	start := c.Weights()
	now := t0.Add(5 * time.Second)
	observeN(c, now, 50, 3*time.Second) // 1.5× the target
	d := c.Step(context.Background(), now, nil)
	if d.Action != ActionFallback || !(c.Weights().Latency > start.Latency) || d.Predicted {
		t.Fatalf("after a missed window: %+v, weights %v", d, c.Weights())
	}
	if s := Step(start, c.Weights()); s > cfg.Params.MaxStep+1e-9 {
		t.Fatalf("step %.3f", s)
	}
	st := c.Status()
	if len(st.Windows) != 1 || st.Windows[0].TargetMet || st.Windows[0].N != 50 || st.Windows[0].P95E2EMs != 3000 || st.Attainment != 0 {
		t.Fatalf("status %+v", st)
	}
	// 11 s later the old observations are out of the window: nothing
	// observed, hold.
	now = now.Add(11 * time.Second)
	d = c.Step(context.Background(), now, nil)
	if d.Action != ActionHold {
		t.Fatalf("empty window: %+v", d)
	}
	st = c.Status()
	if len(st.Windows) != 2 || st.Windows[1].N != 0 {
		t.Fatalf("windows %+v", st.Windows)
	}
	// A met window: attainment counts judged windows only.
	now = now.Add(5 * time.Second)
	observeN(c, now, 50, time.Second)
	c.Step(context.Background(), now, nil)
	now = now.Add(5 * time.Second)
	c.Step(context.Background(), now, nil)
	st = c.Status()
	if len(st.Windows) != 3 || len(st.Decisions) != 4 {
		t.Fatalf("history kept %d windows, %d decisions; want 3 (capped), 4", len(st.Windows), len(st.Decisions))
	}
	if st.Attainment != 1 { // the missed window fell out of the 3 kept
		t.Fatalf("attainment %v over %+v", st.Attainment, st.Windows)
	}
	if st.Targets.P95E2EMs != 2000 || st.ClusterID != "c1" {
		t.Fatalf("targets %+v cluster %q", st.Targets, st.ClusterID)
	}
}

// TestFailedRequestsMissTheWindow: a failed request counts as infinitely
// late; the status shows -1 for its percentile.
func TestFailedRequestsMissTheWindow(t *testing.T) {
	c := newController("c1", Targets{P95E2E: 2 * time.Second}, LiveConfig{}.WithDefaults(), t0)
	now := t0.Add(5 * time.Second)
	observeN(c, now, 5, time.Second)
	c.Observe(Observation{At: now, Failed: true})
	if d := c.Step(context.Background(), now, nil); d.Action != ActionHold { // 6 < MinWindow: not feedback
		t.Fatalf("%+v", d)
	}
	w := c.Status().Windows[0]
	if w.TargetMet || w.P95E2EMs != -1 {
		t.Fatalf("window %+v", w)
	}
}

// blockingPredictor blocks in Predict until released.
type blockingPredictor struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blockingPredictor) Predict(ctx context.Context, cl *routing.Cluster, cands []routing.Weights) []Prediction {
	close(b.entered)
	<-b.release
	return nil
}

// TestRequestPathNeverWaitsForAStep: while a step is stuck in its
// predictor, Weights, Observe (even with the queue full) and Status
// return at once.
func TestRequestPathNeverWaitsForAStep(t *testing.T) {
	c := newController("c1", Targets{P95E2E: time.Second}, LiveConfig{Buffer: 4}.WithDefaults(), t0)
	c.routed.Store(&routing.Cluster{ID: "c1"})
	p := &blockingPredictor{entered: make(chan struct{}), release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		c.Step(context.Background(), t0.Add(5*time.Second), p)
		close(done)
	}()
	<-p.entered
	fast := make(chan struct{})
	go func() {
		for range 100 {
			_ = c.Weights()
			c.Observe(Observation{At: t0})
		}
		_ = c.Status()
		close(fast)
	}()
	select {
	case <-fast:
	case <-time.After(10 * time.Second):
		t.Fatal("the request path waited for a control step")
	}
	if got := c.Status().Dropped; got != 96 {
		t.Fatalf("dropped %d observations, want 96 (queue of 4)", got)
	}
	close(p.release)
	<-done
}

// TestRegistryStartsOneControllerPerTargetSet: Get before Run fails; per
// (cluster, targets) one controller, stepped by its goroutine, whose hook
// sees each step; Status lists a cluster's controllers; idle ones stop;
// Run returns when its context ends.
func TestRegistryStartsOneControllerPerTargetSet(t *testing.T) {
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	steps := make(chan string, 100)
	reg, err := NewRegistry(LiveConfig{Interval: 10 * time.Millisecond, IdleAfter: time.Minute}, clock, nil,
		Hooks{Step: func(cluster string, tg Targets, w WindowStatus, d DecisionStatus) {
			steps <- cluster + " " + tg.String()
		}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := Targets{P95E2E: time.Second}
	if _, err := reg.Get(&routing.Cluster{ID: "c1"}, a); err != ErrNotRunning {
		t.Fatalf("Get before Run: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error)
	go func() { ran <- reg.Run(ctx) }()
	testwait.Until(t, "registry running", func() bool { _, err := reg.Get(&routing.Cluster{ID: "c1"}, a); return err == nil })
	c1, _ := reg.Get(&routing.Cluster{ID: "c1"}, a)
	c1b, _ := reg.Get(&routing.Cluster{ID: "c1"}, a)
	c2, _ := reg.Get(&routing.Cluster{ID: "c1"}, Targets{P95E2E: time.Second, P95TTFT: 300 * time.Millisecond})
	c3, _ := reg.Get(&routing.Cluster{ID: "c2"}, a)
	if c1 != c1b || c1 == c2 || c1 == c3 {
		t.Fatal("controllers not one per (cluster, targets)")
	}
	testwait.Until(t, "a step of c1's controller", func() bool {
		select {
		case s := <-steps:
			return s == "c1 p95_e2e_ms=1000"
		default:
			return false
		}
	})
	if st := reg.Status("c1"); len(st) != 2 || st[0].Targets.P95TTFTMs != 0 || st[1].Targets.P95TTFTMs != 300 {
		t.Fatalf("status of c1: %+v", st)
	}
	// Nobody uses them for over IdleAfter: they stop and leave.
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	testwait.Until(t, "idle controllers stopped", func() bool { return len(reg.Status("c1")) == 0 && len(reg.Status("c2")) == 0 })
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Get(&routing.Cluster{ID: "c1"}, a); err != ErrNotRunning {
		t.Fatalf("Get after Run: %v", err)
	}
}

// TestWindowArrivalRates: a window's rates count arrivals (completion −
// E2E) over the window and over its last interval, over the controller's
// age while it is younger than the window.
func TestWindowArrivalRates(t *testing.T) {
	c := newController("c1", Targets{P95E2E: time.Second}, LiveConfig{Window: 10 * time.Second, Interval: 5 * time.Second}.WithDefaults(), t0)
	now := t0.Add(time.Minute)
	var obs []Observation
	for k := range 20 { // arrived 6–9 s ago
		obs = append(obs, Observation{At: now.Add(-5 * time.Second), E2E: time.Second + time.Duration(k)*100*time.Millisecond})
	}
	for range 40 { // arrived 2 s ago
		obs = append(obs, Observation{At: now.Add(-time.Second), E2E: time.Second})
	}
	obs = append(obs, Observation{At: now, E2E: 30 * time.Second}) // arrived before the window
	w := c.window(obs, now)
	if w.N != 61 || w.Rate != 6 || w.RecentRate != 8 {
		t.Fatalf("n %d rate %v recent %v, want 61, 6, 8", w.N, w.Rate, w.RecentRate)
	}
	young := newController("c1", Targets{P95E2E: time.Second}, c.cfg, now.Add(-4*time.Second))
	if w := young.window(obs[20:60], now); w.Rate != 10 || w.RecentRate != 10 {
		t.Fatalf("4 s old: rate %v recent %v, want 10, 10", w.Rate, w.RecentRate)
	}
}
