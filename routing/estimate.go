package routing

import "math"

// LengthBuckets is the number of buckets of a LengthHist.
const LengthBuckets = 16

// LengthBucketUpper returns the inclusive upper edge, in tokens, of bucket k
// of a LengthHist: 16·1.5^k for k < 15 (16, 24, 36, … 4671); the last bucket
// is open and reported as 1.5× the previous edge.
func LengthBucketUpper(k int) float64 {
	if k < 0 {
		return 0
	}
	if k >= LengthBuckets-1 {
		k = LengthBuckets - 1
	}
	return 16 * math.Pow(1.5, float64(k))
}

// LengthBucket returns the bucket index of an output length in tokens.
func LengthBucket(tokens float64) int {
	if tokens <= 16 {
		return 0
	}
	k := int(math.Ceil(math.Log(tokens/16) / math.Log(1.5)))
	if k >= LengthBuckets {
		return LengthBuckets - 1
	}
	return k
}

// LengthHist is a probability mass over output-length buckets (see
// LengthBucketUpper). The zero value is empty; Normalize makes it sum to 1.
type LengthHist [LengthBuckets]float32

// Add puts weight w on the bucket of tokens.
func (h *LengthHist) Add(tokens, w float64) { h[LengthBucket(tokens)] += float32(w) }

// Normalize scales h to sum to 1; an empty histogram stays empty.
func (h *LengthHist) Normalize() {
	var s float32
	for _, v := range h {
		s += v
	}
	if s <= 0 {
		return
	}
	for k := range h {
		h[k] /= s
	}
}

// Empty reports whether h carries no mass.
func (h *LengthHist) Empty() bool {
	for _, v := range h {
		if v > 0 {
			return false
		}
	}
	return true
}

// Quantile returns the upper edge of the first bucket where the cumulative
// mass reaches p (0 < p ≤ 1): a conservative length at confidence p. An
// empty histogram returns 0.
func (h *LengthHist) Quantile(p float64) float64 {
	var c float64
	for k, v := range h {
		c += float64(v)
		if v > 0 && c >= p-1e-6 {
			return LengthBucketUpper(k)
		}
	}
	for k := LengthBuckets - 1; k >= 0; k-- {
		if h[k] > 0 {
			return LengthBucketUpper(k)
		}
	}
	return 0
}

// PromptEstimate is the prompt-intrinsic prediction for one request over a
// cluster's models. Every slice is indexed like the model list the
// estimator was given.
type PromptEstimate struct {
	// Quality is Q̂[r][m] in [0,1].
	Quality []float64
	// Length is L̂[r][m], the expected output tokens.
	Length []float64
	// Hist is the output-length distribution per model, for CDF-based SLO
	// filters; an empty histogram means "unknown".
	Hist []LengthHist
	// Source says where each model's quality came from.
	Source []EstimateSource
	// Memo is the estimator's handle of what it computed for this prompt
	// (embedding, features, neighbours), passed back when the decided
	// request is observed so learning never recomputes it; 0 for none.
	Memo uint64
}

// Reset sizes e for n models, reusing its storage.
func (e *PromptEstimate) Reset(n int) {
	e.Memo = 0
	e.Quality = resize(e.Quality, n)
	e.Length = resize(e.Length, n)
	if cap(e.Hist) >= n {
		e.Hist = e.Hist[:n]
		clear(e.Hist)
	} else {
		e.Hist = make([]LengthHist, n)
	}
	if cap(e.Source) >= n {
		e.Source = e.Source[:n]
		clear(e.Source)
	} else {
		e.Source = make([]EstimateSource, n)
	}
}

func resize(s []float64, n int) []float64 {
	if cap(s) >= n {
		s = s[:n]
		clear(s)
		return s
	}
	return make([]float64, n)
}

// EstimateSource says which knowledge a model's quality estimate rests on.
type EstimateSource uint8

// Estimate sources.
const (
	SourcePrior   EstimateSource = iota // the instance's quality_prior
	SourceIndex                         // the operator-wide index
	SourceCluster                       // the cluster's own uploaded labels
	SourceOracle                        // true labels (simulation only)
)

// String names the source.
func (s EstimateSource) String() string {
	switch s {
	case SourceIndex:
		return "index"
	case SourceCluster:
		return "cluster"
	case SourceOracle:
		return "oracle"
	default:
		return "prior"
	}
}

// Load is an instance's state as the latency model sees it: the features of
// a TPOT prediction. Counts are as of the moment of the decision.
type Load struct {
	// Running is the decode batch size b (sequences being generated).
	Running float64
	// Waiting is the number of requests queued behind max_num_seqs (or in
	// the router's admission queue for the instance).
	Waiting float64
	// KVUsage is the KV-cache use in [0,1].
	KVUsage float64
	// PendingDecodeTokens is the predicted decode tokens still to generate
	// by the requests on the instance.
	PendingDecodeTokens float64
	// PromptTokens is the prompt size of the request being placed.
	PromptTokens float64
}

// TierLatency is the latency model of one tier (model@gpu): TPOT in seconds
// per output token and TTFT in seconds, at a load. A scheduler that binds
// each instance to its tier's model once avoids a lookup per candidate.
type TierLatency interface {
	TPOT(l Load) float64
	TTFT(l Load) float64
}
