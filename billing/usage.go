package billing

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Groupings accepted by UsageQuery.GroupBy ("" = one total row).
const (
	GroupHour     = "hour"
	GroupDay      = "day"
	GroupModel    = "model"
	GroupInstance = "instance"
	GroupKey      = "key"
)

// UsageQuery selects a tenant's ledger rows that finished in [From, To).
type UsageQuery struct {
	TenantID string
	From, To time.Time
	GroupBy  string
}

// Validate reports a missing tenant, an empty range or an unknown grouping.
func (q UsageQuery) Validate() error {
	switch {
	case q.TenantID == "":
		return fmt.Errorf("%w: tenant is required", ErrInvalid)
	case !q.From.Before(q.To):
		return fmt.Errorf("%w: from must be before to", ErrInvalid)
	}
	switch q.GroupBy {
	case "", GroupHour, GroupDay, GroupModel, GroupInstance, GroupKey:
		return nil
	}
	return fmt.Errorf("%w: group_by must be one of hour, day, model, instance, key", ErrInvalid)
}

// UsageRow is the totals of one group. Latencies are over the requests of
// the group (P95 interpolated linearly between ranks, like Postgres'
// percentile_cont); tokens are prompt + output.
type UsageRow struct {
	// Group is the hour (RFC 3339, UTC), the day (YYYY-MM-DD), the model,
	// the instance id or the key id; "" for the total.
	Group        string `json:"group"`
	Requests     int64  `json:"requests"`
	PromptTokens int64  `json:"prompt_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	Tokens       int64  `json:"tokens"`
	// Cost and Billed are the group's sums in nano-USD (exact);
	// CostUSD and BilledUSD are the same in dollars (set by SetMoney).
	Cost                 Nano    `json:"cost_nano_usd"`
	Billed               Nano    `json:"billed_nano_usd"`
	CostUSD              float64 `json:"cost_usd"`
	BilledUSD            float64 `json:"billed_usd"`
	MeanTTFTMs           float64 `json:"mean_ttft_ms"`
	P95TTFTMs            float64 `json:"p95_ttft_ms"`
	MeanE2EMs            float64 `json:"mean_latency_ms"`
	P95E2EMs             float64 `json:"p95_latency_ms"`
	MeanPredictedQuality float64 `json:"mean_predicted_quality"`
}

// SetMoney sets the row's sums in Nano and their dollar fields.
func (r *UsageRow) SetMoney(cost, billed Nano) {
	r.Cost, r.Billed = cost, billed
	r.CostUSD, r.BilledUSD = cost.USD(), billed.USD()
}

// UsageReport answers a UsageQuery: the groups in order and the total.
type UsageReport struct {
	From    time.Time  `json:"from"`
	To      time.Time  `json:"to"`
	GroupBy string     `json:"group_by"`
	Rows    []UsageRow `json:"rows"`
	Total   UsageRow   `json:"total"`
}

// GroupOf returns the group label of a request under groupBy.
func GroupOf(groupBy string, finished time.Time, model, instanceID, keyID string) string {
	switch groupBy {
	case GroupHour:
		return finished.UTC().Truncate(time.Hour).Format(time.RFC3339)
	case GroupDay:
		return finished.UTC().Format(time.DateOnly)
	case GroupModel:
		return model
	case GroupInstance:
		return instanceID
	case GroupKey:
		return keyID
	}
	return ""
}

// UsageSample is one ledger row as the usage aggregation sees it.
type UsageSample struct {
	Group                      string
	PromptTokens, OutputTokens int64
	Cost, Billed               Nano
	TTFTMs, E2EMs, Quality     float64
}

// Accumulator builds UsageRows from samples in memory; the SQLite store
// uses it (Postgres aggregates in SQL with the same definitions).
type Accumulator struct {
	groups map[string]*acc
	order  []string
}

type acc struct {
	row        UsageRow
	ttft, e2e  []float64
	qualitySum float64
}

// NewAccumulator returns an empty Accumulator.
func NewAccumulator() *Accumulator { return &Accumulator{groups: map[string]*acc{}} }

// Add counts one sample.
func (a *Accumulator) Add(s UsageSample) {
	g := a.groups[s.Group]
	if g == nil {
		g = &acc{row: UsageRow{Group: s.Group}}
		a.groups[s.Group] = g
		a.order = append(a.order, s.Group)
	}
	r := &g.row
	r.Requests++
	r.PromptTokens += s.PromptTokens
	r.OutputTokens += s.OutputTokens
	r.Cost = r.Cost.Add(s.Cost)
	r.Billed = r.Billed.Add(s.Billed)
	g.ttft = append(g.ttft, s.TTFTMs)
	g.e2e = append(g.e2e, s.E2EMs)
	g.qualitySum += s.Quality
}

// Rows returns the groups sorted by label.
func (a *Accumulator) Rows() []UsageRow {
	sort.Strings(a.order)
	out := make([]UsageRow, 0, len(a.order))
	for _, k := range a.order {
		g := a.groups[k]
		r := g.row
		n := float64(r.Requests)
		r.Tokens = r.PromptTokens + r.OutputTokens
		r.SetMoney(r.Cost, r.Billed)
		r.MeanTTFTMs, r.P95TTFTMs = mean(g.ttft), Percentile(g.ttft, 0.95)
		r.MeanE2EMs, r.P95E2EMs = mean(g.e2e), Percentile(g.e2e, 0.95)
		r.MeanPredictedQuality = g.qualitySum / n
		out = append(out, r)
	}
	return out
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// Percentile returns the p-quantile (0 ≤ p ≤ 1) of xs with linear
// interpolation between the closest ranks (Postgres' percentile_cont); it
// sorts xs in place and returns 0 for no values.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	pos := p * float64(len(xs)-1)
	lo := math.Floor(pos)
	hi := math.Ceil(pos)
	if lo == hi {
		return xs[int(lo)]
	}
	return xs[int(lo)] + (xs[int(hi)]-xs[int(lo)])*(pos-lo)
}
