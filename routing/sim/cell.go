package sim

import (
	"slices"

	"github.com/routebalance/routebalance/routing/sim/metrics"
)

// Cell is the outcome of one (policy, weights, rate) point of a sweep, as
// results.json and results.csv carry it. Latencies are in seconds and
// measured from a request's arrival at the router, so they include
// batching, decision and admission-queue time.
type Cell struct {
	Policy  string  `json:"policy"`
	Preset  string  `json:"preset"`
	Weights string  `json:"weights"`
	Rate    float64 `json:"rate"`
	// Variant names an ablation ("" for the default scheduler).
	Variant   string `json:"variant,omitempty"`
	N         int    `json:"n"`
	Completed int    `json:"completed"`
	Failed    int    `json:"failed"`

	MeanE2E float64 `json:"mean_e2e_s"`
	P50E2E  float64 `json:"p50_e2e_s"`
	P95E2E  float64 `json:"p95_e2e_s"`
	P99E2E  float64 `json:"p99_e2e_s"`
	// MeanTTFT is the mean time to first token; MeanTPOT the mean over
	// requests of (E2E − TTFT)/(out − 1).
	MeanTTFT float64 `json:"mean_ttft_s"`
	MeanTPOT float64 `json:"mean_tpot_s"`
	// Quality is the mean label of the served model over labelled requests.
	Quality          float64 `json:"quality"`
	CostPerRequest   float64 `json:"cost_usd"`
	CostPer1kTokens  float64 `json:"cost_per_1k_tokens_usd"`
	Throughput       float64 `json:"throughput_req_s"`
	Goodput          float64 `json:"goodput_req_s"`
	GoodFraction     float64 `json:"good_fraction"`
	DecisionMeanUs   float64 `json:"decision_mean_us"`
	DecisionP99Us    float64 `json:"decision_p99_us"`
	DecisionPerReqUs float64 `json:"decision_per_request_us"`
	MeanBatch        float64 `json:"mean_batch"`
	// ModelShare is the share of completed requests per served model.
	ModelShare map[string]float64 `json:"model_share"`
	// Tiers compares, per served tier (model@gpu), the scheduler's
	// predicted E2E with the observed one.
	Tiers map[string]TierE2E `json:"tiers,omitempty"`
	// WallS is how long the cell took to simulate.
	WallS float64 `json:"wall_s"`
	// RateProfile is the piecewise-constant λ of a profile run (Rate is
	// then its time average); Windows its 10 s windows judged against the
	// --slo targets and Attainment the share of them that met them.
	RateProfile string   `json:"rate_profile,omitempty"`
	Windows     []Window `json:"windows,omitempty"`
	Attainment  *float64 `json:"attainment,omitempty"`
	// Autopilot is the controller's trace (preset autopilot).
	Autopilot *AutopilotTrace `json:"autopilot,omitempty"`
}

// TierE2E is the predicted vs observed E2E of the requests one tier
// served: means in seconds, Ratio = observed mean / predicted mean.
type TierE2E struct {
	Share     float64 `json:"share"`
	Predicted float64 `json:"predicted_e2e_s"`
	Observed  float64 `json:"observed_e2e_s"`
	Ratio     float64 `json:"ratio"`
	// The parts: mean TTFT (queue wait included) and output tokens,
	// predicted and observed.
	PredictedTTFT   float64 `json:"predicted_ttft_s"`
	ObservedTTFT    float64 `json:"observed_ttft_s"`
	PredictedTokens float64 `json:"predicted_tokens"`
	ObservedTokens  float64 `json:"observed_tokens"`
}

// Summarize turns a run into a Cell (identity fields left for the caller).
// Throughput and goodput are over the virtual span from the first arrival
// to the last completion.
func Summarize(r *Result, slo metrics.SLO) Cell {
	s := metrics.SummarizeRun(r.Records, slo, 0)
	c := Cell{
		N:               len(r.Records),
		Completed:       s.Completed,
		Failed:          s.Failed,
		MeanE2E:         s.E2Ems.Mean / 1e3,
		P50E2E:          s.E2Ems.Median / 1e3,
		P95E2E:          s.E2Ems.P95 / 1e3,
		P99E2E:          s.E2Ems.P99 / 1e3,
		MeanTTFT:        s.TTFTms.Mean / 1e3,
		MeanTPOT:        s.TPOTms.Mean / 1e3,
		Quality:         s.MeanQuality,
		CostPerRequest:  s.CostPerRequestUSD,
		CostPer1kTokens: s.CostPer1kTokUSD,
		Throughput:      s.RequestThroughput,
		Goodput:         s.Goodput,
		GoodFraction:    s.GoodFraction,
		WallS:           r.Wall.Seconds(),
		ModelShare:      map[string]float64{},
	}
	dec := slices.Clone(r.DecisionUs)
	ds := metrics.Summarize(dec)
	c.DecisionMeanUs, c.DecisionP99Us = ds.Mean, ds.P99
	var reqs int
	for _, b := range r.BatchSizes {
		reqs += b
	}
	if len(r.BatchSizes) > 0 {
		c.MeanBatch = float64(reqs) / float64(len(r.BatchSizes))
	}
	if reqs > 0 {
		c.DecisionPerReqUs = ds.Mean * float64(len(r.DecisionUs)) / float64(reqs)
	}
	for i := range r.Records {
		if rec := &r.Records[i]; rec.OK() {
			c.ModelShare[rec.Model]++
		}
	}
	for m := range c.ModelShare {
		c.ModelShare[m] /= float64(max(c.Completed, 1))
	}
	type acc struct{ n, pred, obs, pttft, ottft, ptok, otok float64 }
	tiers := map[string]*acc{}
	for i := range r.Records {
		rec := &r.Records[i]
		if !rec.OK() || rec.Tier == "" || rec.PredictedE2E <= 0 {
			continue
		}
		a := tiers[rec.Tier]
		if a == nil {
			a = &acc{}
			tiers[rec.Tier] = a
		}
		a.n++
		a.pred += rec.PredictedE2E.Seconds()
		a.obs += rec.E2E.Seconds()
		a.pttft += rec.PredictedTTFT.Seconds()
		a.ottft += rec.TTFT.Seconds()
		a.ptok += rec.PredictedTokens
		a.otok += float64(rec.OutputTokens)
	}
	if len(tiers) > 0 {
		c.Tiers = map[string]TierE2E{}
		for t, a := range tiers {
			c.Tiers[t] = TierE2E{Share: a.n / float64(max(c.Completed, 1)), Predicted: a.pred / a.n, Observed: a.obs / a.n, Ratio: a.obs / a.pred,
				PredictedTTFT: a.pttft / a.n, ObservedTTFT: a.ottft / a.n, PredictedTokens: a.ptok / a.n, ObservedTokens: a.otok / a.n}
		}
	}
	return c
}
