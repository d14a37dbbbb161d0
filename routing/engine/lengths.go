package engine

import (
	"math"
	"strings"
)

// Median returns the task's median output tokens before verbosity; an
// unknown or empty task uses the "default" entry.
func (o *OutputLengths) Median(task string) float64 {
	if m, ok := o.MedianTokensByTask[task]; ok {
		return m
	}
	return o.MedianTokensByTask[DefaultTask]
}

// Natural is the length, in tokens, the model "wants" to answer prompt
// with, before any max_tokens cap:
//
//	round(median(task) × verbosity × exp(σ·z)), at least 1,
//
// where z is a standard normal drawn from hash(seed, model, prompt), so the
// same prompt gets the same length from the same model every time under
// the same seed.
func (o *OutputLengths) Natural(prompt, model, task string, verbosity float64, seed uint64) int {
	z := normal(HashPrompt(seed, model, prompt))
	n := math.Round(o.Median(task) * verbosity * math.Exp(o.Sigma*z))
	if n < 1 || math.IsNaN(n) {
		return 1
	}
	if n > 1<<30 {
		return 1 << 30
	}
	return int(n)
}

// HashPrompt is FNV-1a over the seed, model and prompt (with separators),
// finished with a splitmix64 round. It is stable across processes and
// platforms, unlike hash/maphash. The length model draws from it; the HTTP
// emulator seeds its invented text, logprobs and embeddings with it.
func HashPrompt(seed uint64, model, prompt string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < 8; i++ {
		h ^= (seed >> (8 * i)) & 0xff
		h *= prime
	}
	for _, s := range [...]string{model, "\x00", prompt} {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= prime
		}
	}
	return Splitmix(h)
}

// Splitmix is one splitmix64 round: a stable 64-bit mix of x.
func Splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// normal turns a 64-bit hash into a standard normal variate (Box–Muller on
// two 32-bit halves mapped into (0,1)).
func normal(h uint64) float64 {
	u1 := (float64(h>>32) + 0.5) / (1 << 32)
	u2 := (float64(h&0xffffffff) + 0.5) / (1 << 32)
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// JoinChat joins message contents into the text the world model hashes and
// classifies: the contents separated by newlines.
func JoinChat(contents []string) string { return strings.Join(contents, "\n") }
