// Package metrics is the bookkeeping shared by the live load generator
// (routebalance bench) and the discrete-event simulator (routebalance
// simulate): per-request records, percentiles, TPOT, goodput under SLOs,
// throughput, quality and cost. It follows vLLM's `bench serve`
// definitions; see README.md for every formula.
package metrics

import (
	"math"
	"slices"
	"time"
)

// Record is what happened to one request, as measured by a client (bench)
// or by the simulator's virtual clock.
type Record struct {
	// Start is when the request was sent, relative to the start of the run.
	Start time.Duration
	// TTFT is the time from sending to the first output token.
	TTFT time.Duration
	// E2E is the time from sending to the last byte of the response.
	E2E time.Duration
	// ITL holds the gaps between consecutive output chunks (streaming only).
	ITL []time.Duration
	// PromptTokens and OutputTokens are the usage of the request.
	PromptTokens int
	OutputTokens int
	// Err is non-empty when the request failed; failed requests count in
	// Failed and in nothing else.
	Err string
	// Quality is the label of the model that served the request; it counts
	// only when HasQuality is set.
	Quality    float64
	HasQuality bool
	// CostUSD is what the serving instance charged for the request.
	CostUSD float64
	// Model and Instance name what served the request (may be empty);
	// Tier is its model@gpu.
	Model    string
	Instance string
	Tier     string
	// PredictedE2E is the scheduler's T̂ for the request on the instance it
	// chose (0 when unknown), to compare with E2E.
	PredictedE2E time.Duration
	// PredictedTTFT (queue wait included) and PredictedTokens are the
	// scheduler's TTFT̂ and L̂ for the request.
	PredictedTTFT   time.Duration
	PredictedTokens float64
}

// OK reports whether the request succeeded.
func (r *Record) OK() bool { return r.Err == "" }

// TPOT returns the time per output token after the first,
// (E2E − TTFT)/(OutputTokens − 1), and false when the request produced at
// most one token (TPOT is undefined then, as in vLLM).
func (r *Record) TPOT() (time.Duration, bool) {
	if r.OutputTokens <= 1 {
		return 0, false
	}
	return (r.E2E - r.TTFT) / time.Duration(r.OutputTokens-1), true
}

// SLO holds goodput budgets; a zero field is not checked.
type SLO struct {
	TTFT time.Duration `json:"ttft_ms"`
	TPOT time.Duration `json:"tpot_ms"`
	E2E  time.Duration `json:"e2el_ms"`
}

// Zero reports whether s sets no budget at all.
func (s SLO) Zero() bool { return s.TTFT == 0 && s.TPOT == 0 && s.E2E == 0 }

// Met reports whether a successful request met every budget of s. A request
// with one output token has no TPOT and passes the TPOT budget.
func (s SLO) Met(r *Record) bool {
	if !r.OK() {
		return false
	}
	if s.TTFT > 0 && r.TTFT > s.TTFT {
		return false
	}
	if s.E2E > 0 && r.E2E > s.E2E {
		return false
	}
	if s.TPOT > 0 {
		if t, ok := r.TPOT(); ok && t > s.TPOT {
			return false
		}
	}
	return true
}

// Stats summarises a sample. Units are those of the input.
type Stats struct {
	N      int     `json:"n"`
	Mean   float64 `json:"mean"`
	Median float64 `json:"median"`
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
	Max    float64 `json:"max"`
}

// Summarize returns the Stats of vals (reordered in place). An empty
// sample gives zero Stats.
func Summarize(vals []float64) Stats {
	if len(vals) == 0 {
		return Stats{}
	}
	slices.Sort(vals)
	var sum float64
	for _, v := range vals {
		sum += v
	}
	return Stats{
		N:      len(vals),
		Mean:   sum / float64(len(vals)),
		Median: Percentile(vals, 50),
		P95:    Percentile(vals, 95),
		P99:    Percentile(vals, 99),
		Max:    vals[len(vals)-1],
	}
}

// Percentile returns the p-th percentile (0 ≤ p ≤ 100) of sorted values by
// linear interpolation between closest ranks: rank h = (n−1)·p/100, value
// x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]) — numpy's default, which vLLM's
// benchmark uses. An empty slice gives NaN.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if p <= 0 {
		return sorted[0]
	}
	if p >= 100 {
		return sorted[n-1]
	}
	h := float64(n-1) * p / 100
	lo := int(math.Floor(h))
	if lo+1 >= n {
		return sorted[n-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// Summary is the aggregate of a run. Latency Stats are in milliseconds.
type Summary struct {
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// DurationS is the wall (or virtual) time of the run in seconds: from
	// the first send to the last completion.
	DurationS          float64 `json:"duration_s"`
	TotalInputTokens   int     `json:"total_input_tokens"`
	TotalOutputTokens  int     `json:"total_output_tokens"`
	RequestThroughput  float64 `json:"request_throughput"`
	OutputThroughput   float64 `json:"output_throughput"`
	TotalTokThroughput float64 `json:"total_token_throughput"`
	// Goodput is requests per second that met every SLO budget; GoodFraction
	// is their share of all requests sent (failed included).
	Goodput      float64 `json:"request_goodput"`
	GoodFraction float64 `json:"good_fraction"`
	TTFTms       Stats   `json:"ttft_ms"`
	TPOTms       Stats   `json:"tpot_ms"`
	ITLms        Stats   `json:"itl_ms"`
	E2Ems        Stats   `json:"e2el_ms"`
	// MeanQuality averages the labels of the successful requests that have
	// one; QualityN counts them.
	MeanQuality float64 `json:"mean_quality"`
	QualityN    int     `json:"quality_n"`
	// CostPerRequestUSD is total cost ÷ completed requests; CostPer1kTokUSD
	// is total cost ÷ (input + output tokens) × 1000.
	TotalCostUSD      float64 `json:"total_cost_usd"`
	CostPerRequestUSD float64 `json:"cost_per_request_usd"`
	CostPer1kTokUSD   float64 `json:"cost_per_1k_tokens_usd"`
}

// SummarizeRun aggregates records under the goodput budgets slo. The run's
// duration is from the earliest Start to the latest Start+E2E over all
// records (failed ones included), unless duration > 0 overrides it.
func SummarizeRun(recs []Record, slo SLO, duration time.Duration) Summary {
	var s Summary
	var ttft, tpot, itl, e2e []float64
	var qsum float64
	first, last := time.Duration(math.MaxInt64), time.Duration(0)
	good := 0
	for i := range recs {
		r := &recs[i]
		first = min(first, r.Start)
		last = max(last, r.Start+r.E2E)
		if !r.OK() {
			s.Failed++
			continue
		}
		s.Completed++
		s.TotalInputTokens += r.PromptTokens
		s.TotalOutputTokens += r.OutputTokens
		s.TotalCostUSD += r.CostUSD
		ttft = append(ttft, ms(r.TTFT))
		e2e = append(e2e, ms(r.E2E))
		if t, ok := r.TPOT(); ok {
			tpot = append(tpot, ms(t))
		}
		for _, g := range r.ITL {
			itl = append(itl, ms(g))
		}
		if r.HasQuality {
			qsum += r.Quality
			s.QualityN++
		}
		if slo.Met(r) {
			good++
		}
	}
	if duration <= 0 && len(recs) > 0 {
		duration = last - first
	}
	s.DurationS = duration.Seconds()
	if s.DurationS > 0 {
		s.RequestThroughput = float64(s.Completed) / s.DurationS
		s.OutputThroughput = float64(s.TotalOutputTokens) / s.DurationS
		s.TotalTokThroughput = float64(s.TotalInputTokens+s.TotalOutputTokens) / s.DurationS
		s.Goodput = float64(good) / s.DurationS
	}
	if len(recs) > 0 {
		s.GoodFraction = float64(good) / float64(len(recs))
	}
	s.TTFTms, s.TPOTms, s.ITLms, s.E2Ems = Summarize(ttft), Summarize(tpot), Summarize(itl), Summarize(e2e)
	if s.QualityN > 0 {
		s.MeanQuality = qsum / float64(s.QualityN)
	}
	if s.Completed > 0 {
		s.CostPerRequestUSD = s.TotalCostUSD / float64(s.Completed)
	}
	if tok := s.TotalInputTokens + s.TotalOutputTokens; tok > 0 {
		s.CostPer1kTokUSD = s.TotalCostUSD / float64(tok) * 1000
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
