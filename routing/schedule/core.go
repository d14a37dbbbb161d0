package schedule

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/fleet"
)

// Core is the synchronous scheduler of one cluster: batch decisions
// (estimates, filters, score, LPT, greedy assignment), admission queues,
// stickiness and live fleet state. It starts no goroutines and reads time
// only from its arguments, so the live Router and the discrete-event
// simulator drive the same code:
//
//	core, _ := schedule.NewCore(cfg, deps, &cluster)
//	t := &schedule.Ticket{Req: req, Notify: onAdmitOrReject}
//	core.Assign(ctx, now, []*schedule.Ticket{t}) // decides, admits or queues
//	...
//	core.Release(now, t, outcome)                 // may admit queued tickets
//
// Assign calls are serialised by the caller (one owner); Release, Progress,
// Cancel and State may be called from any goroutine.
type Core struct {
	cfg  Config
	deps Deps

	assignMu sync.Mutex // serialises Assign and Update (scratch, models)

	mu        sync.Mutex // guards everything below
	fleet     *fleet.Fleet
	version   int64
	clusterID string
	policyCfg routing.PolicyConfig
	policies  map[string]Policy
	models    []string
	priors    []float64
	sources   []routing.EstimateSource
	modelOf   map[string]int
	tiers     []string      // Tier() of each listed instance, precomputed
	lats      []TierLatency // latency model of each listed instance
	biases    []*tierBias   // T̂ correction of each listed instance's tier
	biasOf    map[string]*tierBias
	queues    map[*fleet.Member]*admitQueue
	members   []*fleet.Member // listed members, in listing order (late binding scans them)
	sticky    *stickyMap
	requeue   func([]*Ticket)
	seq       uint64

	// scratch, guarded by assignMu (and mu while deciding)
	snaps   []fleet.Snapshot
	view    []slot
	ests    []routing.PromptEstimate
	prompts []string
	order   []int
	cands   []Candidate
	lens    []float64 // per model: L̂ clamped to max_tokens
	lensQ   []float64 // per model: length at the SLO confidence
	live    []*Ticket
	notify  []*Ticket
}

// slot is the local view of one instance during a batch.
type slot struct {
	member    *fleet.Member
	inst      *routing.Instance
	lat       TierLatency
	model     int
	healthy   bool
	exploring bool
	inflight  int
	queue     int
	cap       int
	running   float64
	waiting   float64
	kv        float64
	pending   float64
	queued    float64 // Σ L̂ of the requests in the admission queue
	bias      float64 // the tier's T̂ correction factor (0: none)
}

// NewCore returns the scheduler of cluster c.
func NewCore(cfg Config, deps Deps, c *routing.Cluster) (*Core, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	deps = deps.withDefaults(cfg)
	if b, ok := deps.Estimator.(ClusterBinder); ok {
		deps.Estimator = b.ForCluster(c.ID)
	}
	core := &Core{
		cfg:     cfg,
		deps:    deps,
		fleet:   fleet.New(cfg.Fleet, nil),
		queues:  map[*fleet.Member]*admitQueue{},
		sticky:  newStickyMap(cfg.StickyTTL, cfg.StickyMax),
		version: math.MinInt64,
	}
	if _, err := core.Update(c); err != nil {
		return nil, err
	}
	return core, nil
}

// Fleet returns the cluster's live instance state.
func (c *Core) Fleet() *fleet.Fleet { return c.fleet }

// Version returns the cluster version the core currently schedules.
func (c *Core) Version() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// Update switches to a new version of the cluster. Instances whose ID
// persists keep their live state; tickets queued on removed instances are
// returned to be assigned again (their state is reset to undecided). An
// unchanged version does nothing.
func (c *Core) Update(cl *routing.Cluster) ([]*Ticket, error) {
	c.assignMu.Lock()
	defer c.assignMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl.Version == c.version {
		return nil, nil
	}
	pc := cl.Policy
	if pc.Name == "" {
		pc.Name = c.cfg.DefaultPolicy
	}
	pol, err := c.deps.Policies.New(pc)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cl.ID, err)
	}
	c.policyCfg = pc
	c.policies = map[string]Policy{pc.Name: pol}
	c.clusterID = cl.ID
	c.version = cl.Version

	c.fleet.Rebuild(cl.Instances)
	c.models, c.priors, c.sources = c.models[:0], c.priors[:0], c.sources[:0]
	c.modelOf = map[string]int{}
	c.tiers, c.lats, c.biases = c.tiers[:0], c.lats[:0], c.biases[:0]
	if c.biasOf == nil {
		c.biasOf = map[string]*tierBias{}
	}
	for _, in := range cl.Instances {
		c.tiers = append(c.tiers, in.Tier())
		c.lats = append(c.lats, bindTier(c.deps.Latency, in.Tier()))
		b := c.biasOf[in.Tier()]
		if b == nil {
			b = &tierBias{}
			c.biasOf[in.Tier()] = b
		}
		c.biases = append(c.biases, b)
		m, ok := c.modelOf[in.Model]
		if !ok {
			m = len(c.models)
			c.modelOf[in.Model] = m
			c.models = append(c.models, in.Model)
			c.priors = append(c.priors, 0)
			c.sources = append(c.sources, routing.SourcePrior)
		}
		if in.QualityPrior > c.priors[m] {
			c.priors[m] = in.QualityPrior
		}
	}
	for m := range c.priors {
		if c.priors[m] == 0 {
			c.priors[m] = c.cfg.DefaultQualityPrior
		}
	}
	listed := map[*fleet.Member]bool{}
	c.members = c.fleet.Members()
	for _, m := range c.members {
		listed[m] = true
	}
	var orphans []*Ticket
	for m := range c.queues {
		if listed[m] {
			continue
		}
		orphans = append(orphans, c.drainQueue(m)...)
		delete(c.queues, m)
	}
	slices.SortFunc(orphans, func(a, b *Ticket) int { return cmp.Compare(a.seq, b.seq) })
	return orphans, nil
}

func (c *Core) capOf(in *routing.Instance) int {
	if in.MaxConcurrency > 0 {
		return in.MaxConcurrency
	}
	return c.cfg.DefaultMaxConcurrency
}

// BatchLimit returns how many waiting requests the next batch may take:
// Config.Batch.Limit of the share of healthy instances at capacity.
func (c *Core) BatchLimit(now time.Time) int {
	if c.cfg.Batch.Fixed > 0 || c.cfg.Batch.NoAdaptive {
		return c.cfg.Batch.Limit(0)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snaps = c.fleet.Snapshot(now, c.snaps)
	healthy, busy := 0, 0
	for i := range c.snaps {
		s := &c.snaps[i]
		if !s.Healthy || s.Instance.Disabled {
			continue
		}
		healthy++
		if s.InFlight >= c.capOf(s.Instance) {
			busy++
		}
	}
	if healthy == 0 {
		return c.cfg.Batch.Limit(0)
	}
	return c.cfg.Batch.Limit(float64(busy) / float64(healthy))
}

// Assign decides a batch of tickets at now: one estimator call for the
// batch, then for each request (longest predicted output first) filters,
// scores and a greedy pick on the local view of the fleet, updated after
// every pick. Each ticket is then admitted on its instance (Notify called)
// or queued behind its in-flight cap (Notify called later by Release), or
// rejected (Err set, Notify called). Tickets cancelled before Assign are
// skipped. Calls must not overlap.
func (c *Core) Assign(ctx context.Context, now time.Time, tickets []*Ticket) {
	c.assignMu.Lock()
	defer c.assignMu.Unlock()
	start := c.deps.Stopwatch()

	c.mu.Lock()
	c.live = c.live[:0]
	for _, t := range tickets {
		if t.state == ticketNew {
			c.live = append(c.live, t)
		}
	}
	c.mu.Unlock()
	n := len(c.live)
	if n == 0 {
		return
	}

	// Estimates, once per batch, outside the lock.
	c.prompts = c.prompts[:0]
	for _, t := range c.live {
		c.prompts = append(c.prompts, t.Req.Prompt)
	}
	if cap(c.ests) < n {
		c.ests = append(c.ests[:cap(c.ests)], make([]routing.PromptEstimate, n-cap(c.ests))...)
	}
	ests := c.ests[:n]
	if err := c.estimate(ctx, ests); err != nil {
		c.deps.Logger.WarnContext(ctx, "estimator failed; using priors", slog.String("cluster", c.clusterID), slog.Any("err", err))
		_ = priorEstimator{tokens: c.cfg.DefaultOutputTokens}.Estimate(ctx, c.prompts, c.models, c.priors, ests)
	}
	if c.deps.Labels != nil {
		for j, t := range c.live {
			if c.policyName(t.Req) == PolicyOracle {
				c.deps.Labels.TrueLabels(t.Req, c.models, &ests[j])
			}
		}
	}

	estimated := c.deps.Stopwatch() - start

	c.mu.Lock()
	defer c.mu.Unlock()
	// Where each model's estimates come from, for State: the batch's best.
	for m := range c.sources {
		src := routing.SourcePrior
		for j := range ests {
			if m < len(ests[j].Source) && ests[j].Source[m] > src {
				src = ests[j].Source[m]
			}
		}
		c.sources[m] = src
	}
	c.buildView(now)
	c.orderBatch(ests)
	c.notify = c.notify[:0]
	for _, j := range c.order {
		t := c.live[j]
		if t.state != ticketNew {
			continue // cancelled while estimating
		}
		c.decide(now, t, &ests[j], n)
	}
	elapsed := c.deps.Stopwatch() - start
	for _, t := range c.live {
		t.Decision.DecisionTime = elapsed
		t.Decision.EstimateTime = estimated
	}
	for _, t := range c.notify {
		t.Notify(t)
	}
	c.notify = c.notify[:0]
}

// estimate calls the estimator for the batch; a panic inside it is turned
// into an error so one bad estimator call cannot take the process down.
func (c *Core) estimate(ctx context.Context, out []routing.PromptEstimate) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("estimator panicked: %v", p)
		}
	}()
	return c.deps.Estimator.Estimate(ctx, c.prompts, c.models, c.priors, out)
}

// policyName is the effective policy name of a request.
func (c *Core) policyName(r *routing.Request) string {
	if r.Policy != "" {
		return r.Policy
	}
	return c.policyCfg.Name
}

// policyFor returns the request's policy, building a per-request override
// with default parameters on first use.
func (c *Core) policyFor(r *routing.Request) (Policy, string, error) {
	name := c.policyName(r)
	if p, ok := c.policies[name]; ok {
		return p, name, nil
	}
	p, err := c.deps.Policies.New(routing.PolicyConfig{Name: name})
	if err != nil {
		return nil, name, err
	}
	c.policies[name] = p
	return p, name, nil
}

// buildView snapshots the fleet into the local view.
func (c *Core) buildView(now time.Time) {
	c.snaps = c.fleet.Snapshot(now, c.snaps)
	c.view = c.view[:0]
	for i := range c.snaps {
		v := c.slotOf(&c.snaps[i])
		m := v.member
		c.view = append(c.view, v)
		if v.inflight > 0 {
			// Dead reckoning follows the instance's present decode speed.
			c.fleet.Retune(now, m, seconds(v.lat.TPOT(routing.Load{
				Running: v.running, Waiting: v.waiting + float64(v.queue), KVUsage: v.kv, PendingDecodeTokens: v.pending,
			})))
		}
	}
}

// slotOf is the local view of the instance of snapshot s. Called with c.mu
// held.
func (c *Core) slotOf(s *fleet.Snapshot) slot {
	m := s.Member
	q, queued := 0, 0.0
	if aq := c.queues[m]; aq != nil {
		q = aq.Len()
		for _, t := range *aq {
			queued += t.spec.Tokens
		}
	}
	return slot{
		member:    m,
		inst:      s.Instance,
		lat:       c.lats[s.Index],
		model:     c.modelOf[s.Instance.Model],
		healthy:   s.Healthy && !s.Instance.Disabled,
		exploring: s.Exploring,
		inflight:  s.InFlight,
		queue:     q,
		cap:       c.capOf(s.Instance),
		running:   s.Running,
		waiting:   s.Waiting,
		kv:        s.KVUsage,
		pending:   s.Pending,
		queued:    queued,
		bias:      c.biasFactor(s.Index),
	}
}

// biasFactor is the T̂ correction of the instance at listing index i (0
// when the correction is off). Called with c.mu held.
func (c *Core) biasFactor(i int) float64 {
	if c.cfg.Bias != BiasOn || i < 0 || i >= len(c.biases) {
		return 0
	}
	return c.biases[i].factor()
}

// orderBatch fills c.order: longest predicted output first (L̂ of the
// requested model, or the max over the cluster's models for "auto"), or
// arrival order when LPT is off.
func (c *Core) orderBatch(ests []routing.PromptEstimate) {
	c.order = c.order[:0]
	for j := range c.live {
		c.order = append(c.order, j)
	}
	if c.cfg.Batch.NoLPT || len(c.order) < 2 {
		return
	}
	key := func(j int) float64 {
		r := c.live[j].Req
		k := 0.0
		if m, ok := c.modelOf[r.Model]; ok && !r.AnyModel() {
			k = ests[j].Length[m]
		} else {
			for _, l := range ests[j].Length {
				k = max(k, l)
			}
		}
		if mt := r.MaxTokens; mt > 0 {
			k = min(k, float64(mt))
		}
		return k
	}
	// Insertion sort: batches are small and this keeps the loop
	// allocation-free and stable.
	o := c.order
	for a := 1; a < len(o); a++ {
		x, kx := o[a], key(o[a])
		b := a - 1
		for b >= 0 && key(o[b]) < kx {
			o[b+1] = o[b]
			b--
		}
		o[b+1] = x
	}
}

func excluded(r *routing.Request, id string) bool {
	for _, x := range r.Exclude {
		if x == id {
			return true
		}
	}
	return false
}

// choice is the outcome of choose for one request.
type choice struct {
	cand    Candidate
	policy  string
	relaxed []string
	sticky  *stickyEntry
}

// choose runs the filters, the score and the request's policy on the
// local view, without changing it. Called with c.mu held.
func (c *Core) choose(now time.Time, r *routing.Request, est *routing.PromptEstimate) (choice, error) {
	pol, name, err := c.policyFor(r)
	if err != nil {
		return choice{}, err
	}
	w := r.Weights
	if w == (routing.Weights{}) {
		w = routing.Weights{Quality: 1.0 / 3, Cost: 1.0 / 3, Latency: 1.0 / 3}
	}
	cands, relaxed, err := c.candidates(now, r, est)
	if err != nil {
		return choice{}, err
	}
	// Workflow stickiness: the sticky instance wins when it survived.
	k := -1
	entry := c.sticky.get(r.Workflow, now)
	if entry != nil {
		for j := range cands {
			if c.view[cands[j].Index].inst.ID == entry.instance {
				k = j
				break
			}
		}
	}
	if k < 0 {
		k = pol.Pick(r, w, cands)
	}
	return choice{cand: cands[k], policy: name, relaxed: relaxed, sticky: entry}, nil
}

// take puts a request of tokens predicted output on the local view of v and
// reports whether it is admitted at once (else it queues).
func (c *Core) take(v *slot, tokens float64) bool {
	if v.inflight < v.cap {
		v.inflight++
		v.running++
		v.pending += tokens
		return true
	}
	v.queue++
	v.queued += tokens
	return false
}

// decide chooses an instance for t and admits, queues or rejects it.
// Called with c.mu held.
func (c *Core) decide(now time.Time, t *Ticket, est *routing.PromptEstimate, batch int) {
	r := t.Req
	ch, err := c.choose(now, r, est)
	if err != nil {
		c.reject(t, err)
		return
	}
	cand, name, relaxed, entry := ch.cand, ch.policy, ch.relaxed, ch.sticky
	v := &c.view[cand.Index]
	if r.Workflow != "" {
		if entry == nil {
			entry = c.sticky.put(r.Workflow, v.inst.Model, v.inst.ID, now)
		} else {
			entry.instance = v.inst.ID
			entry.expires = now.Add(c.cfg.StickyTTL)
		}
	}

	d := routing.Decision{
		Instance:              *v.inst,
		Policy:                name,
		BatchSize:             batch,
		PredictedQuality:      cand.Quality,
		PredictedTTFT:         seconds(cand.TTFT + cand.Wait),
		PredictedE2E:          seconds(cand.Latency),
		PredictedCostUSD:      cand.Cost,
		PredictedOutputTokens: cand.Tokens,
		Relaxed:               relaxed,
	}
	if cand.Model < len(est.Source) {
		d.QualitySource = est.Source[cand.Model]
	}
	d.EstimateMemo = est.Memo
	if b := r.Budget(); b > 0 && v.inst.PriceOutPerMTok > 0 {
		afford := (b - v.inst.CostUSD(float64(r.PromptTokens), 0)) / (v.inst.PriceOutPerMTok / 1e6)
		mt := max(1, int(math.Floor(afford)))
		if r.MaxTokens == 0 || mt < r.MaxTokens {
			d.MaxTokens = mt
		}
		// The clamp caps the output: predictions follow it.
		if cut := cand.Tokens - float64(mt); cut > 0 {
			cand.Tokens = float64(mt)
			cand.Cost = v.inst.CostUSD(float64(r.PromptTokens), cand.Tokens)
			cand.Latency -= cand.TPOT * cut
			cand.Raw -= cand.TPOT * cut
			d.PredictedOutputTokens, d.PredictedCostUSD, d.PredictedE2E = cand.Tokens, cand.Cost, seconds(cand.Latency)
		}
	}
	t.Decision = d
	t.decided = now
	t.member = v.member
	t.tier = c.biases[cand.Index]
	t.raw = cand.Raw
	t.spec = fleet.LeaseSpec{
		RequestID: r.ID,
		Tokens:    cand.Tokens,
		TTFT:      seconds(cand.TTFT),
		TPOT:      seconds(cand.TPOT),
		Load: routing.Load{
			Running: v.running + 1, Waiting: v.waiting + float64(v.queue), KVUsage: v.kv,
			PendingDecodeTokens: v.pending, PromptTokens: float64(r.PromptTokens),
		},
	}
	t.key = cand.Tokens
	if entry != nil {
		t.key += entry.pending
		entry.pending += cand.Tokens
		t.workflow = entry
	}

	// Local view: the next request of the batch sees this pick.
	if c.take(v, cand.Tokens) {
		c.admit(now, t)
		c.notify = append(c.notify, t)
		return
	}
	c.seq++
	t.seq = c.seq
	aq := c.queues[v.member]
	if aq == nil {
		aq = &admitQueue{}
		c.queues[v.member] = aq
	}
	t.q = aq
	t.state = ticketQueued
	heap.Push(aq, t)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// candidates applies the hard filters (model, exclusion, health, capacity,
// stickiness's model) and the soft filters with relaxation, and returns
// the survivors with normalised cost and latency.
func (c *Core) candidates(now time.Time, r *routing.Request, est *routing.PromptEstimate) ([]Candidate, []string, error) {
	cands := c.cands[:0]
	anyModel, anyEnabled, anyHealthy := false, false, false
	passAll := 0 // candidates failing no soft filter
	budget := r.Budget()
	prompt := float64(r.PromptTokens)
	// Per-model lengths, once per request.
	c.lens, c.lensQ = c.lens[:0], c.lensQ[:0]
	for m := range c.models {
		L := est.Length[m]
		if r.MaxTokens > 0 && L > float64(r.MaxTokens) {
			L = float64(r.MaxTokens)
		}
		Lq := L
		if r.SLO.E2E > 0 {
			if h := &est.Hist[m]; !h.Empty() {
				Lq = h.Quantile(c.cfg.Confidence)
				if r.MaxTokens > 0 {
					Lq = min(Lq, float64(r.MaxTokens))
				}
			}
		}
		c.lens, c.lensQ = append(c.lens, L), append(c.lensQ, Lq)
	}
	anyM := r.AnyModel()
	for i := range c.view {
		v := &c.view[i]
		if (!anyM && v.inst.Model != r.Model) || v.inst.Kind.Embedding() != r.Kind.Embedding() {
			continue
		}
		anyModel = true
		anyEnabled = anyEnabled || !v.inst.Disabled
		if !v.healthy || (len(r.Exclude) > 0 && excluded(r, v.inst.ID)) {
			continue
		}
		anyHealthy = true
		if v.inflight >= v.cap && v.queue >= c.cfg.MaxQueue {
			continue
		}
		m := v.model
		L := c.lens[m]
		p := predict(v, prompt, L)
		q := est.Quality[m]
		fail := softFail(filterInput{r: r, p: p, q: q, lq: c.lensQ[m], budget: budget})
		if fail == 0 {
			passAll++
		}
		// Fill in place: no copy of the struct.
		cands = append(cands, Candidate{})
		cd := &cands[len(cands)-1]
		cd.Index, cd.Model, cd.Quality, cd.Tokens, cd.Cost = i, m, q, L, p.Cost
		cd.TTFT, cd.TPOT, cd.Wait = p.TTFT, p.TPOT, p.Wait
		cd.Latency, cd.Raw = p.Latency, p.Raw
		if c.cfg.Score == ScoreLight {
			cd.Light = lightService(v, prompt, L)
		}
		cd.Load = v.inflight + v.queue
		cd.fail = fail
		cd.explore = v.exploring && v.inflight < c.cfg.ExploreConcurrency
	}
	c.cands = cands
	switch {
	case !anyModel:
		return nil, nil, fmt.Errorf("model %q: %w", r.Model, routing.ErrUnknownModel)
	case !anyEnabled:
		return nil, nil, routing.ErrModelDisabled
	case !anyHealthy:
		return nil, nil, routing.ErrNoHealthyInstance
	case len(cands) == 0:
		return nil, nil, routing.ErrNoCapacity
	}

	// Stickiness: later stages of a workflow keep the first stage's model
	// when any of its instances survived the hard filters.
	if e := c.sticky.get(r.Workflow, now); e != nil {
		if mi, ok := c.modelOf[e.model]; ok {
			cands, passAll = keepModel(cands, mi, passAll)
		}
	}
	cands, relaxed := relax(r, cands, budget, passAll)
	normalise(cands, c.cfg.Score)
	return cands, relaxed, nil
}

// normalise sets the normalised terms of the score over the candidates c
// of one request: CostNorm and LatencyNorm by the maxima (Ĉ/maxĈ,
// T̂/maxT̂), and the score terms QualityTerm, CostTerm, LatencyTerm
// (higher is better) by mode (README "Score"):
//
//   - "light" (default): as "relative" but the excess over the fastest is
//     in units of T̂₀, the least idle-instance T̂ (Candidate.Light) of the
//     trusted candidates: seconds weigh the same at every load;
//   - "relative": quality and cost as in "range"; latency
//     1 − (T̂ − minT̂)/minT̂, the excess over the fastest candidate in units
//     of the fastest's own T̂ (unbounded below: a saturating instance keeps
//     losing latency term as its queue grows);
//   - "range": (x − worst)/(best − worst) per objective, 1 for all when
//     every candidate is equal;
//   - "paper": Q̂, 1 − Ĉ/maxĈ, 1 − T̂/maxT̂.
//
// An exploring candidate's latency is not trusted yet: it is scored as if
// its T̂ were 0 (LatencyNorm 0) — the best latency term in "range" and
// "paper", and in "relative" 1 − (0 − minT̂)/minT̂ = 2 against the fastest
// trusted candidate (1 when every candidate explores; "light": 1 + minT̂/T̂₀).
func normalise(c []Candidate, mode string) {
	minQ, maxQ := math.Inf(1), math.Inf(-1)
	minC, maxC := math.Inf(1), 0.0
	minT, maxT := math.Inf(1), 0.0
	fastest := math.Inf(1) // the fastest trusted (non-exploring) prediction
	scale := math.Inf(1)   // "light": the least idle-instance T̂ of the trusted
	for j := range c {
		minQ, maxQ = min(minQ, c[j].Quality), max(maxQ, c[j].Quality)
		minC, maxC = min(minC, c[j].Cost), max(maxC, c[j].Cost)
		if c[j].explore {
			minT = 0 // scored as the fastest possible
		} else {
			minT, maxT = min(minT, c[j].Latency), max(maxT, c[j].Latency)
			fastest = min(fastest, c[j].Latency)
			scale = min(scale, c[j].Light)
		}
	}
	if mode != ScoreLight || !(scale > 0) || math.IsInf(scale, 0) {
		scale = fastest
	}
	rangeTerm := func(x, worst, best float64) float64 {
		if best == worst || math.IsInf(worst, 0) {
			return 1
		}
		return (x - worst) / (best - worst)
	}
	for j := range c {
		cd := &c[j]
		cd.CostNorm, cd.LatencyNorm = 0, 0
		if maxC > 0 {
			cd.CostNorm = cd.Cost / maxC
		}
		if maxT > 0 && !cd.explore {
			cd.LatencyNorm = cd.Latency / maxT
		}
		if mode == ScorePaper {
			cd.QualityTerm, cd.CostTerm, cd.LatencyTerm = cd.Quality, 1-cd.CostNorm, 1-cd.LatencyNorm
			continue
		}
		cd.QualityTerm = rangeTerm(cd.Quality, minQ, maxQ)
		cd.CostTerm = rangeTerm(cd.Cost, maxC, minC)
		cd.LatencyTerm = 1
		switch {
		case mode == ScoreRange:
			if !cd.explore {
				cd.LatencyTerm = rangeTerm(cd.Latency, maxT, minT)
			}
		case fastest > 0 && !math.IsInf(fastest, 0):
			x := cd.Latency
			if cd.explore {
				x = 0
			}
			cd.LatencyTerm = 1 - (x-fastest)/scale
		}
	}
}

// admit grants t a lease on its member. Called with c.mu held.
func (c *Core) admit(now time.Time, t *Ticket) {
	t.lease = c.fleet.Admit(now, t.member, t.spec)
	t.state = ticketAdmitted
	t.Admitted = now
	t.Decision.QueueWait = now.Sub(t.decided)
}

func (c *Core) reject(t *Ticket, err error) {
	t.Err = err
	t.state = ticketRejected
	c.notify = append(c.notify, t)
}

// unqueued clears a ticket's workflow accounting when it leaves without
// being served. Called with c.mu held.
func (c *Core) unqueued(t *Ticket) {
	if t.workflow != nil {
		t.workflow.pending -= t.spec.Tokens
		t.workflow = nil
	}
}

// Release ends an admitted ticket with its outcome: fleet state and health
// learn from it, the estimators observe it, and queued tickets of the
// instance are admitted while it has room (their Notify is called). Only
// the first call for a ticket counts.
func (c *Core) Release(now time.Time, t *Ticket, o routing.Outcome) {
	c.mu.Lock()
	if t.state != ticketAdmitted {
		c.mu.Unlock()
		return
	}
	c.fleet.Release(now, t.lease, o)
	t.state = ticketReleased
	if c.cfg.Bias == BiasOn && o.Err == nil && o.OutputTokens > 0 && t.tier != nil && !o.Truncated {
		t.tier.observe((t.Decision.QueueWait + o.E2E).Seconds(), t.raw)
	}
	c.unqueued(t)
	var requeued []*Ticket
	if o.Upstream && c.requeue != nil && !c.fleet.Healthy(t.member) {
		requeued = c.drainQueue(t.member)
	} else {
		c.admitQueued(now, t.member)
		c.lateBind(now, t.member)
	}
	for _, n := range c.notify {
		n.Notify(n)
	}
	c.notify = c.notify[:0]
	requeue := c.requeue
	c.mu.Unlock()
	if len(requeued) > 0 {
		requeue(requeued)
	}

	if o.Err != nil {
		return
	}
	if o.OutputTokens > 0 {
		switch lo := c.deps.Estimator.(type) {
		case MemoLengthObserver:
			lo.ObserveLengthMemo(t.Decision.EstimateMemo, t.Req.Prompt, t.Decision.Instance.Model, o.OutputTokens)
		case LengthObserver:
			lo.ObserveLength(t.Req.Prompt, t.Decision.Instance.Model, o.OutputTokens)
		}
	}
	if lo, ok := c.deps.Latency.(LatencyObserver); ok {
		if tpot, ttft, ok := latencySample(o, t.spec.TTFT); ok {
			lo.Observe(t.Decision.Instance.Tier(), t.spec.Load, tpot, ttft)
		}
	}
}

// latencySample splits a successful outcome into the TPOT and TTFT (in
// seconds) to teach the latency model; ttft 0 means "TTFT not observed",
// which Observe skips. A streamed answer (o.TTFT > 0) measured both:
// tpot = (E2E − TTFT)/(tokens − 1). A non-streamed one measured only E2E,
// which mixes prefill and decode: its TPOT is estimated with the TTFT̂
// the lease was dispatched with, tpot = (E2E − ttftHat)/(tokens − 1), and
// TTFT learns nothing (using TTFT̂ as a sample would only confirm the
// model). Both need ≥ 2 output tokens and a positive, finite TPOT.
func latencySample(o routing.Outcome, ttftHat time.Duration) (tpot, ttft float64, ok bool) {
	if o.OutputTokens < 2 {
		return 0, 0, false
	}
	first := o.TTFT
	if first <= 0 {
		first = ttftHat
	}
	tpot = (o.E2E - first).Seconds() / float64(o.OutputTokens-1)
	if !(tpot > 0) || math.IsInf(tpot, 0) {
		return 0, 0, false
	}
	if o.TTFT > 0 {
		ttft = o.TTFT.Seconds()
	}
	return tpot, ttft, true
}

// busy reports whether any request is admitted or queued.
func (c *Core) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range c.queues {
		if q.Len() > 0 {
			return true
		}
	}
	for _, m := range c.fleet.Members() {
		if c.fleet.InFlight(m) > 0 {
			return true
		}
	}
	return false
}

// SetRequeue installs the hook that takes back the tickets queued on an
// instance that a failed request just ejected: they are undecided again and
// must be passed to Assign. It is called outside the core's lock. Without a
// hook (the default) such tickets stay queued and are admitted as the
// instance's slots free.
func (c *Core) SetRequeue(f func([]*Ticket)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requeue = f
}

// drainQueue empties m's queue, making its tickets undecided again, in
// arrival order. Called with c.mu held.
func (c *Core) drainQueue(m *fleet.Member) []*Ticket {
	aq := c.queues[m]
	if aq == nil || aq.Len() == 0 {
		return nil
	}
	out := make([]*Ticket, 0, aq.Len())
	for aq.Len() > 0 {
		t := heap.Pop(aq).(*Ticket)
		c.unqueued(t)
		t.state, t.q, t.member = ticketNew, nil, nil
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *Ticket) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// admitQueued admits queued tickets of m while it is under its cap.
// Called with c.mu held; the admitted tickets are appended to c.notify.
func (c *Core) admitQueued(now time.Time, m *fleet.Member) {
	aq := c.queues[m]
	if aq == nil {
		return
	}
	in := c.fleet.Instance(m)
	limit := c.capOf(&in)
	for aq.Len() > 0 && c.fleet.InFlight(m) < limit {
		t := aq.pop(c.cfg.AgingPassOvers)
		t.q = nil
		c.admit(now, t)
		c.notify = append(c.notify, t)
	}
}

// lateBind fills the free slots of m, whose own queue is empty, with
// requests queued on other instances of the same offer (sameOffer: model,
// kind and prices, so Q̂, L̂, Ĉ and the budget clamp do not change): the
// best of them in admission order (starvation level, priority class,
// predicted workflow tokens, arrival), skipping workflow stages (they keep
// their sticky instance) and requests that exclude m. A moved request is
// admitted at once with its predictions (TTFT̂, TPOT̂, T̂, the lease's
// load) recomputed on m's present state from the L̂ it carries; the
// estimator is not asked again. Without it a request stays on the instance
// it was queued on while a replica beside it idles (README "Admission
// queue"). Called with c.mu held; admitted tickets go to c.notify.
func (c *Core) lateBind(now time.Time, m *fleet.Member) {
	if c.cfg.Binding != BindingLate {
		return
	}
	if aq := c.queues[m]; aq != nil && aq.Len() > 0 {
		return // m's own queue comes first (admitQueued left it non-empty: m is full)
	}
	s, ok := c.fleet.SnapshotOf(now, m)
	if !ok || !s.Healthy || s.Instance.Disabled {
		return
	}
	in := s.Instance
	for inflight := s.InFlight; inflight < c.capOf(in); inflight++ {
		t := c.stealFor(m, in)
		if t == nil {
			return
		}
		t.q.remove(t)
		t.q = nil
		if s2, ok := c.fleet.SnapshotOf(now, m); ok {
			s = s2
		}
		c.rebind(t, c.slotOf(&s), s.Index)
		c.admit(now, t)
		c.notify = append(c.notify, t)
	}
}

// sameOffer reports whether a request decided for a may run on b with the
// same estimates and prices.
func sameOffer(a, b *routing.Instance) bool {
	return a.Model == b.Model && a.Kind.Embedding() == b.Kind.Embedding() &&
		a.PriceInPerMTok == b.PriceInPerMTok && a.PriceOutPerMTok == b.PriceOutPerMTok
}

// stealFor returns the queued ticket of another instance of m's offer that
// m should admit next, or nil. Called with c.mu held.
func (c *Core) stealFor(m *fleet.Member, in *routing.Instance) *Ticket {
	var best *Ticket
	for _, d := range c.members {
		aq := c.queues[d]
		if d == m || aq == nil || aq.Len() == 0 {
			continue
		}
		din := c.fleet.Instance(d)
		if !sameOffer(&din, in) {
			continue
		}
		for _, t := range *aq {
			if t.Req.Workflow != "" || (len(t.Req.Exclude) > 0 && excluded(t.Req, in.ID)) {
				continue
			}
			if best == nil || before(t, best) {
				best = t
			}
		}
	}
	return best
}

// rebind moves the decided ticket t to the instance of view v: its
// decision and lease spec are predicted again there (below the cap, so no
// queue wait) with the same L̂. Called with c.mu held.
func (c *Core) rebind(t *Ticket, v slot, index int) {
	r := t.Req
	prompt := float64(r.PromptTokens)
	L := t.spec.Tokens
	p := predict(&v, prompt, L)
	t.member = v.member
	t.raw = p.Raw
	if index < len(c.biases) {
		t.tier = c.biases[index]
	}
	t.Decision.Instance = *v.inst
	t.Decision.PredictedTTFT = seconds(p.TTFT)
	t.Decision.PredictedE2E = seconds(p.Latency)
	t.Decision.PredictedCostUSD = p.Cost
	t.spec.TTFT, t.spec.TPOT = seconds(p.TTFT), seconds(p.TPOT)
	t.spec.Load = routing.Load{
		Running: v.running + 1, Waiting: v.waiting + float64(v.queue), KVUsage: v.kv,
		PendingDecodeTokens: v.pending, PromptTokens: prompt,
	}
}

// Progress reports the output tokens streamed so far for t, correcting the
// dead reckoning of its instance. It does nothing unless t is admitted.
func (c *Core) Progress(now time.Time, t *Ticket, tokens int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.state != ticketAdmitted {
		return
	}
	c.fleet.Progress(now, t.lease, tokens)
}

// Cancel withdraws t because its caller gave up (cause, e.g. ctx.Err()):
// an undecided ticket is skipped by Assign, a queued one leaves its queue,
// and an admitted one is released with cause as a client-side error. It
// reports whether t had been admitted.
func (c *Core) Cancel(now time.Time, t *Ticket, cause error) bool {
	c.mu.Lock()
	switch t.state {
	case ticketNew:
		t.state = ticketCancelled
		c.mu.Unlock()
		return false
	case ticketQueued:
		t.q.remove(t)
		t.q = nil
		c.unqueued(t)
		t.state = ticketCancelled
		c.mu.Unlock()
		return false
	case ticketAdmitted:
		c.mu.Unlock()
		c.Release(now, t, routing.Outcome{Err: cause})
		return true
	}
	c.mu.Unlock()
	return false
}

// Reject ends an undecided or queued ticket with err (ErrClosed on
// shutdown), calling its Notify. Admitted tickets are left alone.
func (c *Core) Reject(t *Ticket, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch t.state {
	case ticketQueued:
		t.q.remove(t)
		t.q = nil
		c.unqueued(t)
	case ticketNew:
	default:
		return
	}
	t.Err = err
	t.state = ticketRejected
	t.Notify(t)
}

// Close rejects every queued ticket with routing.ErrClosed.
func (c *Core) Close() {
	c.mu.Lock()
	var all []*Ticket
	for _, q := range c.queues {
		all = append(all, *q...)
	}
	c.mu.Unlock()
	for _, t := range all {
		c.Reject(t, routing.ErrClosed)
	}
}
