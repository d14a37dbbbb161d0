package schedule

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/routebalance/routebalance/routing"
)

// linearTier is TPOT = 0.02 + 0.001·running, TTFT = 0.05 + 0.0001·prompt.
type linearTier struct{}

func (linearTier) TPOT(l routing.Load) float64 { return 0.02 + 0.001*l.Running }
func (linearTier) TTFT(l routing.Load) float64 { return 0.05 + 0.0001*l.PromptTokens }

func TestPredict(t *testing.T) {
	inst := &routing.Instance{PriceInPerMTok: 1, PriceOutPerMTok: 2}
	slotOf := func(inflight, cap, queue int, running, pending, queued float64) *slot {
		return &slot{inst: inst, lat: linearTier{}, inflight: inflight, cap: cap, queue: queue,
			running: running, pending: pending, queued: queued}
	}
	for _, tc := range []struct {
		name string
		v    *slot
		L    float64
		want prediction
	}{
		{"idle", slotOf(0, 4, 0, 0, 0, 0), 100,
			prediction{TTFT: 0.07, TPOT: 0.021, Latency: 0.07 + 2.1, Cost: 200e-6 + 200e-6}},
		{"below the cap: no wait", slotOf(3, 4, 0, 3, 300, 0), 100,
			prediction{TTFT: 0.07, TPOT: 0.024, Latency: 0.07 + 2.4, Cost: 400e-6}},
		// At the cap: the soonest of 4 running (100 tokens each left)
		// frees after 100/4 = 25 steps, then the 2 queued run their 150
		// predicted tokens 4 at a time: 37.5 steps; 62.5 · 0.025 s.
		{"at the cap with a queue", slotOf(4, 4, 2, 4, 400, 150), 100,
			prediction{TTFT: 0.07, TPOT: 0.025, Wait: 62.5 * 0.025, Latency: 0.07 + 62.5*0.025 + 2.5, Cost: 400e-6}},
		// At least one token is left per running sequence.
		{"at the cap, nothing pending", slotOf(2, 2, 0, 2, 0, 0), 10,
			prediction{TTFT: 0.07, TPOT: 0.023, Wait: 0.5 * 0.023, Latency: 0.07 + 0.5*0.023 + 0.23, Cost: 200e-6 + 20e-6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := predict(tc.v, 200, tc.L)
			tc.want.Raw = tc.want.Latency // no bias factor on the slot
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(prediction{}), cmpopts.EquateApprox(0, 1e-9)); d != "" {
				t.Errorf("predict (-want +got):\n%s", d)
			}
		})
	}
}

// TestPredictBias: the tier's learnt factor scales T̂ and nothing else;
// Raw keeps the unscaled T̂ the factor learns from.
func TestPredictBias(t *testing.T) {
	inst := &routing.Instance{PriceInPerMTok: 1, PriceOutPerMTok: 2}
	v := &slot{inst: inst, lat: linearTier{}, inflight: 4, cap: 4, queue: 2, running: 4, pending: 400, queued: 150}
	plain := predict(v, 200, 100)
	v.bias = 1.25
	got := predict(v, 200, 100)
	want := plain
	want.Latency = 1.25 * plain.Latency
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); d != "" {
		t.Errorf("predict with bias 1.25 (-want +got):\n%s", d)
	}
}

// TestTierBias: the factor is 1 before any sample, the geometric mean of
// the ratios while warming, clamped per sample, and follows a drift once
// warm.
func TestTierBias(t *testing.T) {
	var b tierBias
	if f := b.factor(); f != 1 {
		t.Fatalf("cold factor %v, want 1", f)
	}
	b.observe(2, 1)
	b.observe(1, 2)
	if f := b.factor(); math.Abs(f-1) > 1e-12 {
		t.Errorf("ratios 2 and ½: factor %v, want 1", f)
	}
	b.observe(1000, 1) // clamped to 4
	if want := math.Pow(4, 1.0/3); math.Abs(b.factor()-want) > 1e-12 {
		t.Errorf("after a stalled request: factor %v, want 4^(1/3) = %v", b.factor(), want)
	}
	for _, bad := range [][2]float64{{0, 1}, {1, 0}, {math.Inf(1), 1}, {math.NaN(), 1}} {
		before := b
		b.observe(bad[0], bad[1])
		if b != before {
			t.Errorf("observe(%v, %v) changed the state", bad[0], bad[1])
		}
	}
	for range 10 * biasWindow {
		b.observe(1.2, 1)
	}
	if f := b.factor(); math.Abs(f-1.2) > 1e-3 {
		t.Errorf("after a long run at 1.2: factor %v, want 1.2", f)
	}
}

// TestReleaseTeachesTheBias: a tier whose requests take twice the
// predicted E2E has its later T̂ doubled; a failed or truncated request
// teaches nothing; with Bias off nothing is learnt.
func TestReleaseTeachesTheBias(t *testing.T) {
	for _, mode := range []string{BiasOn, BiasOff} {
		t.Run(mode, func(t *testing.T) {
			c := &routing.Cluster{ID: "c", Version: 1, Instances: []routing.Instance{{ID: "a", Model: "m", GPU: "g"}}}
			core := newCore(t, Config{Bias: mode}, Deps{Latency: tierLatency{tpot: map[string]float64{"m@g": 0.01}, ttft: map[string]float64{"m@g": 0.1}}}, c)
			first := assign(core, t0, &routing.Request{ID: "1", Prompt: "p"})[0]
			pred := first.Decision.PredictedE2E
			core.Release(t0, first, routing.Outcome{OutputTokens: 100, E2E: 2 * pred})
			failed := assign(core, t0, &routing.Request{ID: "f", Prompt: "p"})[0]
			core.Release(t0, failed, routing.Outcome{OutputTokens: 100, E2E: 100 * pred, Err: context.Canceled})
			cut := assign(core, t0, &routing.Request{ID: "t", Prompt: "p"})[0]
			core.Release(t0, cut, routing.Outcome{OutputTokens: 100, E2E: 100 * pred, Truncated: true})
			second := assign(core, t0, &routing.Request{ID: "2", Prompt: "p"})[0]
			want := pred
			if mode == BiasOn {
				want = 2 * pred
			}
			if d := second.Decision.PredictedE2E - want; d > time.Microsecond || d < -time.Microsecond {
				t.Errorf("second prediction %v, want %v (first %v)", second.Decision.PredictedE2E, want, pred)
			}
		})
	}
}

// promptTier's TPOT grows with the prompt (prefill interference, as an
// online model learns it from leases that record the prompt).
type promptTier struct{}

func (promptTier) TPOT(l routing.Load) float64 {
	return 0.01 + 0.001*l.Running + 0.00002*l.PromptTokens
}
func (promptTier) TTFT(l routing.Load) float64 { return 0.05 }

// TestPredictTPOTSeesThePrompt: TPOT̂ is asked with the request's prompt
// tokens, the load the lease records and the online model learns at; a
// prompt-less TPOT̂ (the old per-instance value) would be 0.012 here for
// every prompt.
func TestPredictTPOTSeesThePrompt(t *testing.T) {
	inst := &routing.Instance{}
	for _, tc := range []struct{ prompt, wantTPOT float64 }{
		{0, 0.012}, {500, 0.022}, {2000, 0.052},
	} {
		v := &slot{inst: inst, lat: promptTier{}, cap: 4, running: 1}
		got := predict(v, tc.prompt, 100)
		if math.Abs(got.TPOT-tc.wantTPOT) > 1e-12 || math.Abs(got.Latency-(0.05+100*tc.wantTPOT)) > 1e-12 {
			t.Errorf("prompt %v: TPOT %v, T̂ %v; want TPOT %v", tc.prompt, got.TPOT, got.Latency, tc.wantTPOT)
		}
	}
	// At the cap the queue wait is counted in the same TPOT̂.
	v := &slot{inst: inst, lat: promptTier{}, inflight: 2, cap: 2, running: 2, pending: 200}
	got := predict(v, 1000, 10)
	tpot := 0.01 + 0.003 + 0.02
	if want := tpot * (100.0 / 2); math.Abs(got.Wait-want) > 1e-12 {
		t.Errorf("wait %v, want %v", got.Wait, want)
	}
}

func TestSoftFilters(t *testing.T) {
	p := prediction{TTFT: 0.2, Wait: 0.1, TPOT: 0.03, Latency: 3.3, Cost: 0.002}
	for _, tc := range []struct {
		name string
		r    routing.Request
		q    float64
		lq   float64
		want []string // failed filters, relaxation order
	}{
		{"none active", routing.Request{}, 0.5, 100, nil},
		{"ttft met", routing.Request{SLO: routing.SLO{TTFT: 301 * time.Millisecond}}, 0.5, 100, nil},
		{"ttft counts the wait", routing.Request{SLO: routing.SLO{TTFT: 250 * time.Millisecond}}, 0.5, 100, []string{"ttft"}},
		{"tpot", routing.Request{SLO: routing.SLO{TPOT: 20 * time.Millisecond}}, 0.5, 100, []string{"tpot"}},
		{"e2e at the confident length", routing.Request{SLO: routing.SLO{E2E: 3 * time.Second}}, 0.5, 100, []string{"e2e"}},
		{"e2e met at a shorter quantile", routing.Request{SLO: routing.SLO{E2E: 3 * time.Second}}, 0.5, 80, nil},
		{"quality floor", routing.Request{QualityFloor: 0.6}, 0.5, 100, []string{"quality"}},
		{"budget", routing.Request{BudgetUSD: 0.001}, 0.5, 100, []string{"budget"}},
		{"slo max cost is the smaller budget", routing.Request{BudgetUSD: 0.01, SLO: routing.SLO{MaxCostUSD: 0.001}}, 0.5, 100, []string{"budget"}},
		{"several", routing.Request{QualityFloor: 0.9, SLO: routing.SLO{TTFT: time.Millisecond, TPOT: time.Millisecond}}, 0.5, 100, []string{"ttft", "tpot", "quality"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := filterInput{r: &tc.r, p: p, q: tc.q, lq: tc.lq, budget: tc.r.Budget()}
			fail := softFail(in)
			var got []string
			for i := range softFilters {
				if fail&softFilters[i].bit != 0 {
					got = append(got, relaxName(softFilters[i].bit))
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("failed filters (-want +got):\n%s", d)
			}
			for i := range softFilters {
				f := &softFilters[i]
				if hasFilter(&tc.r, f.bit) != f.active(&tc.r) {
					t.Errorf("hasFilter(%s) disagrees with the table", f.name)
				}
			}
		})
	}
}

func TestNormaliseRange(t *testing.T) {
	c := []Candidate{
		{Quality: 0.8, Cost: 4, Latency: 2},
		{Quality: 0.6, Cost: 1, Latency: 1},
		{Quality: 0.7, Cost: 2, Latency: 3, explore: true},
	}
	normalise(c, ScoreRange)
	type terms struct{ Q, C, L float64 }
	var got []terms
	for _, x := range c {
		got = append(got, terms{x.QualityTerm, x.CostTerm, x.LatencyTerm})
	}
	// Latency: the exploring candidate counts as the fastest (0 s).
	want := []terms{{1, 0, 0}, {0, 1, 0.5}, {0.5, 2.0 / 3, 1}}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); d != "" {
		t.Errorf("range terms (-want +got):\n%s", d)
	}
	normalise(c, ScorePaper)
	got = got[:0]
	for _, x := range c {
		got = append(got, terms{x.QualityTerm, x.CostTerm, x.LatencyTerm})
	}
	want = []terms{{0.8, 0, 0}, {0.6, 0.75, 0.5}, {0.7, 0.5, 1}}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); d != "" {
		t.Errorf("paper terms (-want +got):\n%s", d)
	}
	// Relative: quality and cost as in range; latency 1 − (T̂ − min)/min
	// against the fastest trusted prediction (1 s, the second candidate);
	// the exploring third counts as 0 s: 1 − (0 − 1)/1 = 2.
	normalise(c, ScoreRelative)
	got = got[:0]
	for _, x := range c {
		got = append(got, terms{x.QualityTerm, x.CostTerm, x.LatencyTerm})
	}
	want = []terms{{1, 0, 0}, {0, 1, 1}, {0.5, 2.0 / 3, 2}}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); d != "" {
		t.Errorf("relative terms (-want +got):\n%s", d)
	}
	// Unbounded below: a candidate 5× slower than the fastest gets −3
	// however slow the others are.
	sat := []Candidate{{Latency: 1}, {Latency: 5}, {Latency: 2}}
	normalise(sat, ScoreRelative)
	if l := []float64{sat[0].LatencyTerm, sat[1].LatencyTerm, sat[2].LatencyTerm}; !cmp.Equal(l, []float64{1, -3, 0}) {
		t.Errorf("relative latency terms = %v, want [1 -3 0]", l)
	}
	allNew := []Candidate{{Latency: 1, explore: true}, {Latency: 3, explore: true}}
	normalise(allNew, ScoreRelative)
	if allNew[0].LatencyTerm != 1 || allNew[1].LatencyTerm != 1 {
		t.Errorf("every candidate exploring: latency terms %v, %v, want 1", allNew[0].LatencyTerm, allNew[1].LatencyTerm)
	}
	for _, mode := range []string{ScoreLight, ScoreRelative, ScoreRange} {
		one := []Candidate{{Quality: 0.5, Cost: 1, Latency: 1, Light: 0.5}}
		normalise(one, mode)
		if one[0].QualityTerm != 1 || one[0].CostTerm != 1 || one[0].LatencyTerm != 1 || math.IsNaN(Score(routing.Weights{Quality: 1}, &one[0])) {
			t.Errorf("%s: a lone candidate's terms = %+v, want all 1", mode, one[0])
		}
		zero := []Candidate{{Latency: 0}, {Latency: 0}}
		normalise(zero, mode)
		if zero[0].LatencyTerm != 1 || zero[1].LatencyTerm != 1 {
			t.Errorf("%s: zero latencies give terms %v, %v, want 1", mode, zero[0].LatencyTerm, zero[1].LatencyTerm)
		}
	}
}

// TestLightLatencyScale: the "light" latency term is the excess over the
// fastest candidate in units of the least idle-instance T̂ (Light) of the
// trusted candidates, so at saturation (every T̂ far above its idle value)
// a second costs as much latency term as at light load, where "relative"
// would divide by the inflated fastest T̂.
func TestLightLatencyScale(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    []Candidate
		want []float64
	}{
		// Idle: T̂ = Light, the same terms as "relative" (1 − (T̂−1)/1).
		{"idle", []Candidate{{Latency: 1, Light: 1}, {Latency: 2, Light: 2}, {Latency: 1.5, Light: 1.5}}, []float64{1, 0, 0.5}},
		// Saturated: fastest 4 s, idle service 1 s: the 6 s candidate is 2
		// scale units behind (relative: 1 − 2/4 = 0.5).
		{"saturated", []Candidate{{Latency: 4, Light: 1}, {Latency: 6, Light: 2}, {Latency: 5, Light: 1.2}}, []float64{1, -1, 0}},
		// An exploring candidate's Light is not the scale; it counts as 0 s.
		{"exploring", []Candidate{{Latency: 2, Light: 1}, {Latency: 3, Light: 0.1, explore: true}}, []float64{1, 3}},
		// No idle prediction (Light 0): the fastest T̂ is the scale.
		{"no light", []Candidate{{Latency: 2}, {Latency: 3}}, []float64{1, 0.5}},
	} {
		normalise(tc.c, ScoreLight)
		var got []float64
		for _, x := range tc.c {
			got = append(got, x.LatencyTerm)
		}
		if !cmp.Equal(got, tc.want, cmpopts.EquateApprox(0, 1e-12)) {
			t.Errorf("%s: latency terms %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLightService: the idle-instance T̂ is TTFT̂ + TPOT̂·L̂ at running 1
// with the request's prompt, whatever the instance's present load.
func TestLightService(t *testing.T) {
	v := &slot{inst: &routing.Instance{}, lat: linearTier{}, inflight: 9, cap: 4, queue: 3, running: 9, pending: 900, queued: 50}
	if got, want := lightService(v, 200, 100), 0.05+0.02+100*0.021; math.Abs(got-want) > 1e-12 {
		t.Errorf("lightService = %v, want %v", got, want)
	}
}

// TestQualityWeightOneIsQualityOnly: with w_q = 1 the routebalance pick is
// quality-only's (best Q̂ model, its least-loaded replica, the faster on
// equal load) on any candidate set, in both score modes.
func TestQualityWeightOneIsQualityOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, mode := range []string{ScoreLight, ScoreRelative, ScoreRange, ScorePaper} {
		for trial := 0; trial < 500; trial++ {
			var c []Candidate
			qs := []float64{rng.Float64(), rng.Float64(), rng.Float64()}
			for i := 0; i < 9; i++ {
				m := i % 3
				lat := 0.5 + rng.Float64()
				c = append(c, Candidate{Index: i, Model: m, Quality: qs[m], Cost: rng.Float64(), Latency: lat, Light: lat * rng.Float64(), Load: rng.IntN(3)})
			}
			normalise(c, mode)
			rb := (&RouteBalance{}).Pick(nil, routing.Weights{Quality: 1}, c)
			qo := (&QualityOnly{}).Pick(nil, routing.Weights{Quality: 1}, c)
			if rb != qo {
				t.Fatalf("%s trial %d: routebalance w_q=1 picked %+v, quality-only %+v", mode, trial, c[rb], c[qo])
			}
		}
	}
}

func TestKeepModel(t *testing.T) {
	mk := func(models ...int) []Candidate {
		var c []Candidate
		for i, m := range models {
			c = append(c, Candidate{Index: i, Model: m, fail: uint8(i % 2)}) // odd positions fail a filter
		}
		return c
	}
	for _, tc := range []struct {
		name     string
		c        []Candidate
		mi, pass int
		wantIdx  []int
		wantPass int
	}{
		{"some of the model: only they stay", mk(0, 1, 1, 0, 1), 1, 3, []int{1, 2, 4}, 2},
		{"none of the model: unchanged", mk(0, 0, 2), 1, 2, []int{0, 1, 2}, 2},
		{"all of the model: unchanged", mk(1, 1), 1, 1, []int{0, 1}, 1},
	} {
		got, pass := keepModel(tc.c, tc.mi, tc.pass)
		var idx []int
		for _, c := range got {
			idx = append(idx, c.Index)
		}
		if !cmp.Equal(idx, tc.wantIdx) || pass != tc.wantPass {
			t.Errorf("%s: kept %v (pass %d), want %v (pass %d)", tc.name, idx, pass, tc.wantIdx, tc.wantPass)
		}
	}
}

func TestRelax(t *testing.T) {
	slo := routing.Request{SLO: routing.SLO{TTFT: time.Second, TPOT: time.Millisecond}, QualityFloor: 0.5}
	for _, tc := range []struct {
		name        string
		r           routing.Request
		budget      float64
		fails       []uint8
		costs       []float64
		wantIdx     []int
		wantRelaxed []string
	}{
		{"all pass", slo, 0, []uint8{0, 0}, []float64{1, 2}, []int{0, 1}, nil},
		{"the failing ones go", slo, 0, []uint8{failTTFT, 0, failQuality}, []float64{1, 2, 3}, []int{1}, nil},
		{"nobody meets ttft: relaxed, tpot still applies", slo, 0, []uint8{failTTFT, failTTFT | failTPOT}, []float64{1, 2}, []int{0}, []string{"ttft"}},
		{"relaxed in table order up to quality", slo, 0, []uint8{failTTFT | failQuality, failTPOT | failQuality}, []float64{1, 2}, []int{0, 1}, []string{"ttft", "tpot", "quality"}},
		{"budget nobody meets: the cheapest", routing.Request{BudgetUSD: 1}, 1, []uint8{failBudget, failBudget, failBudget}, []float64{3, 1, 2}, []int{1}, []string{"budget"}},
		{"budget some meet: filtered", routing.Request{BudgetUSD: 1}, 1, []uint8{failBudget, 0}, []float64{3, 1}, []int{1}, nil},
	} {
		var c []Candidate
		pass := 0
		for i, f := range tc.fails {
			c = append(c, Candidate{Index: i, Cost: tc.costs[i], fail: f})
			if f == 0 {
				pass++
			}
		}
		got, relaxed := relax(&tc.r, c, tc.budget, pass)
		var idx []int
		for _, x := range got {
			idx = append(idx, x.Index)
		}
		if !cmp.Equal(idx, tc.wantIdx) || !cmp.Equal(relaxed, tc.wantRelaxed) {
			t.Errorf("%s: kept %v relaxed %v, want %v %v", tc.name, idx, relaxed, tc.wantIdx, tc.wantRelaxed)
		}
	}
}
