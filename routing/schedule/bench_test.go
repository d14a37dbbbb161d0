package schedule

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/routebalance/routebalance/internal/benchcpu"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/fleet"
)

type fleetLeaseSpec = fleet.LeaseSpec

// benchCore builds a core over n instances of four model sizes (like the
// paper's Qwen2.5 0.5B/3B/7B/14B fleet) with some load on every instance,
// and a batch of b requests with precomputed estimates.
func benchCore(tb testing.TB, n, b int) (*Core, []*Ticket, []routing.PromptEstimate) {
	tb.Helper()
	sizes := []struct {
		model, gpu   string
		price        float64
		tpot, ttft   float64
		prior, maxCo int
	}{
		{"qwen-0.5b", "a10", 0.1, 0.008, 0.03, 0, 128},
		{"qwen-3b", "a10", 0.4, 0.015, 0.06, 0, 96},
		{"qwen-7b", "a100", 1.0, 0.025, 0.1, 0, 64},
		{"qwen-14b", "h100", 2.5, 0.035, 0.15, 0, 48},
	}
	lat := tierLatency{tpot: map[string]float64{}, ttft: map[string]float64{}, perSeq: 0.0004}
	c := &routing.Cluster{ID: "bench", Version: 1}
	for i := range n {
		s := sizes[i%len(sizes)]
		c.Instances = append(c.Instances, routing.Instance{
			ID: fmt.Sprintf("%s-%d", s.model, i), Model: s.model, GPU: s.gpu,
			PriceInPerMTok: s.price / 4, PriceOutPerMTok: s.price, MaxConcurrency: s.maxCo,
		})
		lat.tpot[s.model+"@"+s.gpu], lat.ttft[s.model+"@"+s.gpu] = s.tpot, s.ttft
	}
	core, err := NewCore(Config{}, Deps{Latency: boundLatency{lat}, Stopwatch: func() time.Duration { return 0 }}, c)
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// Load: a few requests in flight everywhere.
	now := time.Unix(0, 0)
	for _, m := range core.Fleet().Members() {
		for range rng.IntN(8) {
			core.fleet.Admit(now, m, fleetSpec(float64(50+rng.IntN(500))))
		}
	}
	ests := make([]routing.PromptEstimate, b)
	tickets := make([]*Ticket, b)
	for j := range b {
		ests[j].Reset(len(core.models))
		for m := range core.models {
			ests[j].Quality[m] = 0.2 + 0.15*float64(m) + 0.1*rng.Float64()
			ests[j].Length[m] = float64(20 + rng.IntN(800))
			ests[j].Hist[m].Add(ests[j].Length[m], 1)
		}
		tickets[j] = &Ticket{Req: &routing.Request{
			ID: fmt.Sprint(j), PromptTokens: 100 + rng.IntN(900),
			Weights: routing.Weights{Quality: 0.5, Cost: 0.25, Latency: 0.25},
			SLO:     routing.SLO{TTFT: 2 * time.Second, E2E: 60 * time.Second},
		}}
	}
	return core, tickets, ests
}

// decideBatch runs the decision loop over one batch on a fresh copy of the
// saved view: LPT order, then filters, score and pick with local-view
// updates for each request. core.mu is held by the caller.
func decideBatch(core *Core, saved []slot, tickets []*Ticket, ests []routing.PromptEstimate, now time.Time) error {
	copy(core.view, saved)
	core.orderBatch(ests)
	for _, j := range core.order {
		ch, err := core.choose(now, tickets[j].Req, &ests[j])
		if err != nil {
			return err
		}
		core.take(&core.view[ch.cand.Index], ch.cand.Tokens)
	}
	return nil
}

// BenchmarkScoreBatch measures the decision loop the paper timed: filters,
// score, LPT order and greedy assignment with local-view updates, for one
// batch. The estimator and the fleet snapshot are outside the loop. The
// reported ns/req is per request of the batch.
func BenchmarkScoreBatch(b *testing.B) {
	for _, n := range []int{13, 100, 500} {
		for _, batch := range []int{8, 32} {
			b.Run(fmt.Sprintf("I=%d/batch=%d", n, batch), func(b *testing.B) {
				core, tickets, ests := benchCore(b, n, batch)
				now := time.Unix(1, 0)
				core.buildView(now)
				saved := append([]slot(nil), core.view...)
				core.live = append(core.live[:0], tickets...)
				core.mu.Lock()
				defer core.mu.Unlock()
				b.ReportAllocs()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				cpu0, _ := benchcpu.Thread()
				b.ResetTimer()
				for b.Loop() {
					if err := decideBatch(core, saved, tickets, ests, now); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(batch)/1000, "µs/req")
				b.ReportMetric(float64(benchcpu.Since(cpu0).Nanoseconds())/float64(b.N)/float64(batch)/1000, "cpu-µs/req")
			})
		}
	}
}

// BenchmarkAssign measures a whole batch through Assign: the built-in
// prior estimator, the fleet snapshot, decisions, admission and release.
func BenchmarkAssign(b *testing.B) {
	for _, n := range []int{13, 500} {
		b.Run(fmt.Sprintf("I=%d/batch=32", n), func(b *testing.B) {
			core, tickets, _ := benchCore(b, n, 32)
			now := time.Unix(1, 0)
			ctx := context.Background()
			for _, t := range tickets {
				t.Notify = func(*Ticket) {}
			}
			b.ReportAllocs()
			for b.Loop() {
				for _, t := range tickets {
					t.state = ticketNew
				}
				core.Assign(ctx, now, tickets)
				for _, t := range tickets {
					core.Release(now, t, routing.Outcome{})
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/32/1000, "µs/req")
		})
	}
}

// tierCoef is a bound tier of tierLatency.
type tierCoef struct{ tpot, perSeq, ttft float64 }

func (t *tierCoef) TPOT(l routing.Load) float64 { return t.tpot + t.perSeq*l.Running }
func (t *tierCoef) TTFT(routing.Load) float64   { return t.ttft }

// boundLatency is tierLatency with Bind, like a production model that
// resolves a tier once per cluster version.
type boundLatency struct{ tierLatency }

func (b boundLatency) Bind(tier string) TierLatency {
	return &tierCoef{tpot: b.tpot[tier], perSeq: b.perSeq, ttft: b.ttft[tier]}
}

func fleetSpec(tokens float64) fleetLeaseSpec {
	return fleetLeaseSpec{Tokens: tokens, TPOT: 20 * time.Millisecond}
}

// BenchmarkRoute measures what the router adds to a request at light load:
// Route (hand-off to the cluster's goroutine, a batch of one, admission,
// wake-up) plus Release, one request at a time over 13 instances.
func BenchmarkRoute(b *testing.B) {
	r, err := NewRouter(Config{}, Deps{NoScrape: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	c := &routing.Cluster{ID: "bench", Version: 1}
	for i := range 13 {
		c.Instances = append(c.Instances, routing.Instance{ID: fmt.Sprint("i", i), Model: fmt.Sprint("m", i%4), GPU: "g", PriceOutPerMTok: float64(1 + i%4)})
	}
	req := routing.Request{Prompt: "hello", PromptTokens: 10}
	b.ReportAllocs()
	for b.Loop() {
		rq := req
		a, err := r.Route(ctx, c, &rq)
		if err != nil {
			b.Fatal(err)
		}
		a.Release(routing.Outcome{OutputTokens: 10})
	}
}

// TestScoreBatchAllocatesNothing: the decision loop of BenchmarkScoreBatch
// (filters with SLOs set, score, LPT, greedy assignment) allocates nothing
// once its scratch is warm, in every score form.
func TestScoreBatchAllocatesNothing(t *testing.T) {
	for _, mode := range []string{ScoreLight, ScoreRelative, ScoreRange, ScorePaper} {
		core, tickets, ests := benchCore(t, 13, 8)
		core.cfg.Score = mode
		now := time.Unix(1, 0)
		core.buildView(now)
		saved := append([]slot(nil), core.view...)
		core.live = append(core.live[:0], tickets...)
		core.mu.Lock()
		allocs := testing.AllocsPerRun(50, func() {
			if err := decideBatch(core, saved, tickets, ests, now); err != nil {
				t.Fatal(err)
			}
		})
		core.mu.Unlock()
		if allocs != 0 {
			t.Errorf("%s: %v allocations per batch, want 0", mode, allocs)
		}
	}
}
