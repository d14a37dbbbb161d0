package sim

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/routing/sim/metrics"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// tinyWorld is one instance of model "m": a request becomes schedulable
// 100 ms after submission, prefill is free, every decode step takes 10 ms
// whatever the batch, and every answer is 5 tokens long (σ = 0). Prices
// are $1 per input token and $2 per output token.
const tinyWorld = `{"name":"tiny","tiers":[{"model":"m","gpu":"g","tensor_parallel":1,"instances":1,
 "tpot_ms_light":10,"tpot_load_factor":1,"max_num_seqs":4,"ttft_overhead_ms":100,"prefill_ms_per_1k_prompt_tokens":0,
 "price_in_per_mtok":1000000,"price_out_per_mtok":2000000,"verbosity":1}],
 "output_lengths":{"sigma":0,"median_tokens_by_task":{"default":5}},"calibration_targets":{}}`

func tiny(t *testing.T) *World {
	t.Helper()
	f, err := engine.ParseCluster([]byte(tinyWorld))
	if err != nil {
		t.Fatal(err)
	}
	return NewWorld(f)
}

// capRouter admits at most cap jobs at once on instance 0 and queues the
// rest FIFO; it stands in for a scheduler only in these bookkeeping tests.
type capRouter struct {
	cap, inflight int
	queue         []*Job
	progress      map[int]int
	released      []routing.Outcome
	scrapes       int
}

func (r *capRouter) BatchLimit(time.Time) int { return 1 }

func (r *capRouter) Assign(_ context.Context, _ time.Time, batch, done []*Job) []*Job {
	for _, j := range batch {
		j.Instance = 0
		if r.inflight < r.cap {
			r.inflight++
			done = append(done, j)
		} else {
			r.queue = append(r.queue, j)
		}
	}
	return done
}

func (r *capRouter) Progress(_ time.Time, j *Job, tokens int) { r.progress[j.Index] = tokens }

func (r *capRouter) Release(_ time.Time, j *Job, o routing.Outcome, done []*Job) []*Job {
	r.inflight--
	r.released = append(r.released, o)
	if len(r.queue) > 0 {
		r.inflight++
		done = append(done, r.queue[0])
		r.queue = r.queue[1:]
	}
	return done
}

func (r *capRouter) Scrape(time.Time, int, engine.State) { r.scrapes++ }

var tinyItems = []workload.Item{{ID: "a", Prompt: "hello there", Scores: map[string]float64{"m": 1}}}

func TestIsolatedRequestsMatchTheInstanceModel(t *testing.T) {
	w := tiny(t)
	cfg := DefaultConfig()
	// λ = 0.001: gaps of ~1,000 s, so every request is alone.
	cfg.Rate, cfg.N, cfg.DecisionCost = 0.001, 3, 0
	r := &capRouter{cap: 4, progress: map[int]int{}}
	res, err := Run(context.Background(), cfg, w, tinyItems, routing.Weights{Quality: 1}, r)
	if err != nil {
		t.Fatal(err)
	}
	p := routing.EstimateChatTokens([]string{"hello there"})
	ms := time.Millisecond
	for k, rec := range res.Records {
		rec.Start = 0
		want := metrics.Record{TTFT: 100 * ms, E2E: 140 * ms, PromptTokens: p, OutputTokens: 5,
			Quality: 1, HasQuality: true, CostUSD: float64(p) + 10, Model: "m", Instance: "m@g#0", Tier: "m@g"}
		if d := cmp.Diff(want, rec, cmpopts.EquateApprox(0, 1e-9)); d != "" {
			t.Errorf("record %d (-want +got):\n%s", k, d)
		}
		if r.progress[k] != 5 {
			t.Errorf("progress of %d = %d, want 5", k, r.progress[k])
		}
	}
	for _, o := range r.released {
		if o.TTFT != 100*ms || o.E2E != 140*ms || o.OutputTokens != 5 {
			t.Errorf("outcome %+v, want TTFT 100ms E2E 140ms 5 tokens", o)
		}
	}
	if r.scrapes == 0 {
		t.Error("no scrapes reached the router")
	}
	c := Summarize(res, metrics.SLO{E2E: 150 * ms})
	if c.MeanE2E != 0.14 || c.MeanTTFT != 0.1 || math.Abs(c.MeanTPOT-0.01) > 1e-12 || c.Quality != 1 || c.GoodFraction != 1 || c.MeanBatch != 1 {
		t.Errorf("cell %+v", c)
	}
	if c.ModelShare["m"] != 1 {
		t.Errorf("model share %v, want m: 1", c.ModelShare)
	}
}

func TestDecisionCostDelaysAdmission(t *testing.T) {
	w := tiny(t)
	cfg := DefaultConfig()
	cfg.Rate, cfg.N, cfg.DecisionCost = 0.001, 2, 50*time.Millisecond
	res, err := Run(context.Background(), cfg, w, tinyItems, routing.Weights{Quality: 1}, &capRouter{cap: 4, progress: map[int]int{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range res.Records {
		if rec.E2E != 190*time.Millisecond || rec.TTFT != 150*time.Millisecond {
			t.Errorf("E2E %v TTFT %v, want 190ms / 150ms (50 ms decision + 140 ms)", rec.E2E, rec.TTFT)
		}
	}
}

func TestQueuedJobsWaitForRelease(t *testing.T) {
	w := tiny(t)
	cfg := DefaultConfig()
	// λ = 10⁶: both requests arrive within microseconds; with one slot the
	// second starts when the first ends, 140 ms later.
	cfg.Rate, cfg.N, cfg.DecisionCost, cfg.Seed = 1e6, 2, 0, 3
	items := []workload.Item{tinyItems[0], {ID: "b", Prompt: "no label here"}}
	res, err := Run(context.Background(), cfg, w, items, routing.Weights{Quality: 1}, &capRouter{cap: 1, progress: map[int]int{}})
	if err != nil {
		t.Fatal(err)
	}
	var e2e []time.Duration
	for _, rec := range res.Records {
		e2e = append(e2e, rec.E2E)
	}
	if got := e2e[0]; got != 140*time.Millisecond {
		t.Errorf("first E2E %v, want 140ms", got)
	}
	if got := e2e[1]; got < 279*time.Millisecond || got > 280*time.Millisecond {
		t.Errorf("second E2E %v, want ≈280ms (waited for the slot)", got)
	}
	c := Summarize(res, metrics.SLO{})
	if c.Completed != 2 || c.Quality != 1 {
		t.Errorf("completed %d quality %v; want 2 and 1 (the unlabelled prompt does not count)", c.Completed, c.Quality)
	}
}

// rejectRouter rejects everything.
type rejectRouter struct{ capRouter }

func (r *rejectRouter) Assign(_ context.Context, _ time.Time, batch, done []*Job) []*Job {
	for _, j := range batch {
		j.Err = routing.ErrNoCapacity
		done = append(done, j)
	}
	return done
}

func TestRejectionsCountAsFailures(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rate, cfg.N, cfg.DecisionCost = 5, 4, 0
	res, err := Run(context.Background(), cfg, tiny(t), tinyItems, routing.Weights{Quality: 1}, &rejectRouter{})
	if err != nil {
		t.Fatal(err)
	}
	if c := Summarize(res, metrics.SLO{}); c.Failed != 4 || c.Completed != 0 {
		t.Errorf("failed %d completed %d, want 4/0", c.Failed, c.Completed)
	}
}

// holdRouter never admits anything: the loop must stop with an error, not
// spin.
type holdRouter struct{ capRouter }

func (r *holdRouter) Assign(_ context.Context, _ time.Time, _, done []*Job) []*Job { return done }

func TestStallIsAnError(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rate, cfg.N, cfg.DecisionCost = 5, 2, 0
	if _, err := Run(context.Background(), cfg, tiny(t), tinyItems, routing.Weights{}, &holdRouter{}); err == nil {
		t.Error("a router that holds every job must end the run with an error")
	}
}

func TestRunIsDeterministic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rate, cfg.N, cfg.DecisionCost = 40, 50, 0
	a, err := Run(context.Background(), cfg, tiny(t), tinyItems, routing.Weights{}, &capRouter{cap: 2, progress: map[int]int{}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), cfg, tiny(t), tinyItems, routing.Weights{}, &capRouter{cap: 2, progress: map[int]int{}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(a.Records, b.Records); d != "" {
		t.Errorf("two runs differ:\n%s", d)
	}
}

func TestCapacities(t *testing.T) {
	cells := []Cell{
		{Policy: "a", Rate: 6, MeanE2E: 2},
		{Policy: "a", Rate: 12, MeanE2E: 3},
		{Policy: "a", Rate: 18, MeanE2E: 6}, // bound 4 crossed between 12 and 18: 12 + 6·(4−3)/(6−3) = 14
		{Policy: "b", Rate: 6, MeanE2E: 1},
		{Policy: "b", Rate: 30, MeanE2E: 1.5},
	}
	got := Capacities(cells, 2)
	want := []Capacity{
		{Label: "a", LightE2E: 2, Swept: 12, Interpolated: 14},
		{Label: "b", LightE2E: 1, Swept: 30, Interpolated: 30, AllUnder: true},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Capacities (-want +got):\n%s", d)
	}
}
