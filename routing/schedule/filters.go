package schedule

import "github.com/routebalance/routebalance/routing"

// softFilter is one soft filter of the candidate list: it is active for a
// request that sets its budget, and rejects a candidate whose prediction
// breaks it. Soft filters are relaxed in table order when no candidate
// passes all of them (README "Filters").
type softFilter struct {
	name   string
	bit    uint8
	active func(r *routing.Request) bool
	fails  func(in filterInput) bool
}

// filterInput is what a soft filter judges: the request, the candidate's
// prediction, its predicted quality, its output length at the SLO
// confidence and the request's cost budget. It is passed by value: the
// filters are func values of a table, so a pointer argument would escape
// and the prediction with it (2 allocations per candidate).
type filterInput struct {
	r      *routing.Request
	p      prediction
	q      float64
	lq     float64
	budget float64
}

// soft filter bits, in relaxation order.
const (
	failTTFT uint8 = 1 << iota
	failTPOT
	failE2E
	failQuality
	failBudget
)

// softFilters is the table of soft filters in relaxation order.
var softFilters = [...]softFilter{
	{"ttft", failTTFT,
		func(r *routing.Request) bool { return r.SLO.TTFT > 0 },
		func(in filterInput) bool { return in.p.TTFT+in.p.Wait > in.r.SLO.TTFT.Seconds() }},
	{"tpot", failTPOT,
		func(r *routing.Request) bool { return r.SLO.TPOT > 0 },
		func(in filterInput) bool { return in.p.TPOT > in.r.SLO.TPOT.Seconds() }},
	{"e2e", failE2E,
		func(r *routing.Request) bool { return r.SLO.E2E > 0 },
		func(in filterInput) bool { return in.p.TTFT+in.p.Wait+in.p.TPOT*in.lq > in.r.SLO.E2E.Seconds() }},
	{"quality", failQuality,
		func(r *routing.Request) bool { return r.QualityFloor > 0 },
		func(in filterInput) bool { return in.q < in.r.QualityFloor }},
	{"budget", failBudget,
		func(r *routing.Request) bool { return r.Budget() > 0 },
		func(in filterInput) bool { return in.p.Cost > in.budget }},
}

// softFail returns the bits of the active soft filters the candidate fails.
func softFail(in filterInput) uint8 {
	var fail uint8
	for i := range softFilters {
		f := &softFilters[i]
		if f.active(in.r) && f.fails(in) {
			fail |= f.bit
		}
	}
	return fail
}

// relaxName names a soft filter bit.
func relaxName(bit uint8) string {
	for i := range softFilters {
		if softFilters[i].bit == bit {
			return softFilters[i].name
		}
	}
	return ""
}

// hasFilter reports whether the soft filter bit is active for r.
func hasFilter(r *routing.Request, bit uint8) bool {
	for i := range softFilters {
		if softFilters[i].bit == bit {
			return softFilters[i].active(r)
		}
	}
	return false
}
