package routing_test

import (
	"math"
	"testing"

	"github.com/routebalance/routebalance/routing"
)

// FuzzParseWeights: whatever the X-RouteBalance-Weights header or the
// routebalance.weights field holds, ParseWeights returns valid weights or
// an error, and valid weights survive String → ParseWeights (the seed of
// three thirds found String printing 0.3333 ×3, which does not sum to 1).
func FuzzParseWeights(f *testing.F) {
	for _, s := range []string{
		"quality=0.6,cost=0.2,latency=0.2", "q=1", "c=0.5,l=0.5", " quality = 0.5 , cost=0.5 ",
		"quality=1.5,cost=-0.5", "quality=NaN,cost=1", "quality=Inf", "quality=1,quality=0", "x=1", "", ",,",
		"quality=0.333333333333,cost=0.333333333333,latency=0.333333333334", "quality=1e-300,cost=1", "q=0x1p-1,c=0x1p-1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := routing.ParseWeights(s)
		if err != nil {
			return
		}
		if err := w.Validate(); err != nil {
			t.Fatalf("ParseWeights(%q) = %+v, which does not validate: %v", s, w, err)
		}
		back, err := routing.ParseWeights(w.String())
		if err != nil {
			t.Fatalf("ParseWeights(%q).String() = %q does not parse back: %v", s, w.String(), err)
		}
		// String rounds to (at least) four significant digits.
		if math.Abs(back.Quality-w.Quality) > 1e-4 || math.Abs(back.Cost-w.Cost) > 1e-4 || math.Abs(back.Latency-w.Latency) > 1e-4 {
			t.Fatalf("round trip of %q changed the weights: %+v → %+v", s, w, back)
		}
	})
}

// FuzzParsePriority: a parsed priority prints as a name that parses back
// to it.
func FuzzParsePriority(f *testing.F) {
	for _, s := range []string{"", "normal", "high", "vip", "low", "batch", "HIGH", " high", "urgent"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := routing.ParsePriority(s)
		if err != nil {
			return
		}
		back, err := routing.ParsePriority(p.String())
		if err != nil || back != p {
			t.Fatalf("ParsePriority(%q) = %v; its name %q parses to %v, %v", s, p, p.String(), back, err)
		}
	})
}
