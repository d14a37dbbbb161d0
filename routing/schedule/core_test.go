package schedule

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/fleet"
	"github.com/routebalance/routebalance/routing/latency"
)

// tableEstimator answers from per-prompt tables indexed by model name;
// prompts it does not know get the priors and a length of 100.
type tableEstimator struct {
	quality map[string]map[string]float64
	length  map[string]map[string]float64
	hist    map[string]map[string]routing.LengthHist
	calls   int
}

func (e *tableEstimator) Estimate(_ context.Context, prompts []string, models []string, priors []float64, out []routing.PromptEstimate) error {
	e.calls++
	for j, p := range prompts {
		out[j].Reset(len(models))
		for m, name := range models {
			out[j].Quality[m], out[j].Source[m] = priors[m], routing.SourcePrior
			if q, ok := e.quality[p][name]; ok {
				out[j].Quality[m], out[j].Source[m] = q, routing.SourceIndex
			}
			out[j].Length[m] = 100
			if l, ok := e.length[p][name]; ok {
				out[j].Length[m] = l
			}
			if h, ok := e.hist[p][name]; ok {
				out[j].Hist[m] = h
			}
		}
	}
	return nil
}

// tierLatency is a plain-value latency model: TPOT = base[tier] +
// perSeq·running, TTFT = ttft[tier].
type tierLatency struct {
	tpot   map[string]float64
	perSeq float64
	ttft   map[string]float64
}

func (l tierLatency) TPOT(tier string, ld routing.Load) float64 {
	return l.tpot[tier] + l.perSeq*ld.Running
}

func (l tierLatency) TTFT(tier string, _ routing.Load) float64 { return l.ttft[tier] }

// twoTier is a cluster of a big model (good, expensive, fast first token,
// slower decode per token but few replicas) and a small one.
//
//	big:   Q 0.9, price out 10/Mtok, TTFT 0.2 s, TPOT 0.04 s
//	small: Q 0.5, price out 1/Mtok,  TTFT 0.05 s, TPOT 0.01 s
func twoTier() (*routing.Cluster, *tableEstimator, tierLatency) {
	c := &routing.Cluster{ID: "c", Version: 1, Instances: []routing.Instance{
		{ID: "big-0", Model: "big", GPU: "h100", PriceInPerMTok: 5, PriceOutPerMTok: 10},
		{ID: "small-0", Model: "small", GPU: "a10", PriceInPerMTok: 0.5, PriceOutPerMTok: 1},
	}}
	est := &tableEstimator{
		quality: map[string]map[string]float64{"q": {"big": 0.9, "small": 0.5}},
		length:  map[string]map[string]float64{"q": {"big": 100, "small": 100}},
	}
	lat := tierLatency{
		tpot: map[string]float64{"big@h100": 0.04, "small@a10": 0.01},
		ttft: map[string]float64{"big@h100": 0.2, "small@a10": 0.05},
	}
	return c, est, lat
}

func newCore(t *testing.T, cfg Config, deps Deps, c *routing.Cluster) *Core {
	t.Helper()
	if deps.Stopwatch == nil {
		deps.Stopwatch = func() time.Duration { return 0 }
	}
	core, err := NewCore(cfg, deps, c)
	if err != nil {
		t.Fatal(err)
	}
	return core
}

// assign runs one batch and returns its tickets.
func assign(core *Core, now time.Time, reqs ...*routing.Request) []*Ticket {
	ts := make([]*Ticket, len(reqs))
	for j, r := range reqs {
		ts[j] = &Ticket{Req: r, Notify: func(*Ticket) {}}
	}
	core.Assign(context.Background(), now, ts)
	return ts
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// recorder is a policy that records the order it is asked in and then
// defers to an inner policy.
type recorder struct {
	order []string
	inner Policy
}

func (p *recorder) Pick(r *routing.Request, w routing.Weights, c []Candidate) int {
	p.order = append(p.order, r.ID)
	return p.inner.Pick(r, w, c)
}

func TestLPTOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		noLPT bool
		want  []string
	}{
		{"lpt", false, []string{"long", "mid", "short"}},
		{"arrival order when LPT is off", true, []string{"short", "long", "mid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, lat := twoTier()
			c.Policy.Name = "rec"
			est := &tableEstimator{length: map[string]map[string]float64{
				"short": {"big": 10, "small": 12},
				"long":  {"big": 900, "small": 700},
				"mid":   {"big": 200, "small": 300},
			}}
			rec := &recorder{inner: &RouteBalance{}}
			reg := NewRegistry()
			reg.Register("rec", func(routing.PolicyConfig) (Policy, error) { return rec, nil })
			core := newCore(t, Config{Batch: BatchConfig{NoLPT: tc.noLPT}}, Deps{Estimator: est, Latency: lat, Policies: reg}, c)
			ts := assign(core, t0,
				&routing.Request{ID: "short", Prompt: "short"},
				&routing.Request{ID: "long", Prompt: "long"},
				&routing.Request{ID: "mid", Prompt: "mid"})
			if diff := cmp.Diff(tc.want, rec.order); diff != "" {
				t.Errorf("pick order (-want +got):\n%s", diff)
			}
			if est.calls != 1 {
				t.Errorf("estimator called %d times for one batch, want 1", est.calls)
			}
			for _, tk := range ts {
				if tk.Decision.BatchSize != 3 {
					t.Errorf("%s: BatchSize = %d, want 3", tk.Req.ID, tk.Decision.BatchSize)
				}
			}
		})
	}
}

// TestNoHerding: a batch of identical requests over identical instances
// spreads out, because every pick updates the local view.
func TestNoHerding(t *testing.T) {
	c := &routing.Cluster{ID: "c", Version: 1}
	for i := range 4 {
		c.Instances = append(c.Instances, routing.Instance{ID: fmt.Sprintf("i%d", i), Model: "m", GPU: "g", PriceOutPerMTok: 1})
	}
	lat := tierLatency{tpot: map[string]float64{"m@g": 0.02}, perSeq: 0.002, ttft: map[string]float64{"m@g": 0.1}}
	core := newCore(t, Config{}, Deps{Latency: lat}, c)
	var reqs []*routing.Request
	for k := range 8 {
		reqs = append(reqs, &routing.Request{ID: fmt.Sprint(k), Prompt: "same", Weights: routing.Weights{Latency: 1}})
	}
	ts := assign(core, t0, reqs...)
	count := map[string]int{}
	for _, tk := range ts {
		count[tk.Decision.Instance.ID]++
	}
	want := map[string]int{"i0": 2, "i1": 2, "i2": 2, "i3": 2}
	if diff := cmp.Diff(want, count); diff != "" {
		t.Errorf("requests per instance (-want +got):\n%s", diff)
	}
}

// TestFiltersAndRelaxation covers every soft filter, the relaxation order
// and the budget fallback, on the two-tier cluster.
func TestFiltersAndRelaxation(t *testing.T) {
	quality := routing.Weights{Quality: 1}
	cost := routing.Weights{Cost: 1}
	// small's output length has a long tail: 90 % quantile 4671 tokens.
	var tail routing.LengthHist
	tail.Add(100, 0.5)
	tail.Add(4000, 0.5)
	for _, tc := range []struct {
		name        string
		req         routing.Request
		want        string
		wantRelaxed []string
		wantMax     int
	}{
		{name: "no filter, quality weights", req: routing.Request{Weights: quality}, want: "big-0"},
		{name: "no filter, cost weights", req: routing.Request{Weights: cost}, want: "small-0"},
		// TTFT: big 0.2 s, small 0.05 s.
		{name: "ttft keeps small", req: routing.Request{Weights: quality, SLO: routing.SLO{TTFT: 100 * time.Millisecond}}, want: "small-0"},
		{name: "ttft nobody meets", req: routing.Request{Weights: quality, SLO: routing.SLO{TTFT: time.Millisecond}}, want: "big-0", wantRelaxed: []string{"ttft"}},
		// TPOT: big 0.04 s, small 0.01 s (+0 per sequence).
		{name: "tpot keeps small", req: routing.Request{Weights: quality, SLO: routing.SLO{TPOT: 20 * time.Millisecond}}, want: "small-0"},
		{name: "tpot nobody meets", req: routing.Request{Weights: quality, SLO: routing.SLO{TPOT: time.Millisecond}}, want: "big-0", wantRelaxed: []string{"tpot"}},
		// E2E: big 0.2+0.04·100 = 4.2 s; small 0.05+0.01·100 = 1.05 s at
		// the mean but 0.05+0.01·4671 ≈ 46.8 s at the 90 % quantile.
		{name: "e2e uses the histogram", req: routing.Request{Prompt: "tail", Weights: cost, SLO: routing.SLO{E2E: 5 * time.Second}}, want: "big-0"},
		{name: "quality floor", req: routing.Request{Weights: cost, QualityFloor: 0.8}, want: "big-0"},
		{name: "quality floor nobody meets", req: routing.Request{Weights: cost, QualityFloor: 0.95}, want: "small-0", wantRelaxed: []string{"quality"}},
		// Cost of 1000 prompt + 100 output tokens: big 0.006, small 0.0006.
		{name: "budget keeps small", req: routing.Request{Weights: quality, PromptTokens: 1000, BudgetUSD: 0.001}, want: "small-0", wantMax: 500},
		{name: "budget from SLO max cost", req: routing.Request{Weights: quality, PromptTokens: 1000, SLO: routing.SLO{MaxCostUSD: 0.001}}, want: "small-0", wantMax: 500},
		{name: "budget nobody meets: cheapest", req: routing.Request{Weights: quality, PromptTokens: 1000, BudgetUSD: 0.0001}, want: "small-0", wantRelaxed: []string{"budget"}, wantMax: 1},
		// Budget only small meets and quality floor only big meets:
		// quality is relaxed before budget.
		{name: "quality relaxed before budget", req: routing.Request{Weights: quality, PromptTokens: 1000, BudgetUSD: 0.001, QualityFloor: 0.8}, want: "small-0", wantRelaxed: []string{"quality"}, wantMax: 500},
		// TTFT only small meets, quality floor only big meets: TTFT goes first.
		{name: "ttft relaxed before quality", req: routing.Request{Weights: cost, SLO: routing.SLO{TTFT: 100 * time.Millisecond}, QualityFloor: 0.8}, want: "big-0", wantRelaxed: []string{"ttft"}},
		{name: "budget clamp keeps a smaller client max_tokens", req: routing.Request{Weights: quality, PromptTokens: 1000, BudgetUSD: 0.001, MaxTokens: 50}, want: "small-0"},
		{name: "model constraint", req: routing.Request{Weights: cost, Model: "big"}, want: "big-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, est, lat := twoTier()
			est.quality["tail"] = est.quality["q"]
			est.hist = map[string]map[string]routing.LengthHist{"tail": {"small": tail}}
			core := newCore(t, Config{}, Deps{Estimator: est, Latency: lat}, c)
			req := tc.req
			if req.Prompt == "" {
				req.Prompt = "q"
			}
			tk := assign(core, t0, &req)[0]
			if tk.Err != nil {
				t.Fatal(tk.Err)
			}
			d := tk.Decision
			if d.Instance.ID != tc.want {
				t.Errorf("chose %s, want %s", d.Instance.ID, tc.want)
			}
			if diff := cmp.Diff(tc.wantRelaxed, d.Relaxed); diff != "" {
				t.Errorf("Relaxed (-want +got):\n%s", diff)
			}
			if d.MaxTokens != tc.wantMax {
				t.Errorf("MaxTokens = %d, want %d", d.MaxTokens, tc.wantMax)
			}
			if d.MaxTokens > 0 && d.PredictedOutputTokens > float64(d.MaxTokens) {
				t.Errorf("predicted %v output tokens beyond the clamp %d", d.PredictedOutputTokens, d.MaxTokens)
			}
		})
	}
}

// TestPredictions: the decision carries the chosen candidate's
// predictions: T̂ = TTFT + TPOT·(d/b + L̂) and Ĉ.
func TestPredictions(t *testing.T) {
	c, est, lat := twoTier()
	core := newCore(t, Config{}, Deps{Estimator: est, Latency: lat}, c)
	d := assign(core, t0, &routing.Request{ID: "a", Prompt: "q", PromptTokens: 1000, Weights: routing.Weights{Quality: 1}})[0].Decision
	want := routing.Decision{
		Instance: c.Instances[0], Policy: PolicyRouteBalance, BatchSize: 1,
		PredictedQuality: 0.9, PredictedOutputTokens: 100,
		PredictedTTFT:    200 * time.Millisecond,
		PredictedE2E:     4200 * time.Millisecond,
		PredictedCostUSD: (1000*5 + 100*10) / 1e6,
		QualitySource:    routing.SourceIndex,
	}
	if diff := cmp.Diff(want, d, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }),
		cmp.Comparer(func(a, b time.Duration) bool { return (a - b).Abs() < time.Microsecond })); diff != "" {
		t.Errorf("decision (-want +got):\n%s", diff)
	}
}

// TestWeightsMonotone: raising w_q (the rest split in a fixed ratio) never
// lowers the predicted quality of the choices, in every score mode.
func TestWeightsMonotone(t *testing.T) {
	c := &routing.Cluster{ID: "c", Version: 1}
	models := []struct {
		name        string
		q, price    float64
		tpot, ttftS float64
	}{
		{"xl", 0.92, 12, 0.05, 0.3}, {"l", 0.85, 6, 0.03, 0.2}, {"m", 0.7, 2, 0.02, 0.1}, {"s", 0.5, 0.5, 0.01, 0.05},
	}
	est := &tableEstimator{quality: map[string]map[string]float64{}, length: map[string]map[string]float64{}}
	lat := tierLatency{tpot: map[string]float64{}, ttft: map[string]float64{}, perSeq: 0.001}
	for k, m := range models {
		for r := range 2 {
			c.Instances = append(c.Instances, routing.Instance{ID: fmt.Sprintf("%s-%d", m.name, r), Model: m.name, GPU: "g", PriceInPerMTok: m.price / 2, PriceOutPerMTok: m.price})
		}
		lat.tpot[m.name+"@g"], lat.ttft[m.name+"@g"] = m.tpot, m.ttftS
		for p := range 20 {
			prompt := fmt.Sprint("p", p)
			if est.quality[prompt] == nil {
				est.quality[prompt], est.length[prompt] = map[string]float64{}, map[string]float64{}
			}
			// Prompt-dependent quality and length, deterministic.
			est.quality[prompt][m.name] = min(1, m.q*(0.6+0.04*float64((p*7+k*3)%11)))
			est.length[prompt][m.name] = float64(50 + (p*37+k*11)%400)
		}
	}
	best := 0.0 // mean over prompts of the best model's quality
	for p := range 20 {
		b := 0.0
		for _, q := range est.quality[fmt.Sprint("p", p)] {
			b = max(b, q)
		}
		best += b / 20
	}
	for _, mode := range []string{ScoreLight, ScoreRelative, ScoreRange, ScorePaper} {
		prev := -1.0
		for step := 0; step <= 10; step++ {
			wq := float64(step) / 10
			w := routing.Weights{Quality: wq, Cost: (1 - wq) * 0.4, Latency: (1 - wq) * 0.6}
			core := newCore(t, Config{Score: mode}, Deps{Estimator: est, Latency: lat}, c)
			// Every instance has served enough to be trusted: no exploration
			// bonus, so the choice depends on the weights alone.
			for _, m := range core.Fleet().Members() {
				for range 3 {
					core.Fleet().Release(t0, core.Fleet().Admit(t0, m, fleet.LeaseSpec{Tokens: 1}), routing.Outcome{})
				}
			}
			var reqs []*routing.Request
			for p := range 20 {
				reqs = append(reqs, &routing.Request{ID: fmt.Sprint(p), Prompt: fmt.Sprint("p", p), PromptTokens: 200, Weights: w})
			}
			sum := 0.0
			for _, r := range reqs {
				// One request per batch on a fresh view: the choice depends
				// on the weights alone.
				tk := assign(core, t0, r)[0]
				sum += tk.Decision.PredictedQuality
				core.Release(t0, tk, routing.Outcome{})
			}
			mean := sum / float64(len(reqs))
			t.Logf("%s w_q %.1f: mean predicted quality %.4f", mode, wq, mean)
			if mean < prev-1e-12 {
				t.Errorf("%s w_q %.1f: mean predicted quality %.4f fell below %.4f", mode, wq, mean, prev)
			}
			prev = mean
		}
		if prev < best-1e-12 {
			t.Errorf("%s: w_q = 1 gave mean quality %.4f, want the best models' %.4f", mode, prev, best)
		}
	}
}

// TestAgingBoundsWait: one long job queued behind a stream of short ones
// is admitted after at most AgingPassOvers short jobs overtook it; without
// aging STJF starves it.
func TestAgingBoundsWait(t *testing.T) {
	for _, tc := range []struct {
		aging    int
		starves  bool
		overtook int // short jobs admitted before the long one
	}{
		{aging: 3, overtook: 3},
		{aging: 1, overtook: 1},
		{aging: 1000, starves: true},
	} {
		t.Run(fmt.Sprint("aging=", tc.aging), func(t *testing.T) {
			c := &routing.Cluster{ID: "c", Version: 1, Instances: []routing.Instance{{ID: "i", Model: "m", MaxConcurrency: 1}}}
			est := &tableEstimator{length: map[string]map[string]float64{"long": {"m": 2000}, "short": {"m": 10}}}
			core := newCore(t, Config{AgingPassOvers: tc.aging}, Deps{Estimator: est}, c)
			var admitted []*Ticket
			submit := func(now time.Time, id, prompt string) *Ticket {
				tk := &Ticket{Req: &routing.Request{ID: id, Prompt: prompt}, Notify: func(tk *Ticket) {
					if tk.Err == nil {
						admitted = append(admitted, tk)
					}
				}}
				core.Assign(context.Background(), now, []*Ticket{tk})
				return tk
			}
			now := t0
			submit(now, "blocker", "short")
			long := submit(now, "long", "long")
			overtook := -1
			for k := range 50 {
				now = now.Add(time.Second)
				submit(now, fmt.Sprint("s", k), "short")
				core.Release(now, admitted[len(admitted)-1], routing.Outcome{OutputTokens: 10})
				if admitted[len(admitted)-1] == long {
					overtook = len(admitted) - 2 // minus the blocker and the long job
					break
				}
			}
			if tc.starves {
				if overtook >= 0 {
					t.Errorf("long job admitted after %d short ones; STJF without aging should starve it", overtook)
				}
				return
			}
			if overtook != tc.overtook {
				t.Errorf("%d short jobs overtook the long one, want %d", overtook, tc.overtook)
			}
		})
	}
}

// TestStickiness: later stages of a workflow reuse the first stage's
// instance even when their weights prefer another, and its model when that
// instance is unavailable.
func TestStickiness(t *testing.T) {
	c, est, lat := twoTier()
	c.Instances = append(c.Instances, routing.Instance{ID: "big-1", Model: "big", GPU: "h100", PriceInPerMTok: 5, PriceOutPerMTok: 10})
	core := newCore(t, Config{}, Deps{Estimator: est, Latency: lat}, c)
	first := assign(core, t0, &routing.Request{ID: "1", Prompt: "q", Workflow: "wf", Weights: routing.Weights{Quality: 1}})[0]
	if got := first.Decision.Instance.Model; got != "big" {
		t.Fatalf("first stage chose %s, want big", got)
	}
	stuck := first.Decision.Instance.ID
	second := assign(core, t0.Add(time.Second), &routing.Request{ID: "2", Prompt: "q", Workflow: "wf", Weights: routing.Weights{Cost: 1}})[0]
	if got := second.Decision.Instance.ID; got != stuck {
		t.Errorf("second stage chose %s, want the first stage's %s", got, stuck)
	}
	other := assign(core, t0.Add(time.Second), &routing.Request{ID: "x", Prompt: "q", Weights: routing.Weights{Cost: 1}})[0]
	if got := other.Decision.Instance.ID; got != "small-0" {
		t.Errorf("request outside the workflow chose %s, want small-0", got)
	}
	// The sticky instance is excluded (failed over): same model, other replica.
	third := assign(core, t0.Add(2*time.Second), &routing.Request{ID: "3", Prompt: "q", Workflow: "wf", Weights: routing.Weights{Cost: 1}, Exclude: []string{stuck}})[0]
	if got := third.Decision.Instance; got.Model != "big" || got.ID == stuck {
		t.Errorf("third stage chose %s (%s), want the other big replica", got.ID, got.Model)
	}
	// After the TTL, the workflow is forgotten.
	for _, tk := range []*Ticket{first, second, other, third} {
		core.Release(t0.Add(3*time.Second), tk, routing.Outcome{})
	}
	late := assign(core, t0.Add(time.Hour), &routing.Request{ID: "4", Prompt: "q", Workflow: "wf", Weights: routing.Weights{Cost: 1}})[0]
	if got := late.Decision.Instance.ID; got != "small-0" {
		t.Errorf("after the TTL chose %s, want small-0", got)
	}
}

// TestPolicies checks each baseline's choice on the two-tier cluster.
func TestPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy routing.PolicyConfig
		want   string
	}{
		{routing.PolicyConfig{Name: PolicyQualityOnly}, "big-0"},
		{routing.PolicyConfig{Name: PolicyThreshold, Threshold: 0.4}, "small-0"},
		{routing.PolicyConfig{Name: PolicyThreshold, Threshold: 0.8}, "big-0"},
		{routing.PolicyConfig{Name: PolicyThreshold, Threshold: 0.95}, "big-0"}, // none reaches t: best quality
		// T̂: big 4.2 s, small 1.05 s. τ = 0.5 keeps only small.
		{routing.PolicyConfig{Name: PolicyChimera, Slack: 0.5}, "small-0"},
		// τ = 4 admits big; its gain 0.4 beats Δs = 0.1 …
		{routing.PolicyConfig{Name: PolicyChimera, Slack: 4, SwitchGain: 0.1}, "big-0"},
		// … but not Δs = 0.5.
		{routing.PolicyConfig{Name: PolicyChimera, Slack: 4, SwitchGain: 0.5}, "small-0"},
	} {
		t.Run(fmt.Sprintf("%+v", tc.policy), func(t *testing.T) {
			c, est, lat := twoTier()
			c.Policy = tc.policy
			core := newCore(t, Config{}, Deps{Estimator: est, Latency: lat}, c)
			tk := assign(core, t0, &routing.Request{ID: "a", Prompt: "q"})[0]
			if tk.Err != nil {
				t.Fatal(tk.Err)
			}
			if got := tk.Decision.Instance.ID; got != tc.want {
				t.Errorf("chose %s, want %s", got, tc.want)
			}
		})
	}
	if _, err := NewRegistry().New(routing.PolicyConfig{Name: PolicyThreshold, Threshold: 2}); err == nil {
		t.Error("threshold 2 accepted")
	}
}

// oracleLabels knows the true quality of prompt "q": small is better.
type oracleLabels struct{}

func (oracleLabels) TrueLabels(r *routing.Request, models []string, out *routing.PromptEstimate) bool {
	if !strings.HasPrefix(r.Prompt, "q") {
		return false
	}
	for m, name := range models {
		out.Quality[m] = map[string]float64{"big": 0.1, "small": 0.95}[name]
		out.Source[m] = routing.SourceOracle
	}
	return true
}

func TestOracleReadsLabels(t *testing.T) {
	c, est, lat := twoTier()
	core := newCore(t, Config{}, Deps{Estimator: est, Latency: lat, Labels: oracleLabels{}}, c)
	q := routing.Weights{Quality: 1}
	ts := assign(core, t0,
		&routing.Request{ID: "o", Prompt: "q", Policy: PolicyOracle, Weights: q},
		&routing.Request{ID: "r", Prompt: "q", Weights: q})
	got := map[string]string{}
	for _, tk := range ts {
		got[tk.Req.ID] = tk.Decision.Instance.ID + "/" + tk.Decision.QualitySource.String()
	}
	want := map[string]string{"o": "small-0/oracle", "r": "big-0/index"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("choices (-want +got):\n%s", diff)
	}
}

// TestExploration: a new instance with no served requests is scored as
// the fastest until it has served ExploreRequests requests.
func TestExploration(t *testing.T) {
	c := &routing.Cluster{ID: "c", Version: 1, Instances: []routing.Instance{
		{ID: "old", Model: "m", GPU: "fast"}, {ID: "new", Model: "m", GPU: "slow"},
	}}
	lat := tierLatency{tpot: map[string]float64{"m@fast": 0.01, "m@slow": 0.05}, ttft: map[string]float64{"m@fast": 0.1, "m@slow": 0.1}}
	core := newCore(t, Config{Fleet: fleet.Config{ExploreRequests: 2}}, Deps{Latency: lat}, c)
	// The old instance has served enough to be trusted.
	old := core.Fleet().Lookup("old")
	for range 2 {
		l := core.Fleet().Admit(t0, old, fleet.LeaseSpec{Tokens: 1})
		core.Fleet().Release(t0, l, routing.Outcome{})
	}
	var got []string
	for k := range 4 {
		tk := assign(core, t0, &routing.Request{ID: fmt.Sprint(k), Weights: routing.Weights{Latency: 1}})[0]
		got = append(got, tk.Decision.Instance.ID)
		core.Release(t0, tk, routing.Outcome{OutputTokens: 10})
	}
	if diff := cmp.Diff([]string{"new", "new", "old", "old"}, got); diff != "" {
		t.Errorf("choices (-want +got):\n%s", diff)
	}
}

// TestCoreCancelAndUpdate: a ticket queued on an instance that a new
// cluster version removes is handed back for reassignment; a cancelled
// queued ticket leaves no trace.
func TestCoreCancelAndUpdate(t *testing.T) {
	c := &routing.Cluster{ID: "c", Version: 1, Policy: routing.PolicyConfig{Name: PolicyShortestQueue}, Instances: []routing.Instance{{ID: "a", Model: "m", MaxConcurrency: 1}}}
	core := newCore(t, Config{}, Deps{}, c)
	held := assign(core, t0, &routing.Request{ID: "1"})[0]
	q1 := assign(core, t0, &routing.Request{ID: "2"})[0]
	q2 := assign(core, t0, &routing.Request{ID: "3"})[0]
	if q1.state != ticketQueued || q2.state != ticketQueued {
		t.Fatalf("states %v %v, want queued", q1.state, q2.state)
	}
	if core.Cancel(t0, q1, context.Canceled) {
		t.Error("Cancel of a queued ticket reported it admitted")
	}
	c2 := &routing.Cluster{ID: "c", Version: 2, Policy: c.Policy, Instances: []routing.Instance{{ID: "b", Model: "m"}}}
	orphans, err := core.Update(c2)
	if err != nil {
		t.Fatal(err)
	}
	if len(orphans) != 1 || orphans[0] != q2 {
		t.Fatalf("orphans = %v, want the queued ticket 3", orphans)
	}
	core.Assign(context.Background(), t0, orphans)
	if q2.state != ticketAdmitted || q2.Decision.Instance.ID != "b" {
		t.Errorf("reassigned ticket: state %v on %s, want admitted on b", q2.state, q2.Decision.Instance.ID)
	}
	core.Release(t0, held, routing.Outcome{})
	core.Release(t0, q2, routing.Outcome{})
	for _, s := range core.State(t0) {
		if s.InFlight != 0 || s.Queue != 0 {
			t.Errorf("%s: in-flight %d queue %d, want 0 0", s.ID, s.InFlight, s.Queue)
		}
	}
	if got := core.Fleet().InFlight(held.member); got != 0 {
		t.Errorf("removed instance still has %d in flight", got)
	}
}

// panicEstimator fails the hard way.
type panicEstimator struct{}

func (panicEstimator) Estimate(context.Context, []string, []string, []float64, []routing.PromptEstimate) error {
	panic("index corrupted")
}

// TestEstimatorFailureFallsBack: an estimator that panics costs the batch
// its estimates, not the process: priors are used.
func TestEstimatorFailureFallsBack(t *testing.T) {
	c, _, lat := twoTier()
	c.Instances[0].QualityPrior, c.Instances[1].QualityPrior = 0.7, 0.3
	core := newCore(t, Config{}, Deps{Estimator: panicEstimator{}, Latency: lat}, c)
	tk := assign(core, t0, &routing.Request{ID: "a", Prompt: "q", Weights: routing.Weights{Quality: 1}})[0]
	if tk.Err != nil {
		t.Fatal(tk.Err)
	}
	if d := tk.Decision; d.Instance.ID != "big-0" || d.PredictedQuality != 0.7 || d.QualitySource != routing.SourcePrior {
		t.Errorf("decision %s Q̂ %v source %s, want big-0 0.7 prior", d.Instance.ID, d.PredictedQuality, d.QualitySource)
	}
}

// TestState: the live view reports each instance's counters, prediction
// state, scrape freshness and the source of its model's estimates.
func TestState(t *testing.T) {
	c, est, lat := twoTier()
	c.Instances[1].MaxConcurrency = 1
	core := newCore(t, Config{}, Deps{Estimator: est, Latency: lat}, c)
	small := core.Fleet().Lookup("small-0")
	core.Fleet().ReportScrape(t0, small, fleet.Scrape{Running: 3, Waiting: 1, KVUsage: 0.25}, nil)
	cost := routing.Weights{Cost: 1}
	a := assign(core, t0, &routing.Request{ID: "a", Prompt: "q", Weights: cost})[0]
	assign(core, t0, &routing.Request{ID: "b", Prompt: "q", Weights: cost}) // queued behind the cap
	got := core.State(t0.Add(time.Second))
	want := []InstanceState{
		{ID: "big-0", Model: "big", GPU: "h100", Tier: "big@h100", Healthy: true, Exploring: true, MaxConcurrency: 64, Stale: true, EstimateSource: "index"},
		{ID: "small-0", Model: "small", GPU: "a10", Tier: "small@a10", Healthy: true, Exploring: true, InFlight: 1, MaxConcurrency: 1, Queue: 1,
			Running: 3, Waiting: 1, KVUsage: 0.25, PendingTokens: 100 - (1-0.05)/0.01, TPOTMs: 10, ScrapeAgeMs: 1000, EstimateSource: "index"},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(x, y float64) bool { return x-y < 1e-6 && y-x < 1e-6 })); diff != "" {
		t.Errorf("state (-want +got):\n%s", diff)
	}
	core.Release(t0, a, routing.Outcome{OutputTokens: 5})
}

// observingLatency is tierLatency that records what Release teaches it.
type observingLatency struct {
	tierLatency
	got []observed
}

type observed struct {
	Tier       string
	TPOT, TTFT float64
}

func (l *observingLatency) Observe(tier string, _ routing.Load, tpot, ttft float64) {
	l.got = append(l.got, observed{tier, tpot, ttft})
}

// TestReleaseObservations: a streamed outcome splits E2E into TTFT and
// (E2E−TTFT)/(tokens−1); a non-streamed one (TTFT 0: no first token seen
// apart from the whole answer) teaches TPOT only, from the TTFT̂ the lease
// was dispatched with (0.2 s on big), and never TTFT; one-token, failed and
// non-positive-TPOT outcomes teach nothing.
func TestReleaseObservations(t *testing.T) {
	c, est, lat := twoTier()
	ol := &observingLatency{tierLatency: lat}
	core := newCore(t, Config{}, Deps{Estimator: est, Latency: ol}, c)
	for _, o := range []routing.Outcome{
		{OutputTokens: 5, E2E: time.Second},                                   // non-streamed: (1 − 0.2)/4
		{OutputTokens: 5, E2E: time.Second, TTFT: 200 * time.Millisecond},     // streamed
		{OutputTokens: 1, E2E: time.Second, TTFT: 900 * time.Millisecond},     // one token: no TPOT
		{OutputTokens: 1, E2E: time.Second},                                   // non-streamed, one token
		{OutputTokens: 5, E2E: 150 * time.Millisecond},                        // non-streamed, E2E < TTFT̂
		{OutputTokens: 5, E2E: time.Second, Err: fmt.Errorf("upstream died")}, // failed
	} {
		tk := assign(core, t0, &routing.Request{ID: "r", Prompt: "q", PromptTokens: 10, Weights: routing.Weights{Quality: 1}})[0]
		core.Release(t0.Add(time.Second), tk, o)
	}
	want := []observed{{"big@h100", 0.2, 0}, {"big@h100", 0.2, 0.2}}
	if diff := cmp.Diff(want, ol.got, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
		t.Errorf("observations (-want +got):\n%s", diff)
	}
}

// TestNonStreamedLearnsTPOT: with the real online latency model, a run of
// non-streamed answers (E2E only) from an instance whose true TTFT is 30 ms
// and TPOT 15 ms moves TPOT̂ from its prior (40.6 ms at one running
// sequence, ratio 0.37) to the truth, and leaves TTFT̂ exactly where it
// was. The TPOT samples are biased by (TTFT − TTFT̂)/(tokens − 1) =
// (30 − 63 ms)/99 = −0.33 ms (−2.2%), since TTFT̂ never learns from them;
// the tolerance ±5% covers that bias plus the prior's residual weight
// after 60 observations.
func TestNonStreamedLearnsTPOT(t *testing.T) {
	c := &routing.Cluster{ID: "c", Version: 1, Instances: []routing.Instance{{ID: "a-0", Model: "a", GPU: "a30"}}}
	lat, err := latency.New(latency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	core := newCore(t, Config{}, Deps{Estimator: &tableEstimator{}, Latency: lat}, c)
	const ttft, tpot, tokens = 30 * time.Millisecond, 15 * time.Millisecond, 100
	at := routing.Load{Running: 1, PromptTokens: 20} // what each sequential request's lease records
	ratio := func() float64 { return tpot.Seconds() / lat.TPOT("a@a30", at) }
	if r := ratio(); r > 0.5 {
		t.Fatalf("prior TPOT̂ too close to the truth for the test to mean anything: observed/predicted %.3f", r)
	}
	ttftBefore := lat.TTFT("a@a30", at)
	now := t0
	for i := range 60 {
		tk := assign(core, now, &routing.Request{ID: fmt.Sprint(i), Prompt: "q", PromptTokens: 20, Weights: routing.Weights{Quality: 1}})[0]
		if tk.Err != nil {
			t.Fatal(tk.Err)
		}
		now = now.Add(2 * time.Second)
		core.Release(now, tk, routing.Outcome{PromptTokens: 20, OutputTokens: tokens, E2E: ttft + (tokens-1)*tpot})
	}
	if r := ratio(); r < 0.95 || r > 1.05 {
		t.Errorf("observed/predicted TPOT after 60 non-streamed answers = %.3f (TPOT̂ %.4f s), want 1 ± 0.05", r, lat.TPOT("a@a30", at))
	}
	if got := lat.TTFT("a@a30", at); got != ttftBefore {
		t.Errorf("TTFT̂ moved on non-streamed answers: %.6f -> %.6f s", ttftBefore, got)
	}
}

// TestTTFTLearnsAtPredictedLoad: with the real online latency model, an
// instance whose every request sees TTFT 30 ms and TPOT 17.5 ms (the demo's
// llama tier at time scale 0.5) must be predicted at 30 ms after a few
// dozen sequential requests. Observing at one load and predicting at
// another (running+1 vs running) left TTFT̂ ~45% high.
func TestTTFTLearnsAtPredictedLoad(t *testing.T) {
	c := &routing.Cluster{ID: "c", Version: 1, Instances: []routing.Instance{{ID: "a-0", Model: "a", GPU: "a30"}}}
	lat, err := latency.New(latency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	core := newCore(t, Config{}, Deps{Estimator: &tableEstimator{}, Latency: lat}, c)
	const ttft, tpot = 30 * time.Millisecond, 17500 * time.Microsecond
	now := t0
	var last routing.Decision
	for i := range 40 {
		tk := assign(core, now, &routing.Request{ID: fmt.Sprint(i), Prompt: "q", PromptTokens: 20, Weights: routing.Weights{Quality: 1}})[0]
		if tk.Err != nil {
			t.Fatal(tk.Err)
		}
		last = tk.Decision
		now = now.Add(time.Second)
		core.Release(now, tk, routing.Outcome{PromptTokens: 20, OutputTokens: 11, TTFT: ttft, E2E: ttft + 10*tpot})
	}
	if r := float64(ttft) / float64(last.PredictedTTFT); r < 0.95 || r > 1.05 {
		t.Errorf("observed/predicted TTFT after 39 observations = %.3f (TTFT̂ %v), want 1 ± 0.05", r, last.PredictedTTFT)
	}
}

// memoEstimator is tableEstimator that hands out memos and records the
// length observations it receives.
type memoEstimator struct {
	tableEstimator
	next  uint64
	memos []uint64
	plain int
}

func (e *memoEstimator) Estimate(ctx context.Context, prompts []string, models []string, priors []float64, out []routing.PromptEstimate) error {
	if err := e.tableEstimator.Estimate(ctx, prompts, models, priors, out); err != nil {
		return err
	}
	for j := range out {
		e.next++
		out[j].Memo = 100 + e.next
	}
	return nil
}

func (e *memoEstimator) ObserveLengthMemo(memo uint64, _, _ string, _ int) {
	e.memos = append(e.memos, memo)
}

func (e *memoEstimator) ObserveLength(string, string, int) { e.plain++ }

// TestReleaseHandsBackTheMemo: the estimate's memo travels with the
// decision to Release, which passes it to the estimator (and never the
// prompt-only ObserveLength when the memo form exists).
func TestReleaseHandsBackTheMemo(t *testing.T) {
	c, est, lat := twoTier()
	me := &memoEstimator{tableEstimator: *est}
	core := newCore(t, Config{}, Deps{Estimator: me, Latency: lat}, c)
	tks := assign(core, t0,
		&routing.Request{ID: "a", Prompt: "q", PromptTokens: 10},
		&routing.Request{ID: "b", Prompt: "q", PromptTokens: 10})
	// Release in the reverse order: each gets its own memo back.
	for i := len(tks) - 1; i >= 0; i-- {
		core.Release(t0.Add(time.Second), tks[i], routing.Outcome{OutputTokens: 7, E2E: time.Second})
	}
	want := []uint64{tks[1].Decision.EstimateMemo, tks[0].Decision.EstimateMemo}
	if diff := cmp.Diff(want, me.memos); diff != "" || me.plain != 0 || want[0] == want[1] || want[0] < 101 {
		t.Errorf("memos observed (-want +got):\n%s\nplain observations %d; memos %v", diff, me.plain, want)
	}
}
