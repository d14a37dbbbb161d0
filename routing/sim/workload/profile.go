package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// RateStep is one piece of a piecewise-constant rate profile: Rate req/s
// for For.
type RateStep struct {
	Rate float64       `json:"rate"`
	For  time.Duration `json:"for"`
}

// Profile is a piecewise-constant arrival rate over time.
type Profile []RateStep

// ParseProfile reads "6:60s,30:60s,6:60s": rate:duration pieces in order.
func ParseProfile(s string) (Profile, error) {
	var p Profile
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		r, d, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("rate profile: want rate:duration pieces like 6:60s, got %q", part)
		}
		rate, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || !(rate > 0) || math.IsInf(rate, 0) {
			return nil, fmt.Errorf("rate profile: rate must be a positive number, got %q", r)
		}
		dur, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || dur <= 0 {
			return nil, fmt.Errorf("rate profile: duration must be positive like 60s, got %q", d)
		}
		p = append(p, RateStep{Rate: rate, For: dur})
	}
	if len(p) == 0 {
		return nil, fmt.Errorf("rate profile: empty")
	}
	return p, nil
}

// String formats p the way ParseProfile reads it.
func (p Profile) String() string {
	parts := make([]string, len(p))
	for i, s := range p {
		parts[i] = strconv.FormatFloat(s.Rate, 'g', -1, 64) + ":" + s.For.String()
	}
	return strings.Join(parts, ",")
}

// Duration is the profile's total length.
func (p Profile) Duration() time.Duration {
	var d time.Duration
	for _, s := range p {
		d += s.For
	}
	return d
}

// RateAt is λ at offset t (the last piece's rate beyond the end).
func (p Profile) RateAt(t time.Duration) float64 {
	var end time.Duration
	for _, s := range p {
		end += s.For
		if t < end {
			return s.Rate
		}
	}
	if len(p) == 0 {
		return 0
	}
	return p[len(p)-1].Rate
}

// Mean is the time-averaged rate.
func (p Profile) Mean() float64 {
	var n, d float64
	for _, s := range p {
		n += s.Rate * s.For.Seconds()
		d += s.For.Seconds()
	}
	if d == 0 {
		return 0
	}
	return n / d
}

// Arrivals returns the send times of a renewal process whose rate follows
// p, by time rescaling: unit-rate gaps drawn as in Arrivals (gamma with
// shape burstiness, mean 1) are mapped through the inverse of the
// cumulative intensity Λ(t) = ∫λ. The first request goes at 0; arrivals
// stop at the profile's end. Seeded, deterministic.
func (p Profile) Arrivals(burstiness float64, seed uint64) []time.Duration {
	if burstiness <= 0 {
		burstiness = 1
	}
	rng := rand.New(rand.NewPCG(seed, 0xa77))
	out := []time.Duration{0}
	var s float64 // cumulative intensity of the next arrival
	for {
		s += Gamma(rng, burstiness) / burstiness
		// invert Λ: walk the pieces
		rest, t := s, 0.0
		found := false
		for _, st := range p {
			span := st.Rate * st.For.Seconds()
			if rest < span {
				t += rest / st.Rate
				found = true
				break
			}
			rest -= span
			t += st.For.Seconds()
		}
		if !found {
			return out
		}
		out = append(out, time.Duration(t*float64(time.Second)))
	}
}
