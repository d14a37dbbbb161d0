package schedule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing"
)

// fakeClock is a manually advanced clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func testCluster(policy string, n int) *routing.Cluster {
	c := &routing.Cluster{ID: "c1", TenantID: "t1", Version: 1, Policy: routing.PolicyConfig{Name: policy}}
	for i := range n {
		c.Instances = append(c.Instances, routing.Instance{
			ID: fmt.Sprintf("i%d", i), Model: "m", GPU: "a10", PriceInPerMTok: 1, PriceOutPerMTok: 2,
		})
	}
	return c
}

// startRouter runs a router with the fake clock and no scraping until the
// test ends.
func startRouter(t *testing.T, cfg Config, deps Deps) (*Router, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	deps.Clock = clock
	deps.NoScrape = true
	r, err := NewRouter(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r, clock
}

func route(t *testing.T, r *Router, c *routing.Cluster, req *routing.Request) *routing.Assignment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := r.Route(ctx, c, req)
	if err != nil {
		t.Fatalf("Route(%s): %v", req.ID, err)
	}
	return a
}

// inFlight returns the in-flight and queue counts per instance.
func inFlight(r *Router, id string) map[string][2]int {
	out := map[string][2]int{}
	for _, s := range r.State(id) {
		out[s.ID] = [2]int{s.InFlight, s.Queue}
	}
	return out
}

func zeroCounts(ids ...string) map[string][2]int {
	out := map[string][2]int{}
	for _, id := range ids {
		out[id] = [2]int{}
	}
	return out
}

func TestShortestQueueAndRoundRobin(t *testing.T) {
	for _, tc := range []struct {
		policy string
		// release lists the picks after which the previous assignment is
		// released right away.
		release map[int]bool
		want    []string
	}{
		{policy: PolicyShortestQueue, want: []string{"i0", "i1", "i2", "i0", "i1", "i2"}},
		// i1 freed after the second pick: fewest in flight beats the cursor.
		{policy: PolicyShortestQueue, release: map[int]bool{1: true}, want: []string{"i0", "i1", "i2", "i1", "i2", "i0"}},
		{policy: PolicyRoundRobin, release: map[int]bool{0: true}, want: []string{"i0", "i1", "i2", "i0", "i1", "i2"}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			r, _ := startRouter(t, Config{}, Deps{})
			c := testCluster(tc.policy, 3)
			var got []string
			var held []*routing.Assignment
			for k := range tc.want {
				a := route(t, r, c, &routing.Request{ID: fmt.Sprint(k), Prompt: "hi"})
				got = append(got, a.Instance.ID)
				if a.Policy != tc.policy {
					t.Errorf("Decision.Policy = %q, want %q", a.Policy, tc.policy)
				}
				if tc.release[k] {
					a.Release(routing.Outcome{})
				} else {
					held = append(held, a)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("picks (-want +got):\n%s", diff)
			}
			for _, a := range held {
				a.Release(routing.Outcome{})
				a.Release(routing.Outcome{}) // second call is a no-op
			}
			if diff := cmp.Diff(zeroCounts("i0", "i1", "i2"), inFlight(r, "c1")); diff != "" {
				t.Errorf("counters after release (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExcludeDisabledAndErrors(t *testing.T) {
	r, _ := startRouter(t, Config{}, Deps{})
	c := testCluster(PolicyShortestQueue, 3)
	c.Instances[1].Disabled = true
	for k := range 4 {
		a := route(t, r, c, &routing.Request{ID: fmt.Sprint(k), Exclude: []string{"i0"}})
		if a.Instance.ID != "i2" {
			t.Errorf("pick %d = %s, want i2 (i0 excluded, i1 disabled)", k, a.Instance.ID)
		}
		a.Release(routing.Outcome{})
	}
	ctx := context.Background()
	if _, err := r.Route(ctx, c, &routing.Request{ID: "x", Model: "nope"}); !errors.Is(err, routing.ErrUnknownModel) {
		t.Errorf("unknown model: err = %v, want ErrUnknownModel", err)
	}
	if _, err := r.Route(ctx, c, &routing.Request{ID: "y", Exclude: []string{"i0", "i2"}}); !errors.Is(err, routing.ErrNoHealthyInstance) {
		t.Errorf("all excluded: err = %v, want ErrNoHealthyInstance", err)
	}
	if _, err := r.Route(ctx, c, &routing.Request{ID: "z", Policy: "bogus"}); err == nil {
		t.Error("unknown policy: no error")
	} else if fe := new(routing.FieldError); !errors.As(err, &fe) {
		t.Errorf("unknown policy: err = %v, want a *routing.FieldError", err)
	}
}

// TestAdmissionQueue covers the in-flight cap: a request beyond it waits,
// is admitted when a slot frees, and a cancelled waiter leaves the queue;
// every path leaves the counters at zero.
func TestAdmissionQueue(t *testing.T) {
	r, _ := startRouter(t, Config{}, Deps{})
	c := testCluster(PolicyShortestQueue, 1)
	c.Instances[0].MaxConcurrency = 1

	first := route(t, r, c, &routing.Request{ID: "first"})

	// A waiter that gives up leaves the queue.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := r.Route(ctx, c, &routing.Request{ID: "quitter"})
		errc <- err
	}()
	testwait.Until(t, "one running and one queued on i0", func() bool { return inFlight(r, "c1")["i0"] == [2]int{1, 1} })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: err = %v, want context.Canceled", err)
	}
	if got := inFlight(r, "c1")["i0"]; got != [2]int{1, 0} {
		t.Fatalf("after cancel: in-flight, queue = %v, want [1 0]", got)
	}

	// A patient waiter is admitted when the slot frees.
	got := make(chan *routing.Assignment, 1)
	go func() {
		a, err := r.Route(context.Background(), c, &routing.Request{ID: "second"})
		if err != nil {
			t.Errorf("second: %v", err)
		}
		got <- a
	}()
	testwait.Until(t, "one running and one queued on i0", func() bool { return inFlight(r, "c1")["i0"] == [2]int{1, 1} })
	first.Release(routing.Outcome{OutputTokens: 5})
	second := <-got
	if second == nil {
		t.FailNow()
	}
	if got := inFlight(r, "c1")["i0"]; got != [2]int{1, 0} {
		t.Errorf("second admitted: in-flight, queue = %v, want [1 0]", got)
	}
	second.Release(routing.Outcome{Err: errors.New("boom"), Upstream: true})
	if diff := cmp.Diff(zeroCounts("i0"), inFlight(r, "c1")); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
}

// TestCountersEveryPath: success, upstream error, client error, a panic in
// the caller with a deferred Release, and cancellation while queued all
// return the counters to zero.
func TestCountersEveryPath(t *testing.T) {
	r, _ := startRouter(t, Config{}, Deps{})
	c := testCluster(PolicyShortestQueue, 2)
	c.Instances[0].MaxConcurrency = 1
	c.Instances[1].MaxConcurrency = 1
	serve := func(id string, o routing.Outcome, panics bool) (recovered any) {
		defer func() { recovered = recover() }()
		a := route(t, r, c, &routing.Request{ID: id})
		defer a.Release(o)
		if panics {
			panic("handler bug")
		}
		return nil
	}
	serve("ok", routing.Outcome{OutputTokens: 10}, false)
	serve("upstream", routing.Outcome{Err: errors.New("503"), Upstream: true}, false)
	serve("client", routing.Outcome{Err: context.Canceled}, false)
	if p := serve("panic", routing.Outcome{Err: errors.New("panic")}, true); p == nil {
		t.Error("panic was not raised")
	}
	// Cancel while queued: fill both slots, queue one, cancel it.
	a := route(t, r, c, &routing.Request{ID: "a"})
	b := route(t, r, c, &routing.Request{ID: "b"})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.Route(ctx, c, &routing.Request{ID: "queued"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued: err = %v, want deadline exceeded", err)
	}
	a.Release(routing.Outcome{})
	b.Release(routing.Outcome{})
	if diff := cmp.Diff(zeroCounts("i0", "i1"), inFlight(r, "c1")); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
}

// TestVersionChangeKeepsCounters: a new cluster version keeps the live
// counters of instances that persist and drops removed ones.
func TestVersionChangeKeepsCounters(t *testing.T) {
	r, _ := startRouter(t, Config{}, Deps{})
	c := testCluster(PolicyShortestQueue, 2)
	a := route(t, r, c, &routing.Request{ID: "a"}) // i0
	b := route(t, r, c, &routing.Request{ID: "b"}) // i1
	c2 := testCluster(PolicyShortestQueue, 3)
	c2.Version = 2
	c2.Instances = c2.Instances[1:] // i1, i2
	x := route(t, r, c2, &routing.Request{ID: "x"})
	if x.Instance.ID != "i2" {
		t.Errorf("after update picked %s, want i2 (i1 still busy)", x.Instance.ID)
	}
	want := map[string][2]int{"i1": {1, 0}, "i2": {1, 0}}
	if diff := cmp.Diff(want, inFlight(r, "c1")); diff != "" {
		t.Errorf("state after update (-want +got):\n%s", diff)
	}
	for _, as := range []*routing.Assignment{a, b, x} {
		as.Release(routing.Outcome{})
	}
	if diff := cmp.Diff(zeroCounts("i1", "i2"), inFlight(r, "c1")); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
}

// gateEstimator blocks its first call until the test opens the gate, so
// requests arriving meanwhile pile up for the next batch.
type gateEstimator struct {
	entered chan struct{}
	gate    chan struct{}
	mu      sync.Mutex
	batches []int
}

func (g *gateEstimator) Estimate(ctx context.Context, prompts []string, models []string, priors []float64, out []routing.PromptEstimate) error {
	g.mu.Lock()
	first := len(g.batches) == 0
	g.batches = append(g.batches, len(prompts))
	g.mu.Unlock()
	if first {
		close(g.entered)
		<-g.gate
	}
	return priorEstimator{tokens: 100}.Estimate(ctx, prompts, models, priors, out)
}

// TestBatchingWithoutBubble: a lone request on an idle scheduler is a
// batch of one; requests arriving while it is computed form the next
// batch, and every decision reports its batch size.
func TestBatchingWithoutBubble(t *testing.T) {
	est := &gateEstimator{entered: make(chan struct{}), gate: make(chan struct{})}
	r, _ := startRouter(t, Config{}, Deps{Estimator: est})
	c := testCluster(PolicyRouteBalance, 3)
	type res struct {
		a   *routing.Assignment
		err error
	}
	results := make(chan res, 4)
	go func() {
		a, err := r.Route(context.Background(), c, &routing.Request{ID: "lone"})
		results <- res{a, err}
	}()
	<-est.entered
	for k := range 3 {
		go func() {
			a, err := r.Route(context.Background(), c, &routing.Request{ID: fmt.Sprint("late", k)})
			results <- res{a, err}
		}()
	}
	testwait.Until(t, "three requests pending on c1", func() bool {
		run := r.clusters["c1"]
		run.mu.Lock()
		defer run.mu.Unlock()
		return len(run.pending) == 3
	})
	close(est.gate)
	sizes := map[string]int{}
	for range 4 {
		x := <-results
		if x.err != nil {
			t.Fatal(x.err)
		}
		sizes[fmt.Sprint(x.a.BatchSize)]++
		x.a.Release(routing.Outcome{})
	}
	if diff := cmp.Diff(map[string]int{"1": 1, "3": 3}, sizes); diff != "" {
		t.Errorf("requests per batch size (-want +got):\n%s", diff)
	}
	est.mu.Lock()
	defer est.mu.Unlock()
	if diff := cmp.Diff([]int{1, 3}, est.batches); diff != "" {
		t.Errorf("estimator batches (-want +got):\n%s", diff)
	}
}

func TestBatchLimit(t *testing.T) {
	for _, tc := range []struct {
		cfg  BatchConfig
		busy float64
		want int
	}{
		{BatchConfig{MinBatch: 4, MaxBatch: 64}, 0, 4},
		{BatchConfig{MinBatch: 4, MaxBatch: 64}, 0.5, 34},
		{BatchConfig{MinBatch: 4, MaxBatch: 64}, 1, 64},
		{BatchConfig{MinBatch: 4, MaxBatch: 64, NoAdaptive: true}, 0, 64},
		{BatchConfig{MinBatch: 4, MaxBatch: 64, Fixed: 8}, 1, 8},
	} {
		if got := tc.cfg.Limit(tc.busy); got != tc.want {
			t.Errorf("%+v.Limit(%v) = %d, want %d", tc.cfg, tc.busy, got, tc.want)
		}
	}
	// The core's limit follows the share of instances at capacity.
	c := testCluster(PolicyShortestQueue, 2)
	c.Instances[0].MaxConcurrency = 1
	core := newCore(t, Config{Batch: BatchConfig{MinBatch: 2, MaxBatch: 10}}, Deps{}, c)
	if got := core.BatchLimit(t0); got != 2 {
		t.Errorf("idle limit = %d, want 2", got)
	}
	assign(core, t0, &routing.Request{ID: "a"}) // fills i0 (cap 1)
	if got := core.BatchLimit(t0); got != 6 {
		t.Errorf("half-busy limit = %d, want 6", got)
	}
}

// TestRouterScrapes: Run owns a scraper per cluster that feeds /metrics
// into the state view.
func TestRouterScrapes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 5\n"+
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 2\n")
	}))
	defer srv.Close()
	clock := newFakeClock()
	cfg := Config{}
	cfg.Fleet.ScrapeInterval = 5 * time.Millisecond
	r, err := NewRouter(cfg, Deps{Clock: clock, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	c := testCluster(PolicyShortestQueue, 1)
	c.Instances[0].BaseURL = srv.URL + "/v1"
	route(t, r, c, &routing.Request{ID: "a"}).Release(routing.Outcome{})
	testwait.Until(t, "a fresh scrape of c1", func() bool { s := r.State("c1"); return !s[0].Stale })
	s := r.State("c1")[0]
	if s.Running != 5 || s.Waiting != 2 {
		t.Errorf("state running/waiting = %v/%v, want 5/2", s.Running, s.Waiting)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := r.Route(context.Background(), c, &routing.Request{ID: "late"}); !errors.Is(err, routing.ErrClosed) {
		t.Errorf("Route after Run ended: err = %v, want ErrClosed", err)
	}
}

// TestEjectionRequeues: when a failed request ejects an instance, the
// requests queued on it are decided again onto healthy instances.
func TestEjectionRequeues(t *testing.T) {
	cfg := Config{}
	cfg.Fleet.EjectAfter = 1
	r, _ := startRouter(t, cfg, Deps{})
	c := testCluster(PolicyShortestQueue, 2)
	c.Instances[0].MaxConcurrency = 1
	c.Instances[1].MaxConcurrency = 1
	a := route(t, r, c, &routing.Request{ID: "a"}) // i0
	b := route(t, r, c, &routing.Request{ID: "b"}) // i1
	got := make(chan *routing.Assignment, 1)
	go func() {
		x, err := r.Route(context.Background(), c, &routing.Request{ID: "c"})
		if err != nil {
			t.Errorf("c: %v", err)
		}
		got <- x
	}()
	testwait.Until(t, "one running and one queued on i0", func() bool { return inFlight(r, "c1")["i0"] == [2]int{1, 1} }) // queued on i0 (round-robin tie)
	a.Release(routing.Outcome{Err: errors.New("connection refused"), Upstream: true})
	testwait.Until(t, "one running and one queued on i1", func() bool { return inFlight(r, "c1")["i1"] == [2]int{1, 1} })
	if s := r.State("c1")[0]; s.Healthy || s.Queue != 0 {
		t.Errorf("i0 after the failure: healthy %v queue %d, want ejected and empty", s.Healthy, s.Queue)
	}
	b.Release(routing.Outcome{})
	x := <-got
	if x == nil {
		t.FailNow()
	}
	if x.Instance.ID != "i1" {
		t.Errorf("c served by %s, want i1", x.Instance.ID)
	}
	x.Release(routing.Outcome{})
	if diff := cmp.Diff(zeroCounts("i0", "i1"), inFlight(r, "c1")); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
}

// TestIdleClusterRetired: a cluster with nothing in flight and no request
// for IdleAfter is retired (its goroutines stop); one with a request in
// flight is kept; a later request builds it again.
func TestIdleClusterRetired(t *testing.T) {
	r, clock := startRouter(t, Config{IdleAfter: time.Minute}, Deps{})
	busy, idle := testCluster(PolicyShortestQueue, 1), testCluster(PolicyShortestQueue, 1)
	busy.ID, idle.ID = "busy", "idle"
	held := route(t, r, busy, &routing.Request{ID: "held"})
	route(t, r, idle, &routing.Request{ID: "done"}).Release(routing.Outcome{})
	r.sweepIdle(clock.Now())
	if r.State("idle") == nil {
		t.Fatal("cluster retired before IdleAfter")
	}
	clock.Advance(2 * time.Minute)
	r.sweepIdle(clock.Now())
	if r.State("idle") != nil {
		t.Error("idle cluster not retired")
	}
	if r.State("busy") == nil {
		t.Error("cluster with a request in flight retired")
	}
	held.Release(routing.Outcome{})
	a := route(t, r, idle, &routing.Request{ID: "again"})
	if a.Instance.ID != "i0" {
		t.Errorf("rebuilt cluster chose %s", a.Instance.ID)
	}
	a.Release(routing.Outcome{})
}
