package autopilot

import "testing"

// FuzzParseTargets: whatever --slo, the routebalance.slo field or a
// tenant's settings hold, ParseTargets returns valid targets or an error,
// and valid targets survive String → ParseTargets.
func FuzzParseTargets(f *testing.F) {
	for _, s := range []string{
		"p95_e2e_ms=3000", "p95_ttft_ms=800", "p95_e2e_ms=3000,p95_ttft_ms=500,max_cost_usd_per_request=0.002",
		" P95_E2E_MS = 2500.5 ", "max_cost_usd_per_request=1", "p95_e2e_ms=0", "p95_e2e_ms=-1", "p95_e2e_ms=NaN",
		"p95_e2e_ms=Inf", "p95_e2e_ms=1e300", "p95_e2e_ms=1,p95_e2e_ms=2", "x=1", "", ",,", "p95_e2e_ms", "p95_e2e_ms=0x1p3",
		"p95_e2e_ms=1e-9",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseTargets(s)
		if err != nil {
			return
		}
		if err := tg.Validate(); err != nil {
			t.Fatalf("ParseTargets(%q) = %+v, which does not validate: %v", s, tg, err)
		}
		back, err := ParseTargets(tg.String())
		if err != nil {
			t.Fatalf("ParseTargets(%q).String() = %q does not parse back: %v", s, tg.String(), err)
		}
		if back != tg {
			t.Fatalf("round trip of %q: %+v → %q → %+v", s, tg, tg.String(), back)
		}
	})
}

// FuzzParseParams: --autopilot-params gives valid constants (Validate
// holds: every step ≤ max step ≤ 1) or an error.
func FuzzParseParams(f *testing.F) {
	for _, s := range []string{
		"", "margin=0.1,band=0.3,dwell=1", "steps=0.1/0.2", "steps=0.3", "max_step=0.1", "steps=0.05/0.1,max_step=0.1",
		"margin=1", "band=-1", "dwell=-1", "min_gain=NaN", "steps=", "steps=/", "x=1", "margin", "margin=0.1,margin=0.2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseParams(s)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("ParseParams(%q) = %+v, which does not validate: %v", s, p, err)
		}
	})
}
