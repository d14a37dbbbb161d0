// Package estimate predicts, for a batch of prompts and a list of models,
// each model's quality and output length on each prompt: embed the prompts
// once, find their k nearest labelled prompts, and average the neighbours'
// per-model labels weighted by cosine similarity. See README.md.
package estimate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"

	"github.com/routebalance/routebalance/routing"
)

// Config tunes the KNN estimator. The zero value of a field means its
// default.
type Config struct {
	// K is the number of neighbours (default 30, chosen on a validation
	// split of the LLMRouter train part — see README).
	K int
	// SimPower sharpens the similarity weights: w = max(sim, 0)^SimPower
	// (default 2, chosen with K and Shrink).
	SimPower float64
	// Shrink pulls the neighbours' quality mean towards the model's mean
	// over the whole index: q̂ = (Σ wᵢ qᵢ + Shrink·q̄) / (Σ wᵢ + Shrink),
	// in units of one fully similar neighbour (default 1, chosen with K and
	// SimPower; a negative value disables it).
	Shrink float64
	// DefaultPrior is the quality used for a model without labels when the
	// caller passes no prior for it (default 0.5).
	DefaultPrior float64
	// DefaultLength is the output length, in tokens, assumed for a model of
	// which no length is known anywhere (default 250).
	DefaultLength float64
	// DefaultLengthSigma is the log-normal spread of the histogram that
	// goes with DefaultLength (default 0.6).
	DefaultLengthSigma float64
	// OnlineCapacity bounds the prompts added by online observations that
	// match no stored prompt; the oldest is overwritten first (default
	// 2048).
	OnlineCapacity int
	// SameSim is the cosine similarity at or above which an observation
	// updates the nearest stored prompt instead of adding one (default
	// 0.97).
	SameSim float64
	// MaxWeight caps the count behind a running mean so labels keep
	// following new observations (default 32).
	MaxWeight float64
	// MaxModels bounds the number of distinct model names (default 64).
	MaxModels int
	// Index selects the search structure Open builds over the stored
	// vectors: "exact", "twostage" (exact scan of the first PrefilterDims
	// dimensions, exact re-rank of PrefilterCandidates rows per query),
	// "hnsw" or "auto" (default: hnsw when a saved graph exists, else
	// exact).
	Index string
	// PrefilterDims and PrefilterCandidates tune "twostage" (defaults 96
	// and 100).
	PrefilterDims, PrefilterCandidates int
	// Qdrant, when set, makes Open search this Qdrant collection (filled
	// by `index build --qdrant-url`) instead of the local vectors.
	Qdrant *QdrantConfig
	// Embedder, when set, replaces the embedder recorded in the index (it
	// must produce vectors of the same dimension).
	Embedder Embedder
	// Estimator selects how quality is predicted: "head" (the learned
	// head saved by `index build`: embedding + prompt features + predicted
	// task; no neighbour search on the hot path, lengths from a per-task
	// table learned online), "knn" (similarity-weighted neighbours),
	// "blend" (the mean of both; KNN lengths) or "auto" (default: head when
	// the index has one, else knn). See README for the comparison.
	Estimator string
	// MemoCapacity is the number of recent estimates whose embedding,
	// features and nearest stored prompt are kept so an observation of a
	// decided request (ObserveLengthMemo) never embeds or searches again
	// (default 2048; older memos fall back to embedding the prompt).
	MemoCapacity int
	// OnlineRate is the step of one quality observation on the head's
	// logistic model of the served model: that prompt's logit moves by
	// OnlineRate·(q − Q̂) (default 0.8: a score of 1 on a Q̂ of 0.5 adds
	// 0.4 to the logit).
	OnlineRate float64
	// Logger receives load-time information (default: discard).
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.K == 0 {
		c.K = 30
	}
	if c.Shrink == 0 {
		c.Shrink = 1
	}
	if c.SimPower == 0 {
		c.SimPower = 2
	}
	if c.DefaultPrior == 0 {
		c.DefaultPrior = 0.5
	}
	if c.DefaultLength == 0 {
		c.DefaultLength = 250
	}
	if c.DefaultLengthSigma == 0 {
		c.DefaultLengthSigma = 0.6
	}
	if c.OnlineCapacity == 0 {
		c.OnlineCapacity = 2048
	}
	if c.SameSim == 0 {
		c.SameSim = 0.97
	}
	if c.MaxWeight == 0 {
		c.MaxWeight = 32
	}
	if c.MaxModels == 0 {
		c.MaxModels = 64
	}
	if c.Index == "" {
		c.Index = "auto"
	}
	if c.PrefilterDims == 0 {
		c.PrefilterDims = 96
	}
	if c.PrefilterCandidates == 0 {
		c.PrefilterCandidates = 100
	}
	if c.Estimator == "" {
		c.Estimator = "auto"
	}
	if c.MemoCapacity == 0 {
		c.MemoCapacity = 2048
	}
	if c.OnlineRate == 0 {
		c.OnlineRate = 0.8
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports whether the configuration (after defaults) is usable.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.K < 1 || c.K > 1000:
		return fmt.Errorf("estimate: k must be in [1, 1000], got %d", c.K)
	case c.SimPower < 0 || c.SimPower > 64:
		return fmt.Errorf("estimate: sim_power must be in [0, 64], got %g", c.SimPower)
	case c.Shrink > 1000:
		return fmt.Errorf("estimate: shrink must be ≤ 1000, got %g", c.Shrink)
	case c.DefaultPrior < 0 || c.DefaultPrior > 1:
		return fmt.Errorf("estimate: default prior must be in [0, 1], got %g", c.DefaultPrior)
	case c.DefaultLength <= 0 || c.DefaultLengthSigma <= 0:
		return errors.New("estimate: default length and its sigma must be > 0")
	case c.OnlineCapacity < 0:
		return fmt.Errorf("estimate: online capacity must be ≥ 0, got %d", c.OnlineCapacity)
	case c.SameSim <= 0 || c.SameSim > 1:
		return fmt.Errorf("estimate: same_sim must be in (0, 1], got %g", c.SameSim)
	case c.MaxWeight < 1:
		return fmt.Errorf("estimate: max weight must be ≥ 1, got %g", c.MaxWeight)
	case c.MaxModels < 1:
		return fmt.Errorf("estimate: max models must be ≥ 1, got %d", c.MaxModels)
	}
	switch c.Index {
	case "auto", "exact", "twostage", "hnsw":
	default:
		return fmt.Errorf("estimate: index must be auto, exact, twostage or hnsw, got %q", c.Index)
	}
	switch c.Estimator {
	case "auto", "knn", "head", "blend":
	default:
		return fmt.Errorf("estimate: estimator must be auto, knn, head or blend, got %q", c.Estimator)
	}
	if c.MemoCapacity < 0 || c.MemoCapacity > 1<<20 {
		return fmt.Errorf("estimate: memo capacity must be in [0, 2^20], got %d", c.MemoCapacity)
	}
	if c.OnlineRate < 0 || c.OnlineRate > 4 {
		return fmt.Errorf("estimate: online rate must be in [0, 4], got %g", c.OnlineRate)
	}
	return nil
}

// ErrTooManyModels is returned (and observations are dropped) when a new
// model name would exceed Config.MaxModels.
var ErrTooManyModels = errors.New("estimate: too many distinct models")

// KNN is the quality and length estimator. Rows 0..base-1 are the indexed
// prompts; rows base..base+OnlineCapacity-1 are a ring of prompts learned
// online. All methods are safe for concurrent use.
type KNN struct {
	cfg   Config
	emb   Embedder
	dim   int
	index Index // over the base rows; immutable
	flat  *Flat // the base vectors, for Save
	base  int
	meta  []rowMeta // base rows' id and task, for Save

	defaultHist routing.LengthHist

	// head is the learned quality model (nil: KNN only); mode is the
	// resolved Config.Estimator.
	head *Head
	mode string
	// Two-way length model of the head mode: log L[t][m] ≈ lenA[t] +
	// lenB[m], fitted to the per-(task, model) cells, so a cell with few
	// or no observations borrows from its task and its model; lenSeen[t]
	// says task t has a cell with data; lenRatio is mean/exp(mean log)
	// pooled over the cells (the log-normal's mean factor).
	lenA     []float64
	lenSeen  []bool
	lenRatio float64

	memo memoRing

	mu      sync.RWMutex
	cols    map[string]int
	models  []*column
	online  []float32 // OnlineCapacity·dim
	onFill  int       // rows of online in use
	onNext  int       // next ring slot to overwrite
	scratch sync.Pool // *knnScratch
}

type rowMeta struct {
	ID   string
	Task string
}

// column holds one model's labels for every row (NaN = none) and the
// model-wide length prior learned from every length seen.
type column struct {
	name string
	q    []float32 // quality mean
	qn   []float32 // its weight
	l    []float32 // output length mean
	ln   []float32 // its weight
	// qMean is the mean quality label over the base rows (NaN if none).
	qMean float64
	// Model-wide length prior.
	lenN    float64
	lenMean float64
	lenHist routing.LengthHist
	// taskLen is the length learned per head task (head mode).
	taskLen []lenStat
	// head is the model's row in the head (-1: none).
	head int
	// lenB is the model's effect in the two-way length model (head mode).
	lenB float64
}

// lenStat is a running mean (of tokens and of their log) and histogram
// of output lengths.
type lenStat struct {
	n       float64
	mean    float64
	logMean float64
	hist    routing.LengthHist
	// fitW and expLog are what fitLengths reads of the cell, kept here so
	// that a refit (on every observation) computes neither: min(n, 32)
	// and exp(logMean).
	fitW, expLog float64
}

// lenFitCap caps a cell's weight in the two-way length model.
const lenFitCap = 32

// observe folds l in; the mean follows the last ~maxN observations.
func (s *lenStat) observe(l, maxN float64) {
	s.n++
	s.mean += (l - s.mean) / math.Min(s.n, maxN)
	s.logMean += (math.Log(max(l, 1)) - s.logMean) / math.Min(s.n, maxN)
	s.fitW, s.expLog = math.Min(s.n, lenFitCap), math.Exp(s.logMean)
	if s.n > maxN {
		for b := range s.hist {
			s.hist[b] *= float32(1 - 1/maxN)
		}
	}
	s.hist.Add(l, 1)
}

// taskLenWindow is the number of recent observations a per-task length
// follows.
const taskLenWindow = 256

type knnScratch struct {
	vecs  []float32
	nb    []Neighbor
	cols  []int
	raw   [][NumPromptFeatures]float32
	xt, x []float32
	p     []float32
	heads []int
	memos []uint64
	base  []Neighbor // best stored prompt of each query before the online ring
	tasks []int32    // the head's predicted task of each prompt (-1: no head)
}

// newKNN wires a KNN around an embedder and an index of base rows.
func newKNN(cfg Config, emb Embedder, idx Index, meta []rowMeta) (*KNN, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if idx.Len() != len(meta) {
		return nil, fmt.Errorf("estimate: index has %d rows, labels %d", idx.Len(), len(meta))
	}
	k := &KNN{cfg: cfg, emb: emb, dim: emb.Dim(), index: idx, base: len(meta), meta: meta,
		cols: map[string]int{}, online: make([]float32, cfg.OnlineCapacity*emb.Dim())}
	k.defaultHist = logNormalHist(cfg.DefaultLength, cfg.DefaultLengthSigma)
	k.scratch.New = func() any { return &knnScratch{} }
	k.memo.init(cfg.MemoCapacity, k.dim)
	k.mode = "knn"
	return k, nil
}

// logNormalHist spreads unit mass over the length buckets like a
// log-normal with the given median and sigma.
func logNormalHist(median, sigma float64) routing.LengthHist {
	var h routing.LengthHist
	cdf := func(x float64) float64 {
		if x <= 0 {
			return 0
		}
		return 0.5 * math.Erfc(-(math.Log(x)-math.Log(median))/(sigma*math.Sqrt2))
	}
	prev := 0.0
	for b := 0; b < routing.LengthBuckets; b++ {
		c := 1.0
		if b < routing.LengthBuckets-1 {
			c = cdf(routing.LengthBucketUpper(b))
		}
		h[b] = float32(c - prev)
		prev = c
	}
	h.Normalize()
	return h
}

// Dim returns the embedding dimension.
func (k *KNN) Dim() int { return k.dim }

// Vectors returns the base rows' vectors, row-major (not a copy).
func (k *KNN) Vectors() []float32 {
	if k.flat == nil {
		return nil
	}
	return k.flat.Vectors()
}

// Len returns the number of base (indexed) prompts.
func (k *KNN) Len() int { return k.base }

// Models returns the model names that have a column, in column order.
func (k *KNN) Models() []string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make([]string, len(k.models))
	for i, c := range k.models {
		out[i] = c.name
	}
	return out
}

// column returns the column of model, creating it when create is set;
// k.mu must be held (for writing when create is set).
func (k *KNN) column(model string, create bool) (int, error) {
	if c, ok := k.cols[model]; ok {
		return c, nil
	}
	if !create {
		return -1, nil
	}
	if len(k.models) >= k.cfg.MaxModels {
		return -1, fmt.Errorf("%w: limit %d, adding %q", ErrTooManyModels, k.cfg.MaxModels, model)
	}
	n := k.base + k.cfg.OnlineCapacity
	c := &column{name: model, q: nanSlice(n), qn: make([]float32, n), l: nanSlice(n), ln: make([]float32, n), qMean: math.NaN(), head: -1}
	if k.head != nil {
		c.taskLen = make([]lenStat, len(k.head.tasks))
		for i, m := range k.head.models {
			if m == model {
				c.head = i
			}
		}
	}
	k.models = append(k.models, c)
	k.cols[model] = len(k.models) - 1
	return len(k.models) - 1, nil
}

func nanSlice(n int) []float32 {
	s := make([]float32, n)
	nan := float32(math.NaN())
	for i := range s {
		s[i] = nan
	}
	return s
}

// Estimate predicts quality and length for every prompt and model: one
// embedder call for the whole batch, then the head's forward pass and/or
// one index search (Config.Estimator). out[j] receives prompts[j]'s
// estimate (len(out) must be len(prompts)), with out[j].Memo the handle an
// observation of the decided request passes back (ObserveLengthMemo);
// models without labels get priors[m] (or Config.DefaultPrior when priors
// is shorter) and SourcePrior.
func (k *KNN) Estimate(ctx context.Context, prompts []string, models []string, priors []float64, out []routing.PromptEstimate) error {
	if len(out) != len(prompts) {
		return fmt.Errorf("estimate: %d outputs for %d prompts", len(out), len(prompts))
	}
	if len(prompts) == 0 {
		return nil
	}
	s := k.scratch.Get().(*knnScratch)
	defer k.scratch.Put(s)
	useKNN := k.mode != "head"
	useHead := k.head != nil && k.mode != "knn"
	kk := k.cfg.K
	n := len(prompts)
	s.vecs = growF32(s.vecs, n*k.dim)
	if err := k.emb.Embed(ctx, prompts, s.vecs); err != nil {
		return fmt.Errorf("estimate: embed: %w", err)
	}
	s.base = growNb(s.base, n)
	if useKNN {
		s.nb = growNb(s.nb, n*kk)
		if k.base > 0 {
			if err := k.index.Search(ctx, s.vecs, kk, s.nb); err != nil {
				return fmt.Errorf("estimate: search: %w", err)
			}
		} else {
			resetTop(s.nb)
		}
		for j := 0; j < n; j++ {
			s.base[j] = s.nb[j*kk]
		}
	} else {
		resetTop(s.base)
	}
	if cap(s.raw) < n {
		s.raw = make([][NumPromptFeatures]float32, n)
	}
	s.raw = s.raw[:n]
	for j, p := range prompts {
		PromptFeatures(p, featureMaxBytes, &s.raw[j])
	}

	k.mu.RLock()
	defer k.mu.RUnlock()
	if useKNN && k.onFill > 0 {
		for j := range prompts {
			scanTopK(s.vecs[j*k.dim:(j+1)*k.dim], k.online[:k.onFill*k.dim], k.dim, int32(k.base), s.nb[j*kk:(j+1)*kk])
		}
	}
	s.cols = s.cols[:0]
	for _, m := range models {
		c, _ := k.column(m, false)
		s.cols = append(s.cols, c)
	}
	if useKNN {
		for j := range prompts {
			k.fill(s.nb[j*kk:(j+1)*kk], s.cols, priors, &out[j])
		}
	}
	if cap(s.tasks) < n {
		s.tasks = make([]int32, n)
	}
	s.tasks = s.tasks[:n]
	for j := range s.tasks {
		s.tasks[j] = -1
	}
	if useHead {
		s.growHead(k.head)
		for j := range prompts {
			s.tasks[j] = int32(k.fillHead(s.vecs[j*k.dim:(j+1)*k.dim], &s.raw[j], s, priors, &out[j], useKNN))
		}
	}
	for j := range prompts {
		out[j].Memo = k.memo.put(s.vecs[j*k.dim:(j+1)*k.dim], &s.raw[j], s.base[j], memoTask{head: k.head, task: s.tasks[j]})
	}
	return nil
}

// featureMaxBytes bounds the prompt bytes PromptFeatures reads.
const featureMaxBytes = 8192

// growHead sizes the head's scratch vectors.
func (s *knnScratch) growHead(h *Head) {
	s.xt = growF32(s.xt, h.taskWidth())
	s.p = growF32(s.p, len(h.tasks))
	s.x = growF32(s.x, h.width())
}

// argmax32 returns the index of the largest element (-1 when empty).
func argmax32(p []float32) int {
	best := -1
	for i, v := range p {
		if best < 0 || v > p[best] {
			best = i
		}
	}
	return best
}

// fillHead writes the head's quality (and, unless blend, the per-task
// length) of one prompt into e and returns the prompt's predicted task;
// with blend the KNN estimate already in e is averaged with the head's.
// k.mu is held.
func (k *KNN) fillHead(emb []float32, raw *[NumPromptFeatures]float32, s *knnScratch, priors []float64, e *routing.PromptEstimate, blend bool) int {
	h := k.head
	h.forward(emb, raw, s.xt, s.p, s.x)
	task := argmax32(s.p)
	if !blend {
		e.Reset(len(s.cols))
	}
	for m, c := range s.cols {
		hm := -1
		if c >= 0 {
			hm = k.models[c].head
		}
		switch {
		case hm >= 0:
			q := h.quality(hm, s.x)
			if blend && e.Source[m] == routing.SourceIndex {
				q = (q + e.Quality[m]) / 2
			}
			e.Quality[m], e.Source[m] = q, routing.SourceIndex
		case !blend:
			prior := k.cfg.DefaultPrior
			if m < len(priors) {
				prior = priors[m]
			}
			e.Quality[m], e.Source[m] = prior, routing.SourcePrior
		}
		if blend {
			continue // lengths from the neighbours
		}
		if c < 0 {
			e.Length[m], e.Hist[m] = k.cfg.DefaultLength, k.defaultHist
			continue
		}
		col := k.models[c]
		fb, hasFB := k.lenFallback(task, col)
		switch {
		case task >= 0 && task < len(col.taskLen) && col.taskLen[task].n > 0:
			cell := &col.taskLen[task]
			e.Length[m], e.Hist[m] = cell.mean, cell.hist
			if hasFB {
				e.Length[m] = (cell.n*cell.mean + lenPseudo*fb) / (cell.n + lenPseudo)
			}
			e.Hist[m].Normalize()
		case hasFB:
			e.Length[m], e.Hist[m] = fb, col.lenHist
			e.Hist[m].Normalize()
		case col.lenN > 0:
			e.Length[m], e.Hist[m] = col.lenMean, col.lenHist
			e.Hist[m].Normalize()
		default:
			e.Length[m], e.Hist[m] = k.cfg.DefaultLength, k.defaultHist
		}
	}
	return task
}

// lenPseudo is the weight, in observations, of the two-way length model's
// prediction in a (task, model) cell's length: a cell's own mean takes
// over as it fills.
const lenPseudo = 4

// lenFallback is the two-way model's mean length of model col on task t,
// and whether it has one (the task and the model both seen in some cell).
// k.mu is held.
func (k *KNN) lenFallback(t int, col *column) (float64, bool) {
	if t < 0 || t >= len(k.lenSeen) || !k.lenSeen[t] {
		return 0, false
	}
	seen := false
	for i := range col.taskLen {
		if col.taskLen[i].n > 0 {
			seen = true
			break
		}
	}
	if !seen {
		return 0, false
	}
	return math.Exp(k.lenA[t]+col.lenB) * k.lenRatio, true
}

// fitLengths refits the two-way length model to the cells by a few sweeps
// of alternating weighted least squares (weights = cell counts capped at
// lenFitCap); k.mu is held for writing. T × models cells: microseconds.
func (k *KNN) fitLengths() {
	T := len(k.lenA)
	if T == 0 {
		return
	}
	for t := range k.lenSeen {
		k.lenSeen[t] = false
	}
	var rs, rw float64
	for _, c := range k.models {
		for t := range c.taskLen {
			if cell := &c.taskLen[t]; cell.n > 0 && t < T {
				k.lenSeen[t] = true
				w := cell.fitW
				rs += w * cell.mean / cell.expLog
				rw += w
			}
		}
	}
	k.lenRatio = 1
	if rw > 0 {
		k.lenRatio = rs / rw
	}
	for sweep := 0; sweep < 6; sweep++ {
		for t := 0; t < T; t++ {
			var s, w float64
			for _, c := range k.models {
				if t < len(c.taskLen) && c.taskLen[t].n > 0 {
					cell := &c.taskLen[t]
					s += cell.fitW * (cell.logMean - c.lenB)
					w += cell.fitW
				}
			}
			if w > 0 {
				k.lenA[t] = s / w
			}
		}
		for _, c := range k.models {
			var s, w float64
			for t := range c.taskLen {
				if cell := &c.taskLen[t]; t < T && cell.n > 0 {
					s += cell.fitW * (cell.logMean - k.lenA[t])
					w += cell.fitW
				}
			}
			if w > 0 {
				c.lenB = s / w
			}
		}
	}
}

// attachHead makes h the quality head and resolves Config.Estimator; k.mu
// must not be held.
func (k *KNN) attachHead(h *Head) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if h != nil && h.dim != k.dim {
		return fmt.Errorf("estimate: head is for %d dims, embedder makes %d", h.dim, k.dim)
	}
	k.head = h
	switch {
	case k.cfg.Estimator == "auto" && h != nil:
		k.mode = "head"
	case k.cfg.Estimator == "auto", k.cfg.Estimator == "knn":
		k.mode = "knn"
	case h == nil:
		return fmt.Errorf("estimate: estimator %q needs an index built with a head", k.cfg.Estimator)
	default:
		k.mode = k.cfg.Estimator
	}
	if h == nil {
		return nil
	}
	for _, m := range h.models {
		if _, err := k.column(m, true); err != nil {
			return err
		}
	}
	k.lenA, k.lenSeen, k.lenRatio = make([]float64, len(h.tasks)), make([]bool, len(h.tasks)), 1
	for _, c := range k.models {
		c.taskLen = make([]lenStat, len(h.tasks))
		c.head = -1
		for i, m := range h.models {
			if m == c.name {
				c.head = i
			}
		}
	}
	return nil
}

// Mode returns the estimator in use: "knn", "head" or "blend".
func (k *KNN) Mode() string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.mode
}

// Head returns the learned quality head (nil without one).
func (k *KNN) Head() *Head {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.head
}

// fill computes one prompt's estimate from its neighbours; k.mu is held.
func (k *KNN) fill(nb []Neighbor, cols []int, priors []float64, e *routing.PromptEstimate) {
	e.Reset(len(cols))
	var wts [64]float32
	w := wts[:0]
	if len(nb) > len(wts) {
		w = make([]float32, 0, len(nb))
	}
	for _, n := range nb {
		if n.Row < 0 {
			w = append(w, 0)
			continue
		}
		s := float64(n.Sim)
		if s < 0 {
			s = 0
		}
		v := math.Pow(s, k.cfg.SimPower)
		if k.cfg.SimPower == 1 {
			v = s
		}
		w = append(w, float32(v)+1e-6)
	}
	for m, c := range cols {
		prior := k.cfg.DefaultPrior
		if m < len(priors) {
			prior = priors[m]
		}
		e.Quality[m], e.Source[m] = prior, routing.SourcePrior
		if c < 0 {
			e.Length[m], e.Hist[m] = k.cfg.DefaultLength, k.defaultHist
			continue
		}
		col := k.models[c]
		var qs, qw, ls, lw float64
		for i, n := range nb {
			if n.Row < 0 {
				continue
			}
			wi := float64(w[i])
			if q := col.q[n.Row]; q == q {
				qs += wi * float64(q)
				qw += wi
			}
			if l := col.l[n.Row]; l == l {
				ls += wi * float64(l)
				lw += wi
				e.Hist[m].Add(float64(l), wi)
			}
		}
		if qw > 0 {
			if k.cfg.Shrink > 0 && col.qMean == col.qMean {
				qs += k.cfg.Shrink * col.qMean
				qw += k.cfg.Shrink
			}
			e.Quality[m], e.Source[m] = qs/qw, routing.SourceIndex
		}
		switch {
		case lw > 0:
			e.Length[m] = ls / lw
			e.Hist[m].Normalize()
		case col.lenN > 0:
			e.Length[m], e.Hist[m] = col.lenMean, col.lenHist
			e.Hist[m].Normalize()
		default:
			e.Length[m], e.Hist[m] = k.cfg.DefaultLength, k.defaultHist
		}
	}
}

// ObserveLength records that model answered prompt with tokens output
// tokens: it updates the most similar stored prompt when it is at least
// Config.SameSim alike, else adds the prompt to the online ring (knn and
// blend), the predicted task's length (head), and the model's length prior.
// Non-positive lengths are ignored.
func (k *KNN) ObserveLength(prompt, model string, tokens int) {
	k.ObserveLengthMemo(0, prompt, model, tokens)
}

// ObserveLengthMemo is ObserveLength for a request whose decision's
// estimate had handle memo (routing.PromptEstimate.Memo): the embedding,
// features and nearest stored prompt computed for the decision are reused,
// so nothing is embedded or searched again. An unknown or expired memo
// (older than Config.MemoCapacity estimates) falls back to the prompt.
func (k *KNN) ObserveLengthMemo(memo uint64, prompt, model string, tokens int) {
	if tokens <= 0 {
		return
	}
	_ = k.observe(memo, prompt, model, math.NaN(), float64(tokens))
}

// ObserveQuality records a feedback score q in [0, 1] for model's answer
// to prompt, like ObserveLength: a running mean on the stored prompt (knn,
// blend) and one SGD step of the model's logistic head (head, blend).
// Scores outside [0, 1] are ignored.
func (k *KNN) ObserveQuality(prompt, model string, q float64) {
	k.ObserveQualityMemo(0, prompt, model, q)
}

// ObserveQualityMemo is ObserveQuality with a decision's memo (see
// ObserveLengthMemo).
func (k *KNN) ObserveQualityMemo(memo uint64, prompt, model string, q float64) {
	if !(q >= 0 && q <= 1) {
		return
	}
	_ = k.observe(memo, prompt, model, q, math.NaN())
}

// MemoHits reports how many observations reused a decision's memo and how
// many had to embed their prompt again.
func (k *KNN) MemoHits() (hits, misses uint64) {
	k.memo.mu.Lock()
	defer k.memo.mu.Unlock()
	return k.memo.hits, k.memo.misses
}

func (k *KNN) observe(memo uint64, prompt, model string, q, l float64) error {
	if q != q && k.mode == "head" {
		if done, err := k.observeLengthByTask(memo, model, l); done {
			return err
		}
	}
	s := k.scratch.Get().(*knnScratch)
	defer k.scratch.Put(s)
	s.vecs = growF32(s.vecs, k.dim)
	s.nb = growNb(s.nb, 1)
	if cap(s.raw) < 1 {
		s.raw = make([][NumPromptFeatures]float32, 1)
	}
	s.raw = s.raw[:1]
	useKNN := k.mode != "head"
	if !k.memo.get(memo, s.vecs, &s.raw[0], &s.nb[0]) {
		ctx := context.Background()
		if err := k.emb.Embed(ctx, []string{prompt}, s.vecs); err != nil {
			k.cfg.Logger.Warn("estimate: observation dropped", slog.String("error", err.Error()))
			return err
		}
		PromptFeatures(prompt, featureMaxBytes, &s.raw[0])
		if useKNN && k.base > 0 {
			if err := k.index.Search(ctx, s.vecs, 1, s.nb); err != nil {
				k.cfg.Logger.Warn("estimate: observation dropped", slog.String("error", err.Error()))
				return err
			}
		} else {
			resetTop(s.nb)
		}
	}

	k.mu.Lock()
	defer k.mu.Unlock()
	col, err := k.observedColumn(model)
	if err != nil {
		return err
	}
	if useKNN {
		if k.onFill > 0 {
			scanTopK(s.vecs, k.online[:k.onFill*k.dim], k.dim, int32(k.base), s.nb)
		}
		row := s.nb[0].Row
		if row < 0 || float64(s.nb[0].Sim) < k.cfg.SameSim {
			if k.cfg.OnlineCapacity == 0 {
				row = -1
			} else {
				row = k.addOnline(s.vecs)
			}
		}
		if row >= 0 {
			if q == q {
				runMean(&col.q[row], &col.qn[row], q, k.cfg.MaxWeight)
			}
			if l == l {
				runMean(&col.l[row], &col.ln[row], l, k.cfg.MaxWeight)
			}
		}
	}
	if l == l {
		col.observePrior(l)
	}
	if h := k.head; h != nil && k.mode != "knn" {
		s.growHead(h)
		h.forward(s.vecs, &s.raw[0], s.xt, s.p, s.x)
		if l == l {
			k.observeTaskLength(col, argmax32(s.p), l)
		}
		if q == q {
			if col.head < 0 {
				col.head = h.addModel(model, k.cfg.DefaultPrior)
			}
			h.step(col.head, s.x, q, k.cfg.OnlineRate)
		}
	}
	return nil
}

// observeLengthByTask is observe of a length alone in head mode when the
// decision's memo still holds the task its head predicted: the task is
// all the length cells need, so the prompt is neither copied out of the
// memo nor run through the head again (the same updates as observe's full
// path). done is false when the memo expired or the head was replaced
// since the estimate; observe then takes the full path.
func (k *KNN) observeLengthByTask(memo uint64, model string, l float64) (done bool, _ error) {
	mt, ok := k.memo.taskOf(memo)
	if !ok || mt.head == nil {
		return false, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if mt.head != k.head || k.mode != "head" {
		return false, nil
	}
	k.memo.hit()
	col, err := k.observedColumn(model)
	if err != nil {
		return true, err
	}
	if l == l {
		col.observePrior(l)
		k.observeTaskLength(col, int(mt.task), l)
	}
	return true, nil
}

// observedColumn is the column an observation of model updates, created
// when new; k.mu is held for writing. An error is logged (the observation
// is dropped).
func (k *KNN) observedColumn(model string) (*column, error) {
	c, err := k.column(model, true)
	if err != nil {
		k.cfg.Logger.Warn("estimate: observation dropped", slog.String("error", err.Error()))
		return nil, err
	}
	return k.models[c], nil
}

// observeTaskLength folds length l into the model's cell of the head's
// task and refits the two-way length model; k.mu is held for writing.
func (k *KNN) observeTaskLength(col *column, task int, l float64) {
	if task >= 0 && task < len(col.taskLen) {
		col.taskLen[task].observe(l, taskLenWindow)
		k.fitLengths()
	}
}

// memoRing keeps the embedding, features and best stored prompt of the
// last estimates, addressed by a handle that is never reused.
type memoRing struct {
	mu           sync.Mutex
	dim          int
	gen          []uint64
	vecs         []float32
	raw          [][NumPromptFeatures]float32
	base         []Neighbor
	task         []memoTask
	last         uint64
	hits, misses uint64
}

// memoTask is the task the head predicted for a memo's prompt, and which
// head predicted it (the task classifier never learns online, so the same
// head gives the same task for the same inputs).
type memoTask struct {
	head *Head
	task int32
}

func (r *memoRing) init(n, dim int) {
	r.dim = dim
	r.gen = make([]uint64, n)
	r.vecs = make([]float32, n*dim)
	r.raw = make([][NumPromptFeatures]float32, n)
	r.base = make([]Neighbor, n)
	r.task = make([]memoTask, n)
}

// put stores one estimate's inputs and returns its handle (0 when the ring
// is off).
func (r *memoRing) put(v []float32, raw *[NumPromptFeatures]float32, base Neighbor, task memoTask) uint64 {
	if len(r.gen) == 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last++
	slot := int((r.last - 1) % uint64(len(r.gen)))
	r.gen[slot] = r.last
	copy(r.vecs[slot*r.dim:(slot+1)*r.dim], v)
	r.raw[slot] = *raw
	r.base[slot] = base
	r.task[slot] = task
	return r.last
}

// hit counts a memo used through taskOf.
func (r *memoRing) hit() {
	r.mu.Lock()
	r.hits++
	r.mu.Unlock()
}

// taskOf returns the task stored behind handle h, without copying the
// inputs, and reports whether it was still there.
func (r *memoRing) taskOf(h uint64) (memoTask, bool) {
	if h == 0 || len(r.gen) == 0 {
		return memoTask{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	slot := int((h - 1) % uint64(len(r.gen)))
	if r.gen[slot] != h {
		return memoTask{}, false
	}
	return r.task[slot], true
}

// get copies the inputs behind handle h and reports whether they were
// still there.
func (r *memoRing) get(h uint64, v []float32, raw *[NumPromptFeatures]float32, base *Neighbor) bool {
	if h == 0 || len(r.gen) == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	slot := int((h - 1) % uint64(len(r.gen)))
	if r.gen[slot] != h {
		r.misses++
		return false
	}
	r.hits++
	copy(v, r.vecs[slot*r.dim:(slot+1)*r.dim])
	*raw = r.raw[slot]
	*base = r.base[slot]
	return true
}

// addOnline stores v in the next ring slot, clearing the labels of the
// prompt it replaces; k.mu is held for writing.
func (k *KNN) addOnline(v []float32) int32 {
	slot := k.onNext
	k.onNext = (k.onNext + 1) % k.cfg.OnlineCapacity
	if k.onFill < k.cfg.OnlineCapacity {
		k.onFill++
	}
	copy(k.online[slot*k.dim:(slot+1)*k.dim], v)
	row := k.base + slot
	nan := float32(math.NaN())
	for _, col := range k.models {
		col.q[row], col.qn[row], col.l[row], col.ln[row] = nan, 0, nan, 0
	}
	return int32(row)
}

// runMean folds x into the mean *m of weight *n, the weight capped at max.
func runMean(m, n *float32, x, max float64) {
	if *n <= 0 || *m != *m {
		*m, *n = float32(x), 1
		return
	}
	w := float64(*n)
	*m = float32((float64(*m)*w + x) / (w + 1))
	if w+1 <= max {
		*n = float32(w + 1)
	}
}

// observePrior folds one length into the model-wide prior.
func (c *column) observePrior(l float64) {
	const maxN = 10000
	c.lenN++
	n := math.Min(c.lenN, maxN)
	c.lenMean += (l - c.lenMean) / n
	if c.lenN > maxN {
		// Decay the histogram so it follows drift like the mean.
		for b := range c.lenHist {
			c.lenHist[b] *= 1 - 1.0/maxN
		}
	}
	c.lenHist.Add(l, 1)
}

func growF32(s []float32, n int) []float32 {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]float32, n)
}

func growNb(s []Neighbor, n int) []Neighbor {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]Neighbor, n)
}
