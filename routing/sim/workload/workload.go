// Package workload is the traffic shared by the live load generator and the
// discrete-event simulator: labelled prompts read from JSONL, sampled into a
// run of n requests, and their arrival times (Poisson, or gamma with a
// burstiness shape, as in vLLM's `bench serve`).
package workload

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"time"
)

// Item is one prompt of a data file. Lines look like
// {"id","prompt","task"?,"scores":{model: q}?,"output_tokens":{model: n}?};
// lines without "scores" count for latency and cost only.
type Item struct {
	ID           string             `json:"id"`
	Prompt       string             `json:"prompt"`
	Task         string             `json:"task,omitempty"`
	Scores       map[string]float64 `json:"scores,omitempty"`
	OutputTokens map[string]int     `json:"output_tokens,omitempty"`
	// PromptTokens, when > 0, is the prompt's size instead of the
	// estimate from Prompt (replays of recorded traffic, whose prompts are
	// not stored).
	PromptTokens int `json:"prompt_tokens,omitempty"`
}

// AnyModel is the OutputTokens key that applies to every model without
// an entry of its own (a recorded request's length, whoever serves it).
const AnyModel = "*"

// OutputFor is the recorded output length of the item on model (0: none,
// the world model decides).
func (it *Item) OutputFor(model string) int {
	if n, ok := it.OutputTokens[model]; ok {
		return n
	}
	return it.OutputTokens[AnyModel]
}

// Quality returns the label of model for the item, and whether it has one.
func (it *Item) Quality(model string) (float64, bool) {
	q, ok := it.Scores[model]
	return q, ok
}

// ErrEmpty means a data file held no usable prompt.
var ErrEmpty = errors.New("no prompts in data")

// Read parses JSONL items from r; empty lines are skipped, a line without a
// prompt is an error naming the line.
func Read(r io.Reader) ([]Item, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	var items []Item
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var it Item
		if err := json.Unmarshal(b, &it); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if it.Prompt == "" {
			return nil, fmt.Errorf("line %d: no prompt", line)
		}
		if it.ID == "" {
			it.ID = fmt.Sprintf("line-%d", line)
		}
		items = append(items, it)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, ErrEmpty
	}
	return items, nil
}

// ReadFile reads a JSONL data file.
func ReadFile(path string) ([]Item, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	items, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return items, nil
}

// Sample returns n items drawn from items with a generator seeded by seed:
// a random selection without replacement when n ≤ len(items), with
// replacement when n exceeds it.
func Sample(items []Item, n int, seed uint64) []Item {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]Item, n)
	if n <= len(items) {
		perm := rng.Perm(len(items))
		for k := range n {
			out[k] = items[perm[k]]
		}
		return out
	}
	for k := range n {
		out[k] = items[rng.IntN(len(items))]
	}
	return out
}

// Arrivals returns n send times measured from the start of a run, following
// vLLM's request generator: the first request goes at 0 and the gap before
// each next one is drawn from a gamma distribution with shape burstiness and
// scale 1/(rate·burstiness), so its mean is 1/rate whatever the burstiness
// (burstiness 1 is a Poisson process; below 1 burstier, above 1 more
// regular). rate = +Inf (or ≤ 0) sends everything at 0. Seeded, deterministic.
func Arrivals(n int, rate, burstiness float64, seed uint64) []time.Duration {
	out := make([]time.Duration, n)
	if n == 0 || rate <= 0 || math.IsInf(rate, 1) {
		return out
	}
	if burstiness <= 0 {
		burstiness = 1
	}
	rng := rand.New(rand.NewPCG(seed, 0xa77))
	scale := 1 / (rate * burstiness)
	var t float64
	for k := 1; k < n; k++ {
		t += Gamma(rng, burstiness) * scale
		out[k] = time.Duration(t * float64(time.Second))
	}
	return out
}

// Gamma draws from the gamma distribution with the given shape and scale 1
// (Marsaglia and Tsang's method; shape < 1 by the boost
// G(a) = G(a+1)·U^(1/a)).
func Gamma(rng *rand.Rand, shape float64) float64 {
	if shape == 1 {
		return rng.ExpFloat64()
	}
	if shape < 1 {
		u := rng.Float64()
		for u == 0 {
			u = rng.Float64()
		}
		return Gamma(rng, shape+1) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x {
			return d * v
		}
		if math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
