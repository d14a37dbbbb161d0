package metrics

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseSLO reads goodput budgets in vLLM's form "ttft:MS,tpot:MS,e2el:MS"
// (any subset, milliseconds, commas or spaces between pairs).
func ParseSLO(s string) (SLO, error) {
	var slo SLO
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		k, v, ok := strings.Cut(part, ":")
		if !ok {
			return SLO{}, fmt.Errorf("goodput: want name:ms pairs like ttft:500, got %q", part)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			return SLO{}, fmt.Errorf("goodput: %s must be a positive number of milliseconds, got %q", k, v)
		}
		d := time.Duration(f * float64(time.Millisecond))
		switch strings.ToLower(k) {
		case "ttft":
			slo.TTFT = d
		case "tpot":
			slo.TPOT = d
		case "e2el", "e2e":
			slo.E2E = d
		default:
			return SLO{}, fmt.Errorf("goodput: unknown metric %q (want ttft, tpot, e2el)", k)
		}
	}
	return slo, nil
}

// String formats s the way ParseSLO reads it.
func (s SLO) String() string {
	var parts []string
	add := func(k string, d time.Duration) {
		if d > 0 {
			parts = append(parts, k+":"+strconv.FormatFloat(ms(d), 'g', -1, 64))
		}
	}
	add("ttft", s.TTFT)
	add("tpot", s.TPOT)
	add("e2el", s.E2E)
	return strings.Join(parts, ",")
}
