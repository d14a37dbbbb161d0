package estimate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/viterin/vek/vek32"
)

// HeadConfig tunes the learned quality head that `index build` trains.
// The zero value of a field means its default.
type HeadConfig struct {
	// L2 is the weight decay of the quality models (default 3e-4, chosen
	// on validation — see README).
	L2 float64 `json:"l2"`
	// Epochs is the number of passes of Adam over the records (default 30).
	Epochs int `json:"epochs"`
	// LearnRate is Adam's step size (default 0.01).
	LearnRate float64 `json:"learn_rate"`
	// Batch is the minibatch size (default 32).
	Batch int `json:"batch"`
	// TaskL2 is the weight decay of the task classifier (default 1e-2,
	// chosen on validation: less confident task probabilities).
	TaskL2 float64 `json:"task_l2"`
	// Folds is the number of cross-fitting folds: the quality models train
	// on task probabilities predicted by a classifier that did not see the
	// record, so they learn how far to trust the predicted task (default
	// 5; 1 trains on the true task).
	Folds int `json:"folds"`
	// Embedding also feeds the embedding to the quality models (the task
	// classifier always sees it). Off by default: on validation it
	// overfitted (AUC 0.715 vs 0.766, see README).
	Embedding bool `json:"embedding,omitempty"`
	// Interactions adds a task × prompt-feature block (a per-task slope on
	// every feature). Off by default: on validation it did not help (mean
	// AUC 0.762 vs 0.764, argmax 0.647 vs 0.650, see README).
	Interactions bool `json:"interactions,omitempty"`
	// Rank constrains the within-task weights of the quality models (the
	// prompt-feature block, and the embedding block with Embedding) to
	// this rank across models: W[m] = Σ_r S[m][r]·D[r] over that block,
	// a few "difficulty" directions D shared by every model, each model
	// with its own sensitivity S[m]. The per-task intercepts stay free per
	// model. Independent slopes per model (Rank < 0) let noise reorder
	// models of close means within a task; rank 1 raised the argmax
	// quality on validation (default 1, see README).
	Rank int `json:"rank,omitempty"`
	// Seed seeds the minibatch order (default 1).
	Seed uint64 `json:"seed"`
}

func (c HeadConfig) withDefaults() HeadConfig {
	if c.L2 == 0 {
		c.L2 = 3e-4
	}
	if c.Epochs == 0 {
		c.Epochs = 30
	}
	if c.LearnRate == 0 {
		c.LearnRate = 0.01
	}
	if c.Batch == 0 {
		c.Batch = 32
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.TaskL2 == 0 {
		c.TaskL2 = 1e-2
	}
	if c.Rank == 0 {
		c.Rank = 1
	}
	if c.Folds == 0 {
		c.Folds = 5
	}
	return c
}

// Validate reports whether the configuration (after defaults) is usable.
func (c HeadConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.L2 < 0 || c.L2 > 10:
		return fmt.Errorf("estimate: head l2 must be in [0, 10], got %g", c.L2)
	case c.Epochs < 1 || c.Epochs > 1000:
		return fmt.Errorf("estimate: head epochs must be in [1, 1000], got %d", c.Epochs)
	case c.LearnRate <= 0 || c.LearnRate > 1:
		return fmt.Errorf("estimate: head learn rate must be in (0, 1], got %g", c.LearnRate)
	case c.Batch < 1:
		return fmt.Errorf("estimate: head batch must be ≥ 1, got %d", c.Batch)
	case c.TaskL2 < 0 || c.TaskL2 > 10:
		return fmt.Errorf("estimate: head task l2 must be in [0, 10], got %g", c.TaskL2)
	case c.Folds < 1 || c.Folds > 20:
		return fmt.Errorf("estimate: head folds must be in [1, 20], got %d", c.Folds)
	case c.Rank > 16:
		return fmt.Errorf("estimate: head rank must be ≤ 16 (negative: full), got %d", c.Rank)
	}
	return nil
}

// Head is the learned quality estimator: a softmax task classifier over
// the embedding and cheap prompt features, and one logistic regression per
// model over [embedding, features, task probabilities, task × features].
// The task block gives every model a per-task intercept (the "which task"
// signal, a learned task table) and the interaction block a per-task
// slope on each difficulty feature; the embedding carries the rest.
// Forward costs (T + M)·(D + …) multiply-adds and allocates nothing.
type Head struct {
	cfg    HeadConfig
	dim    int // embedding dimensions
	tasks  []string
	models []string
	// Feature standardisation.
	fMean, fStd [NumPromptFeatures]float32
	// taskW is T × (dim + F + 1); qW is M × width().
	taskW []float32
	qW    [][]float32
}

// width is the length of a quality input vector.
func (h *Head) width() int {
	w := h.dim + NumPromptFeatures + len(h.tasks) + 1
	if h.cfg.Interactions {
		w += len(h.tasks) * NumPromptFeatures
	}
	return w
}

func (h *Head) taskWidth() int { return h.dim + NumPromptFeatures + 1 }

// embScale scales the unit-length embedding so its coordinates have about
// unit variance, like the standardised features.
func (h *Head) embScale() float32 { return float32(math.Sqrt(float64(h.dim))) }

// Tasks returns the task names the head classifies into.
func (h *Head) Tasks() []string { return h.tasks }

// Models returns the models the head predicts, in its order.
func (h *Head) Models() []string { return h.models }

// input fills x (len ≥ width) from an embedding, raw features and the
// task probabilities p (len T).
func (h *Head) input(emb []float32, raw *[NumPromptFeatures]float32, p []float32, x []float32) {
	s := h.embScale()
	if !h.cfg.Embedding {
		s = 0
	}
	for i, v := range emb[:h.dim] {
		x[i] = v * s
	}
	o := h.dim
	var f [NumPromptFeatures]float32
	for i := range f {
		f[i] = (raw[i] - h.fMean[i]) / h.fStd[i]
		x[o+i] = f[i]
	}
	o += NumPromptFeatures
	copy(x[o:], p)
	o += len(p)
	if h.cfg.Interactions {
		for t, pt := range p {
			for i := range f {
				x[o+t*NumPromptFeatures+i] = pt * f[i]
			}
		}
		o += len(p) * NumPromptFeatures
	}
	x[o] = 1
}

// taskProbs writes the softmax task probabilities of a prompt into p.
func (h *Head) taskProbs(emb []float32, raw *[NumPromptFeatures]float32, xt, p []float32) {
	s := h.embScale()
	for i, v := range emb[:h.dim] {
		xt[i] = v * s
	}
	for i := range raw {
		xt[h.dim+i] = (raw[i] - h.fMean[i]) / h.fStd[i]
	}
	xt[h.dim+NumPromptFeatures] = 1
	tw := h.taskWidth()
	for t := range h.tasks {
		p[t] = dot32(h.taskW[t*tw:(t+1)*tw], xt)
	}
	softmax32(p)
}

// forward computes the quality input x (len width) and the task
// probabilities p (len T) of one prompt; xt is scratch of len taskWidth.
func (h *Head) forward(emb []float32, raw *[NumPromptFeatures]float32, xt, p, x []float32) {
	h.taskProbs(emb, raw, xt, p)
	h.input(emb, raw, p, x)
}

// quality returns model m's predicted quality for input x.
func (h *Head) quality(m int, x []float32) float64 { return sigmoid(float64(h.logit(m, x))) }

// logit is model m's logit at x; without Config.Embedding the embedding
// block of x is zero and skipped.
func (h *Head) logit(m int, x []float32) float32 {
	if h.cfg.Embedding {
		return dot32(h.qW[m], x)
	}
	return dot32(h.qW[m][h.dim:], x[h.dim:])
}

// step moves model m's weights one normalised SGD step towards label y
// at input x (online learning): Δw = rate·(y − q̂)·x/|x|², so this prompt's
// logit moves by exactly rate·(y − q̂) and prompts with similar inputs
// (same predicted task, similar features) follow in proportion.
func (h *Head) step(m int, x []float32, y, rate float64) {
	n := dot32(x, x)
	if !(n > 0) {
		return
	}
	g := float32(rate*(y-sigmoid(float64(h.logit(m, x))))) / n
	w := h.qW[m]
	for i := range w {
		w[i] += g * x[i]
	}
}

// addModel appends a model whose every prediction is prior until it learns.
func (h *Head) addModel(name string, prior float64) int {
	w := make([]float32, h.width())
	prior = min(max(prior, 1e-3), 1-1e-3)
	w[len(w)-1] = float32(math.Log(prior / (1 - prior)))
	h.qW = append(h.qW, w)
	h.models = append(h.models, name)
	return len(h.models) - 1
}

// dot32 is the dot product of a and b over their common length: SIMD
// (vek32, AVX2 where the CPU has it) for equal lengths of 32 or more.
func dot32(a, b []float32) float32 {
	if len(a) == len(b) && len(a) >= 32 {
		return vek32.Dot(a, b)
	}
	var s0, s1, s2, s3 float32
	n := min(len(a), len(b))
	i := 0
	for ; i+4 <= n; i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < n; i++ {
		s0 += a[i] * b[i]
	}
	return s0 + s1 + s2 + s3
}

func softmax32(p []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range p {
		mx = max(mx, v)
	}
	var s float32
	for i, v := range p {
		e := float32(math.Exp(float64(v - mx)))
		p[i] = e
		s += e
	}
	for i := range p {
		p[i] /= s
	}
}

func sigmoid(z float64) float64 {
	if z < -30 {
		z = -30
	} else if z > 30 {
		z = 30
	}
	return 1 / (1 + math.Exp(-z))
}

// headSample is one training record for TrainHead.
type headSample struct {
	emb    []float32
	raw    [NumPromptFeatures]float32
	task   int // -1: none
	labels []float32
	mask   []bool
}

// TrainHead fits a Head on embedded records: vecs holds one unit vector of
// dim per record, in order. Records without a task train the quality
// models with the classifier's task probabilities; a model without labels
// is not in the head.
func TrainHead(recs []Record, vecs []float32, dim int, maxBytes int, cfg HeadConfig) (*Head, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if len(recs) == 0 || len(vecs) != len(recs)*dim {
		return nil, fmt.Errorf("estimate: train head: %d records, %d floats for dim %d", len(recs), len(vecs), dim)
	}
	taskSet, modelSet := map[string]bool{}, map[string]bool{}
	for _, r := range recs {
		if r.Task != "" {
			taskSet[r.Task] = true
		}
		for m := range r.Scores {
			modelSet[m] = true
		}
	}
	if len(modelSet) == 0 {
		return nil, errors.New("estimate: train head: no quality labels")
	}
	h := &Head{cfg: cfg, dim: dim, tasks: sortedKeys(taskSet), models: sortedKeys(modelSet)}
	taskOf := indexOf(h.tasks)
	modelOf := indexOf(h.models)
	samples := make([]headSample, len(recs))
	var sum, sum2 [NumPromptFeatures]float64
	for i, r := range recs {
		s := &samples[i]
		s.emb = vecs[i*dim : (i+1)*dim]
		PromptFeatures(r.Prompt, maxBytes, &s.raw)
		s.task = -1
		if t, ok := taskOf[r.Task]; ok {
			s.task = t
		}
		s.labels = make([]float32, len(h.models))
		s.mask = make([]bool, len(h.models))
		for m, q := range r.Scores {
			s.labels[modelOf[m]], s.mask[modelOf[m]] = float32(q), true
		}
		for j, v := range s.raw {
			sum[j] += float64(v)
			sum2[j] += float64(v) * float64(v)
		}
	}
	n := float64(len(recs))
	for j := range sum {
		mean := sum[j] / n
		sd := math.Sqrt(max(sum2[j]/n-mean*mean, 0))
		h.fMean[j], h.fStd[j] = float32(mean), float32(max(sd, 1e-3))
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))

	// Task classifier (softmax), only when there are tasks.
	T := len(h.tasks)
	tw := h.taskWidth()
	h.taskW = make([]float32, T*tw)
	txs := make([][]float32, len(samples))
	for i := range samples {
		x := make([]float32, tw)
		s := h.embScale()
		for j, v := range samples[i].emb {
			x[j] = v * s
		}
		for j := range samples[i].raw {
			x[dim+j] = (samples[i].raw[j] - h.fMean[j]) / h.fStd[j]
		}
		x[tw-1] = 1
		txs[i] = x
	}
	fitTasks := func(keep func(i int) bool, W []float32) {
		var xs [][]float32
		var ys []int
		for i := range samples {
			if samples[i].task >= 0 && keep(i) {
				xs = append(xs, txs[i])
				ys = append(ys, samples[i].task)
			}
		}
		tc := cfg
		tc.L2 = cfg.TaskL2
		trainSoftmax(xs, ys, T, W, tc, rng)
	}
	if T > 1 {
		fitTasks(func(int) bool { return true }, h.taskW)
	}
	// Task probabilities the quality models train on: out of fold.
	probs := make([][]float32, len(samples))
	for i := range probs {
		probs[i] = make([]float32, T)
	}
	if T > 1 && cfg.Folds > 1 {
		fold := func(i int) int { return int(splitmix64(uint64(i)^cfg.Seed) % uint64(cfg.Folds)) }
		W := make([]float32, T*tw)
		for f := 0; f < cfg.Folds; f++ {
			clear(W)
			fitTasks(func(i int) bool { return fold(i) != f }, W)
			for i := range samples {
				if fold(i) != f {
					continue
				}
				for t := 0; t < T; t++ {
					probs[i][t] = dot32(W[t*tw:(t+1)*tw], txs[i])
				}
				softmax32(probs[i])
			}
		}
	} else {
		for i := range samples {
			switch {
			case T == 1:
				probs[i][0] = 1
			case samples[i].task >= 0:
				probs[i][samples[i].task] = 1
			default:
				h.taskProbs(samples[i].emb, &samples[i].raw, make([]float32, tw), probs[i])
			}
		}
	}

	// Quality models (one logistic per model, trained jointly).
	W := h.width()
	xs := make([][]float32, len(samples))
	for i := range samples {
		s := &samples[i]
		x := make([]float32, W)
		h.input(s.emb, &s.raw, probs[i], x)
		xs[i] = x
	}
	h.qW = make([][]float32, len(h.models))
	flat := make([]float32, len(h.models)*W)
	for m := range h.qW {
		h.qW[m] = flat[m*W : (m+1)*W]
	}
	if cfg.Rank > 0 {
		trainLowRank(xs, samples, h.qW, h.dim+NumPromptFeatures, cfg, rng)
	} else {
		trainLogistic(xs, samples, h.qW, cfg, rng)
	}
	return h, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func indexOf(names []string) map[string]int {
	out := make(map[string]int, len(names))
	for i, n := range names {
		out[n] = i
	}
	return out
}

// adam is the Adam optimiser's state over one flat parameter vector.
type adam struct {
	m, v   []float32
	t      int
	lr     float64
	b1, b2 float64
}

func newAdam(n int, lr float64) *adam {
	return &adam{m: make([]float32, n), v: make([]float32, n), lr: lr, b1: 0.9, b2: 0.999}
}

func (a *adam) update(w, g []float32) {
	a.t++
	c1 := 1 - math.Pow(a.b1, float64(a.t))
	c2 := 1 - math.Pow(a.b2, float64(a.t))
	lr := float32(a.lr * math.Sqrt(c2) / c1)
	b1, b2 := float32(a.b1), float32(a.b2)
	for i, gi := range g {
		a.m[i] = b1*a.m[i] + (1-b1)*gi
		a.v[i] = b2*a.v[i] + (1-b2)*gi*gi
		w[i] -= lr * a.m[i] / (float32(math.Sqrt(float64(a.v[i]))) + 1e-8)
	}
}

// trainSoftmax fits W (T × width, row-major) to classes ys by minibatch
// Adam on cross-entropy plus L2 (bias excluded).
func trainSoftmax(xs [][]float32, ys []int, T int, W []float32, cfg HeadConfig, rng *rand.Rand) {
	if len(xs) == 0 {
		return
	}
	width := len(xs[0])
	opt := newAdam(len(W), cfg.LearnRate)
	g := make([]float32, len(W))
	z := make([]float32, T)
	order := make([]int, len(xs))
	for i := range order {
		order[i] = i
	}
	for ep := 0; ep < cfg.Epochs; ep++ {
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for s := 0; s < len(order); s += cfg.Batch {
			batch := order[s:min(s+cfg.Batch, len(order))]
			clear(g)
			for _, i := range batch {
				x := xs[i]
				for t := 0; t < T; t++ {
					z[t] = dot32(W[t*width:(t+1)*width], x)
				}
				softmax32(z)
				z[ys[i]] -= 1
				for t := 0; t < T; t++ {
					gt := z[t] / float32(len(batch))
					row := g[t*width : (t+1)*width]
					for j, v := range x {
						row[j] += gt * v
					}
				}
			}
			l2 := float32(cfg.L2)
			for t := 0; t < T; t++ {
				row, wr := g[t*width:(t+1)*width-1], W[t*width:(t+1)*width-1]
				for j := range row {
					row[j] += l2 * wr[j]
				}
			}
			opt.update(W, g)
		}
	}
}

// trainLogistic fits one logistic regression per model (rows of W) to the
// samples' masked labels by minibatch Adam on cross-entropy plus L2 (bias
// excluded). Each model's bias starts at the logit of its label mean.
func trainLogistic(xs [][]float32, samples []headSample, W [][]float32, cfg HeadConfig, rng *rand.Rand) {
	M := len(W)
	width := len(xs[0])
	initBiases(samples, W)
	flatW := W[0][: M*width : M*width]
	opt := newAdam(M*width, cfg.LearnRate)
	g := make([]float32, M*width)
	order := make([]int, len(xs))
	for i := range order {
		order[i] = i
	}
	for ep := 0; ep < qualityEpochs(len(xs), cfg); ep++ {
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for s := 0; s < len(order); s += cfg.Batch {
			batch := order[s:min(s+cfg.Batch, len(order))]
			clear(g)
			for _, i := range batch {
				x, smp := xs[i], &samples[i]
				for m := 0; m < M; m++ {
					if !smp.mask[m] {
						continue
					}
					e := float32(sigmoid(float64(dot32(W[m], x)))) - smp.labels[m]
					e /= float32(len(batch))
					row := g[m*width : (m+1)*width]
					for j, v := range x {
						row[j] += e * v
					}
				}
			}
			l2 := float32(cfg.L2)
			for m := 0; m < M; m++ {
				row, wr := g[m*width:(m+1)*width-1], W[m][:width-1]
				for j := range row {
					row[j] += l2 * wr[j]
				}
			}
			opt.update(flatW, g)
		}
	}
}

// minQualitySteps is the least number of Adam steps the quality models
// take: on a small index (the demo's 252 prompts: 8 minibatches a pass)
// Epochs passes are too few steps to converge, on the LLMRouter data
// (3,000+ prompts, 100+ minibatches a pass) Epochs passes are more.
const minQualitySteps = 2000

// qualityEpochs is the number of passes over n records the quality models
// train for: Epochs, or more to take minQualitySteps steps.
func qualityEpochs(n int, cfg HeadConfig) int {
	perEpoch := (n + cfg.Batch - 1) / cfg.Batch
	return max(cfg.Epochs, (minQualitySteps+perEpoch-1)/max(perEpoch, 1))
}

// initBiases starts each model's bias (the last weight) at the logit of
// its label mean.
func initBiases(samples []headSample, W [][]float32) {
	for m := range W {
		var s, n float64
		for i := range samples {
			if samples[i].mask[m] {
				s += float64(samples[i].labels[m])
				n++
			}
		}
		mean := min(max(s/max(n, 1), 1e-3), 1-1e-3)
		W[m][len(W[m])-1] = float32(math.Log(mean / (1 - mean)))
	}
}

// trainLowRank fits the quality models like trainLogistic but with the
// weights of the first lo inputs (embedding and prompt features: the
// within-task signals) of rank cfg.Rank across models,
// W[m][:lo] = Σ_r S[m][r]·D[r]: every model sees the same few difficulty
// directions D[r], each with its own sensitivity S[m][r]; the rest (task
// block, interactions, bias) stays free per model. Minibatch Adam on
// cross-entropy, L2 on the free block (bias excluded) and on D. It starts
// from the independent fit (trainLogistic) truncated to rank R, so it only
// has to trade the remaining slopes for a better fit — from a small random
// start the product S·D learned too slowly on small indexes. The product
// is written back into W, so the forward pass, the file and online
// learning are those of the full head.
func trainLowRank(xs [][]float32, samples []headSample, W [][]float32, lo int, cfg HeadConfig, rng *rand.Rand) {
	M := len(W)
	width := len(xs[0])
	R := cfg.Rank
	hi := width - lo
	trainLogistic(xs, samples, W, cfg, rng)
	nFree, nS := M*hi, M*R
	P := make([]float32, nFree+nS+R*lo) // [free blocks | S | D]
	for m := 0; m < M; m++ {
		copy(P[m*hi:(m+1)*hi], W[m][lo:])
	}
	S, D := P[nFree:nFree+nS], P[nFree+nS:]
	lowRankInit(W, lo, R, S, D, rng)
	opt := newAdam(len(P), cfg.LearnRate)
	g := make([]float32, len(P))
	gS, gD := g[nFree:nFree+nS], g[nFree+nS:]
	proj := make([]float32, R)
	order := make([]int, len(xs))
	for i := range order {
		order[i] = i
	}
	for ep := 0; ep < qualityEpochs(len(xs), cfg); ep++ {
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for st := 0; st < len(order); st += cfg.Batch {
			batch := order[st:min(st+cfg.Batch, len(order))]
			clear(g)
			for _, i := range batch {
				x, smp := xs[i], &samples[i]
				for r := 0; r < R; r++ {
					proj[r] = dot32(D[r*lo:(r+1)*lo], x[:lo])
				}
				for m := 0; m < M; m++ {
					if !smp.mask[m] {
						continue
					}
					z := dot32(P[m*hi:(m+1)*hi], x[lo:])
					for r := 0; r < R; r++ {
						z += S[m*R+r] * proj[r]
					}
					e := (float32(sigmoid(float64(z))) - smp.labels[m]) / float32(len(batch))
					row := g[m*hi : (m+1)*hi]
					for j, v := range x[lo:] {
						row[j] += e * v
					}
					for r := 0; r < R; r++ {
						gS[m*R+r] += e * proj[r]
						es := e * S[m*R+r]
						gd := gD[r*lo : (r+1)*lo]
						for j, v := range x[:lo] {
							gd[j] += es * v
						}
					}
				}
			}
			l2 := float32(cfg.L2)
			for m := 0; m < M; m++ {
				row, wr := g[m*hi:(m+1)*hi-1], P[m*hi:(m+1)*hi-1]
				for j := range row {
					row[j] += l2 * wr[j]
				}
			}
			for j := range gD {
				gD[j] += l2 * D[j]
			}
			opt.update(P, g)
		}
	}
	for m := 0; m < M; m++ {
		copy(W[m][lo:], P[m*hi:(m+1)*hi])
		for j := 0; j < lo; j++ {
			var w float32
			for r := 0; r < R; r++ {
				w += S[m*R+r] * D[r*lo+j]
			}
			W[m][j] = w
		}
	}
}

// lowRankInit sets S (M×R) and D (R×lo) to the rank-R truncation of the
// first lo columns of W by power iteration with deflation: D[r] is the
// r-th right singular vector, S[·][r] = W·D[r]. A direction with no
// signal left gets a small random vector (and S 0), so training can
// still move it.
func lowRankInit(W [][]float32, lo, R int, S, D []float32, rng *rand.Rand) {
	M := len(W)
	res := make([][]float64, M) // residual of the deflation
	for m := range res {
		res[m] = make([]float64, lo)
		for j := 0; j < lo; j++ {
			res[m][j] = float64(W[m][j])
		}
	}
	v, u := make([]float64, lo), make([]float64, M)
	for r := 0; r < R; r++ {
		for j := range v {
			v[j] = rng.NormFloat64()
		}
		var norm float64
		for it := 0; it < 100; it++ {
			for m := range u { // u = res·v
				u[m] = 0
				for j, x := range res[m] {
					u[m] += x * v[j]
				}
			}
			clear(v) // v = resᵀ·u, normalised
			for m, um := range u {
				for j, x := range res[m] {
					v[j] += x * um
				}
			}
			norm = 0
			for _, x := range v {
				norm += x * x
			}
			norm = math.Sqrt(norm)
			if norm < 1e-12 {
				break
			}
			for j := range v {
				v[j] /= norm
			}
		}
		if norm < 1e-12 {
			for j := 0; j < lo; j++ {
				D[r*lo+j] = 0.01 * float32(rng.NormFloat64()) / float32(math.Sqrt(float64(lo)))
			}
			for m := 0; m < M; m++ {
				S[m*R+r] = 0
			}
			continue
		}
		for m := 0; m < M; m++ {
			var s float64
			for j, x := range res[m] {
				s += x * v[j]
			}
			S[m*R+r] = float32(s)
			for j := range res[m] {
				res[m][j] -= s * v[j]
			}
		}
		for j := 0; j < lo; j++ {
			D[r*lo+j] = float32(v[j])
		}
	}
}

// headFile is head.json.
type headFile struct {
	Format   string      `json:"format"`
	Config   HeadConfig  `json:"config"`
	Dim      int         `json:"dim"`
	Features []string    `json:"features"`
	Tasks    []string    `json:"tasks"`
	Models   []string    `json:"models"`
	FMean    []float32   `json:"feature_mean"`
	FStd     []float32   `json:"feature_std"`
	TaskW    []float32   `json:"task_weights"`
	QualityW [][]float32 `json:"quality_weights"`
}

const headFormat = "routebalance-quality-head-v1"

// Write saves the head as JSON.
func (h *Head) Write(w io.Writer) error {
	f := headFile{Format: headFormat, Config: h.cfg, Dim: h.dim, Features: PromptFeatureNames[:],
		Tasks: h.tasks, Models: h.models, FMean: h.fMean[:], FStd: h.fStd[:], TaskW: h.taskW, QualityW: h.qW}
	return json.NewEncoder(w).Encode(f)
}

// ReadHead loads a head written by Write and checks its shapes.
func ReadHead(r io.Reader) (*Head, error) {
	var f headFile
	if err := json.NewDecoder(r).Decode(&f); err != nil {
		return nil, fmt.Errorf("head: %w", err)
	}
	if f.Format != headFormat {
		return nil, fmt.Errorf("head: format %q, want %q", f.Format, headFormat)
	}
	if len(f.Features) != NumPromptFeatures || len(f.FMean) != NumPromptFeatures || len(f.FStd) != NumPromptFeatures {
		return nil, fmt.Errorf("head: %d features, this build computes %d", len(f.Features), NumPromptFeatures)
	}
	for i, n := range f.Features {
		if n != PromptFeatureNames[i] {
			return nil, fmt.Errorf("head: feature %d is %q, this build computes %q", i, n, PromptFeatureNames[i])
		}
	}
	if f.Dim <= 0 || len(f.Models) != len(f.QualityW) {
		return nil, fmt.Errorf("head: dim %d, %d models, %d weight rows", f.Dim, len(f.Models), len(f.QualityW))
	}
	h := &Head{cfg: f.Config.withDefaults(), dim: f.Dim, tasks: f.Tasks, models: f.Models, taskW: f.TaskW, qW: f.QualityW}
	copy(h.fMean[:], f.FMean)
	copy(h.fStd[:], f.FStd)
	if len(h.taskW) != len(h.tasks)*h.taskWidth() {
		return nil, fmt.Errorf("head: task weights %d, want %d", len(h.taskW), len(h.tasks)*h.taskWidth())
	}
	for m, w := range h.qW {
		if len(w) != h.width() {
			return nil, fmt.Errorf("head: model %s has %d weights, want %d", h.models[m], len(w), h.width())
		}
	}
	for i, s := range h.fStd {
		if !(s > 0) {
			return nil, fmt.Errorf("head: feature %d has std %v", i, s)
		}
	}
	return h, nil
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
