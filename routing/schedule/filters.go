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

// keepModel restricts cands to the candidates of model mi (workflow
// stickiness) when some but not all of them are of it, and returns them
// with how many pass every soft filter; otherwise cands and passAll as
// they are.
func keepModel(cands []Candidate, mi, passAll int) ([]Candidate, int) {
	n := 0
	for j := range cands {
		if cands[j].Model == mi {
			n++
		}
	}
	if n == 0 || n == len(cands) {
		return cands, passAll
	}
	keep, pass := 0, 0
	for j := range cands {
		if cands[j].Model == mi {
			cands[keep] = cands[j]
			keep++
			if cands[j].fail == 0 {
				pass++
			}
		}
	}
	return cands[:keep], pass
}

// relax applies the soft filters to cands, of which passAll fail none: a
// budget no candidate meets keeps only the cheapest; otherwise the filters
// are relaxed in table order until some candidate passes the rest, and
// those are kept. It returns the survivors and the names of the active
// filters it relaxed (README "Filters").
func relax(r *routing.Request, cands []Candidate, budget float64, passAll int) ([]Candidate, []string) {
	if budget > 0 {
		cheapest := -1
		for j := range cands {
			if cands[j].fail&failBudget == 0 {
				cheapest = -2
				break
			}
			if cheapest < 0 || cands[j].Cost < cands[cheapest].Cost {
				cheapest = j
			}
		}
		if cheapest >= 0 {
			cands[0] = cands[cheapest]
			return cands[:1], []string{relaxName(failBudget)}
		}
	}
	if passAll == len(cands) {
		return cands, nil
	}
	var relaxed []string
	mask := failTTFT | failTPOT | failE2E | failQuality | failBudget
	for bit := failTTFT; ; bit <<= 1 {
		n := 0
		for j := range cands {
			if cands[j].fail&mask == 0 {
				n++
			}
		}
		if n > 0 {
			break
		}
		mask &^= bit
		if hasFilter(r, bit) {
			relaxed = append(relaxed, relaxName(bit))
		}
	}
	keep := 0
	for j := range cands {
		if cands[j].fail&mask == 0 {
			cands[keep] = cands[j]
			keep++
		}
	}
	return cands[:keep], relaxed
}
