package routing

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// WeightTolerance is how far the sum of weights may stray from 1.
const WeightTolerance = 1e-6

// Weights steer the fused score S = wq·Q + wc·(1−C/maxC) + wl·(1−T/maxT).
// They are non-negative and sum to 1.
type Weights struct {
	Quality float64 `json:"quality"`
	Cost    float64 `json:"cost"`
	Latency float64 `json:"latency"`
}

// Validate reports whether w lies on the simplex.
func (w Weights) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"quality", w.Quality}, {"cost", w.Cost}, {"latency", w.Latency}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return &FieldError{Field: "weights." + f.name, Msg: fmt.Sprintf("must be a number >= 0, got %v", f.v)}
		}
	}
	if sum := w.Quality + w.Cost + w.Latency; math.Abs(sum-1) > WeightTolerance {
		return &FieldError{Field: "weights", Msg: fmt.Sprintf("must sum to 1, got %.6g", sum)}
	}
	return nil
}

// Preset names.
const (
	PresetQuality  = "quality"
	PresetLatency  = "latency"
	PresetCost     = "cost"
	PresetBalanced = "balanced"
	PresetCustom   = "custom"
)

// PresetWeights returns the weight vector of a named preset. The corners
// put 0.8 on their objective and 0.1 on each other one (the paper's quality
// corner used w_q = 0.8); balanced is 1/3 each.
func PresetWeights(name string) (Weights, error) {
	switch strings.ToLower(name) {
	case PresetQuality:
		return Weights{Quality: 0.8, Cost: 0.1, Latency: 0.1}, nil
	case PresetLatency:
		return Weights{Quality: 0.1, Cost: 0.1, Latency: 0.8}, nil
	case PresetCost:
		return Weights{Quality: 0.1, Cost: 0.8, Latency: 0.1}, nil
	case PresetBalanced:
		return Weights{Quality: 1.0 / 3, Cost: 1.0 / 3, Latency: 1.0 / 3}, nil
	}
	return Weights{}, &FieldError{Field: "preset", Msg: "must be quality, latency, cost or balanced, got " + quote(name)}
}

// ParseWeights reads "quality=0.6,cost=0.2,latency=0.2"; the short keys
// q, c and l are accepted too. Missing keys are 0. The result is validated.
func ParseWeights(s string) (Weights, error) {
	var w Weights
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return Weights{}, &FieldError{Field: "weights", Msg: "expected key=value pairs like quality=0.6,cost=0.2,latency=0.2, got " + quote(part)}
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return Weights{}, &FieldError{Field: "weights", Msg: "value of " + quote(k) + " is not a number"}
		}
		key := strings.ToLower(strings.TrimSpace(k))
		var dst *float64
		switch key {
		case "quality", "q":
			dst, key = &w.Quality, "quality"
		case "cost", "c":
			dst, key = &w.Cost, "cost"
		case "latency", "l":
			dst, key = &w.Latency, "latency"
		default:
			return Weights{}, &FieldError{Field: "weights", Msg: "unknown weight " + quote(k) + " (want quality, cost, latency)"}
		}
		if seen[key] {
			return Weights{}, &FieldError{Field: "weights", Msg: "weight " + quote(key) + " given twice"}
		}
		seen[key] = true
		*dst = f
	}
	if len(seen) == 0 {
		return Weights{}, &FieldError{Field: "weights", Msg: "no weights given"}
	}
	return w, w.Validate()
}

// String formats w the way ParseWeights reads it: four significant
// digits, more when the rounded weights would no longer sum to 1 (1/3
// each prints as 0.3333333), so valid weights always parse back.
func (w Weights) String() string {
	for prec := 4; ; prec++ {
		s := fmt.Sprintf("quality=%.*g,cost=%.*g,latency=%.*g", prec, w.Quality, prec, w.Cost, prec, w.Latency)
		if prec >= 17 || w.Validate() != nil {
			return s
		}
		if _, err := ParseWeights(s); err == nil {
			return s
		}
	}
}

// FieldError is a validation error about one input field. The api package
// answers it with 400 and the field as the error's param.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func quote(s string) string { return strconv.Quote(s) }
