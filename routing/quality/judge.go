package quality

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/routebalance/routebalance/routing"
)

// JudgeSettings are one cluster's judge settings (PUT
// /api/v1/clusters/{id}/quality-judge).
type JudgeSettings struct {
	// Enabled turns sampling on.
	Enabled bool `json:"enabled"`
	// Model is the served model, of one of the cluster's own instances,
	// that judges.
	Model string `json:"model"`
	// SampleRate is the fraction of served answers judged, in (0,1].
	SampleRate float64 `json:"sample_rate"`
	// MonthlyBudgetUSD caps the judge's spend per calendar month (UTC);
	// no judge call starts once it is reached. Required (> 0) when
	// enabled.
	MonthlyBudgetUSD float64 `json:"monthly_budget_usd"`
}

// Validate reports settings that cannot work.
func (s JudgeSettings) Validate() error {
	if !(s.SampleRate >= 0 && s.SampleRate <= 1) {
		return &routing.FieldError{Field: "sample_rate", Msg: fmt.Sprintf("must be in [0,1], got %v", s.SampleRate)}
	}
	if !(s.MonthlyBudgetUSD >= 0) || math.IsInf(s.MonthlyBudgetUSD, 0) {
		return &routing.FieldError{Field: "monthly_budget_usd", Msg: "must be a finite number >= 0"}
	}
	if !s.Enabled {
		return nil
	}
	switch {
	case strings.TrimSpace(s.Model) == "":
		return &routing.FieldError{Field: "model", Msg: "an enabled judge needs a model (one the cluster serves)"}
	case s.SampleRate == 0:
		return &routing.FieldError{Field: "sample_rate", Msg: "an enabled judge needs a sample rate > 0"}
	case s.MonthlyBudgetUSD == 0:
		return &routing.FieldError{Field: "monthly_budget_usd", Msg: "an enabled judge needs a monthly budget > 0"}
	}
	return nil
}

// JudgeStats is what the judge did for a cluster since the process
// started (spend: this month).
type JudgeStats struct {
	// Month is the calendar month (UTC, "2006-01") SpentUSD is for.
	Month    string  `json:"month"`
	SpentUSD float64 `json:"spent_usd"`
	// Offered counts served answers offered, Sampled those drawn,
	// Dropped those sampled but not judged (queue full, over budget,
	// judge model not served), Judged those scored, Failed those whose
	// judge calls all failed or gave no valid score.
	Offered uint64 `json:"offered"`
	Sampled uint64 `json:"sampled"`
	Dropped uint64 `json:"dropped"`
	Judged  uint64 `json:"judged"`
	Failed  uint64 `json:"failed"`
	// Calls counts judge calls (retries included); Unparsed the replies
	// that held no valid score.
	Calls    uint64 `json:"calls"`
	Unparsed uint64 `json:"unparsed"`
	// Labels counts the labels learned per answering model and
	// MeanScore is their mean, in [0,1].
	Labels    map[string]int     `json:"labels"`
	MeanScore map[string]float64 `json:"mean_score"`
	// CostPerLabelUSD is SpentUSD over the labels learned this month.
	CostPerLabelUSD float64 `json:"cost_per_label_usd"`
	monthLabels     int
}

// Sample is a served answer offered to the judge. The prompt and answer
// are held in memory only (a bounded queue) until judged, never written
// to disk or logs.
type Sample struct {
	TenantID  string
	ClusterID string
	// Cluster is the tenant's cluster the judge call is routed in.
	Cluster   *routing.Cluster
	RequestID string
	// Model is the served model that answered.
	Model  string
	Prompt string
	Answer string
}

// JudgeCall is one request to the judge model.
type JudgeCall struct {
	TenantID  string
	ClusterID string
	Cluster   *routing.Cluster
	// RequestID identifies the call (the sample's id + "-judge-N").
	RequestID string
	// Model is the judge model; System and User the rubric's messages.
	Model        string
	System, User string
	// MaxTokens bounds the reply.
	MaxTokens int
}

// JudgeReply is the judge model's answer.
type JudgeReply struct {
	Text string
	// CostUSD is what the call cost the tenant (metered as judge usage).
	CostUSD float64
}

// JudgeCaller calls a cluster's judge model, routed to one of its
// instances of that model and metered to the tenant as judge usage; it
// is never offered back to the judge. Called from Judge.Run's worker;
// must honour ctx. (cmd/routebalance implements it over the dispatcher.)
type JudgeCaller interface {
	CallJudge(ctx context.Context, c JudgeCall) (JudgeReply, error)
}

// Learner takes a judged label (*Store implements it).
type Learner interface {
	ObserveClusterQuality(clusterID, prompt, model string, q float64)
}

// JudgeConfig tunes a Judge; zero fields take the defaults.
type JudgeConfig struct {
	// Queue bounds the samples waiting for the judge (default 64; a full
	// queue drops the sample).
	Queue int
	// MaxAttempts bounds the judge calls per sample (default 2: one
	// retry, after an error or a reply without a valid score).
	MaxAttempts int
	// MaxTextBytes cuts the prompt and the answer put in the rubric
	// (default 6000 bytes each).
	MaxTextBytes int
	// Timeout bounds one judge call (default 60 s).
	Timeout time.Duration
	// MaxTokens bounds the judge's reply (default 8).
	MaxTokens int
}

func (c JudgeConfig) withDefaults() JudgeConfig {
	if c.Queue <= 0 {
		c.Queue = 64
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 2
	}
	if c.MaxTextBytes <= 0 {
		c.MaxTextBytes = 6000
	}
	if c.Timeout <= 0 {
		c.Timeout = 60 * time.Second
	}
	if c.MaxTokens <= 0 {
		c.MaxTokens = 8
	}
	return c
}

// Judge samples served answers of the clusters that enabled it, has the
// cluster's judge model score them with the rubric (Rubric) and teaches
// the score to the cluster's quality data. Safe for concurrent use.
type Judge struct {
	cfg    JudgeConfig
	caller JudgeCaller
	learn  Learner
	now    func() time.Time
	log    *slog.Logger
	store  JudgeStore

	mu       sync.Mutex
	clusters map[string]*judgeState
	queue    chan Sample
	reload   chan struct{} // Changed: another replica changed settings or spend
}

type judgeState struct {
	settings JudgeSettings
	stats    JudgeStats
}

// JudgeDeps are a Judge's collaborators; Caller and Learner are required.
type JudgeDeps struct {
	Caller  JudgeCaller
	Learner Learner
	// Store keeps settings across restarts; nil keeps them in memory.
	Store JudgeStore
	// Now is the clock (time.Now); the month of the budget is UTC.
	Now func() time.Time
	Log *slog.Logger
}

// NewJudge returns a Judge; call Run to judge.
func NewJudge(cfg JudgeConfig, deps JudgeDeps) *Judge {
	cfg = cfg.withDefaults()
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	return &Judge{cfg: cfg, caller: deps.Caller, learn: deps.Learner, store: deps.Store, now: deps.Now, log: deps.Log,
		clusters: map[string]*judgeState{}, queue: make(chan Sample, cfg.Queue), reload: make(chan struct{}, 1)}
}

// Set replaces a cluster's settings (validated by the caller).
func (j *Judge) Set(clusterID string, s JudgeSettings) {
	j.mu.Lock()
	defer j.mu.Unlock()
	st := j.state(clusterID)
	st.settings = s
}

// Remove forgets a cluster (its cluster was deleted).
func (j *Judge) Remove(clusterID string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.clusters, clusterID)
}

// Settings returns a cluster's settings and statistics.
func (j *Judge) Settings(clusterID string) (JudgeSettings, JudgeStats) {
	j.mu.Lock()
	defer j.mu.Unlock()
	st, ok := j.clusters[clusterID]
	if !ok {
		return JudgeSettings{}, JudgeStats{Month: j.now().UTC().Format("2006-01"), Labels: map[string]int{}, MeanScore: map[string]float64{}}
	}
	j.rollMonth(st)
	out := st.stats
	out.Labels, out.MeanScore = cloneMap(st.stats.Labels), cloneMap(st.stats.MeanScore)
	return st.settings, out
}

// Wants is called for each served answer (never for judge calls) before
// the answer is read: it reports whether the cluster's judge samples the
// request — decided by a hash of the request id at the sample rate, and
// only while the month's spend is under budget.
func (j *Judge) Wants(clusterID, requestID string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	st, ok := j.clusters[clusterID]
	if !ok || !st.settings.Enabled {
		return false
	}
	st.stats.Offered++
	if !sampled(requestID, st.settings.SampleRate) {
		return false
	}
	st.stats.Sampled++
	j.rollMonth(st)
	if st.stats.SpentUSD >= st.settings.MonthlyBudgetUSD {
		st.stats.Dropped++
		return false
	}
	return true
}

// Offer queues a sampled answer (Wants said yes). It never blocks: a full
// queue drops the sample. The texts are copied, cut to MaxTextBytes.
func (j *Judge) Offer(s Sample) bool {
	if s.Prompt == "" || s.Answer == "" {
		return false
	}
	s.Prompt = strings.Clone(truncateUTF8(s.Prompt, j.cfg.MaxTextBytes))
	s.Answer = strings.Clone(truncateUTF8(s.Answer, j.cfg.MaxTextBytes))
	s.TenantID, s.ClusterID, s.RequestID, s.Model = strings.Clone(s.TenantID), strings.Clone(s.ClusterID), strings.Clone(s.RequestID), strings.Clone(s.Model)
	select {
	case j.queue <- s:
		return true
	default:
		j.count(s.ClusterID, func(st *JudgeStats) { st.Dropped++ })
		return false
	}
}

// JudgeStore keeps judge settings across restarts
// (routing/quality/sqlstore implements it).
type JudgeStore interface {
	SaveJudge(ctx context.Context, tenantID, clusterID string, s JudgeSettings) error
	Judges(ctx context.Context) (map[string]JudgeSettings, error)
}

// JudgeSpend is a cluster's judge totals of one month.
type JudgeSpend struct {
	SpentUSD float64
	Labels   int
}

// JudgeSpender is implemented by a JudgeStore that also keeps the monthly
// judge spend (routing/quality/sqlstore: table quality_judge_spend), so
// the budget survives restarts and counts every replica's calls.
type JudgeSpender interface {
	// AddJudgeSpend adds usd and labels to a cluster's month and returns
	// the month's totals (every replica's).
	AddJudgeSpend(ctx context.Context, tenantID, clusterID, month string, usd float64, labels int) (JudgeSpend, error)
	// JudgeSpends returns every cluster's totals of a month.
	JudgeSpends(ctx context.Context, month string) (map[string]JudgeSpend, error)
}

// Configure persists (when the Judge has a store) and applies a cluster's
// settings.
func (j *Judge) Configure(ctx context.Context, tenantID, clusterID string, s JudgeSettings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if j.store != nil {
		if err := j.store.SaveJudge(ctx, tenantID, clusterID, s); err != nil {
			return fmt.Errorf("quality: save judge settings: %w", err)
		}
	}
	j.Set(clusterID, s)
	return nil
}

// Restore applies every stored cluster's settings (at start-up).
func (j *Judge) Restore(ctx context.Context) (int, error) {
	if j.store == nil {
		return 0, nil
	}
	all, err := j.store.Judges(ctx)
	if err != nil {
		return 0, fmt.Errorf("quality: restore judge settings: %w", err)
	}
	for id, s := range all {
		j.Set(id, s)
	}
	if err := j.restoreSpend(ctx); err != nil {
		return 0, fmt.Errorf("quality: restore judge spend: %w", err)
	}
	return len(all), nil
}

// restoreSpend raises every cluster's month totals to the stored ones.
func (j *Judge) restoreSpend(ctx context.Context) error {
	sp, ok := j.store.(JudgeSpender)
	if !ok {
		return nil
	}
	month := j.now().UTC().Format("2006-01")
	spent, err := sp.JudgeSpends(ctx, month)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for id, tot := range spent {
		if st, ok := j.clusters[id]; ok {
			j.rollMonth(st)
			j.applySpend(st, month, tot)
		}
	}
	return nil
}

// persistSpend adds a call's cost or a label to the stored month and
// takes the stored totals (which include other replicas' calls) when they
// are higher than this process's count. A failed write is logged: the
// process's own count still bounds the spend.
func (j *Judge) persistSpend(ctx context.Context, s Sample, usd float64, labels int) {
	sp, ok := j.store.(JudgeSpender)
	if !ok || (usd <= 0 && labels == 0) {
		return
	}
	month := j.now().UTC().Format("2006-01")
	tot, err := sp.AddJudgeSpend(context.WithoutCancel(ctx), s.TenantID, s.ClusterID, month, usd, labels)
	if err != nil {
		j.log.WarnContext(ctx, "judge spend not stored", slog.String("cluster", s.ClusterID), slog.Any("err", err))
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if st, ok := j.clusters[s.ClusterID]; ok {
		j.rollMonth(st)
		j.applySpend(st, month, tot)
	}
}

// applySpend raises a cluster's month totals to the stored ones. j.mu is
// held and the month rolled.
func (j *Judge) applySpend(st *judgeState, month string, tot JudgeSpend) {
	if st.stats.Month != month {
		return
	}
	st.stats.SpentUSD = max(st.stats.SpentUSD, tot.SpentUSD)
	st.stats.monthLabels = max(st.stats.monthLabels, tot.Labels)
	if st.stats.monthLabels > 0 {
		st.stats.CostPerLabelUSD = st.stats.SpentUSD / float64(st.stats.monthLabels)
	}
}

// Run judges queued samples, one at a time, until ctx ends.
func (j *Judge) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case s := <-j.queue:
			j.judge(ctx, s)
		case <-j.reload:
			if err := j.refresh(ctx); err != nil && ctx.Err() == nil {
				j.log.WarnContext(ctx, "judge settings not reloaded", slog.Any("err", err))
			}
		}
	}
}

// Changed tells the judge that a tenant's stored settings may have
// changed in another replica (serve feeds it the tenant change feed);
// Run then reloads every cluster's settings and this month's spend. It
// never blocks.
func (j *Judge) Changed(string) {
	select {
	case j.reload <- struct{}{}:
	default: // a reload is already due
	}
}

// refresh applies the stored settings (dropping clusters that have none
// any more: their cluster was deleted) and the month's stored spend.
func (j *Judge) refresh(ctx context.Context) error {
	if j.store == nil {
		return nil
	}
	all, err := j.store.Judges(ctx)
	if err != nil {
		return err
	}
	j.mu.Lock()
	for id := range j.clusters {
		if _, ok := all[id]; !ok {
			delete(j.clusters, id)
		}
	}
	j.mu.Unlock()
	for id, s := range all {
		j.Set(id, s)
	}
	return j.restoreSpend(ctx)
}

// judge scores one sample with at most MaxAttempts calls.
func (j *Judge) judge(ctx context.Context, s Sample) {
	j.mu.Lock()
	st, ok := j.clusters[s.ClusterID]
	if !ok || !st.settings.Enabled {
		j.mu.Unlock()
		return
	}
	set := st.settings
	j.mu.Unlock()
	system, user := Rubric(s.Prompt, s.Answer)
	for attempt := 1; attempt <= j.cfg.MaxAttempts; attempt++ {
		if !j.withinBudget(s.ClusterID, set.MonthlyBudgetUSD) {
			j.count(s.ClusterID, func(st *JudgeStats) { st.Dropped++ })
			return
		}
		cctx, cancel := context.WithTimeout(ctx, j.cfg.Timeout)
		rep, err := j.caller.CallJudge(cctx, JudgeCall{TenantID: s.TenantID, ClusterID: s.ClusterID, Cluster: s.Cluster,
			RequestID: fmt.Sprintf("%s-judge-%d", s.RequestID, attempt), Model: set.Model, System: system, User: user, MaxTokens: j.cfg.MaxTokens})
		cancel()
		j.count(s.ClusterID, func(st *JudgeStats) { st.Calls++; st.SpentUSD += rep.CostUSD })
		j.persistSpend(ctx, s, rep.CostUSD, 0)
		if err != nil {
			// The error names the instance or the cause, never the texts.
			j.log.WarnContext(ctx, "judge call failed", slog.String("cluster", s.ClusterID), slog.String("request_id", s.RequestID), slog.Int("attempt", attempt), slog.Any("err", err))
			if ctx.Err() != nil {
				return
			}
			continue
		}
		score, err := ParseScore(rep.Text)
		if err != nil {
			j.count(s.ClusterID, func(st *JudgeStats) { st.Unparsed++ })
			j.log.WarnContext(ctx, "judge reply without a valid score", slog.String("cluster", s.ClusterID), slog.String("request_id", s.RequestID), slog.Int("attempt", attempt), slog.Int("reply_bytes", len(rep.Text)))
			continue
		}
		q := ScoreQuality(score)
		j.learn.ObserveClusterQuality(s.ClusterID, s.Prompt, s.Model, q)
		j.count(s.ClusterID, func(st *JudgeStats) {
			st.Judged++
			n := st.Labels[s.Model]
			st.MeanScore[s.Model] = (st.MeanScore[s.Model]*float64(n) + q) / float64(n+1)
			st.Labels[s.Model] = n + 1
			st.monthLabels++
			if st.monthLabels > 0 {
				st.CostPerLabelUSD = st.SpentUSD / float64(st.monthLabels)
			}
		})
		j.persistSpend(ctx, s, 0, 1)
		return
	}
	j.count(s.ClusterID, func(st *JudgeStats) { st.Failed++ })
}

func (j *Judge) withinBudget(clusterID string, budget float64) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	st, ok := j.clusters[clusterID]
	if !ok {
		return false
	}
	j.rollMonth(st)
	return st.stats.SpentUSD < budget
}

// count updates a cluster's statistics under the lock.
func (j *Judge) count(clusterID string, f func(*JudgeStats)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if st, ok := j.clusters[clusterID]; ok {
		j.rollMonth(st)
		f(&st.stats)
	}
}

// rollMonth starts a new month's spend. j.mu is held.
func (j *Judge) rollMonth(st *judgeState) {
	if m := j.now().UTC().Format("2006-01"); st.stats.Month != m {
		st.stats.Month, st.stats.SpentUSD, st.stats.monthLabels, st.stats.CostPerLabelUSD = m, 0, 0, 0
	}
}

// state returns a cluster's state, creating it. j.mu is held.
func (j *Judge) state(clusterID string) *judgeState {
	st, ok := j.clusters[clusterID]
	if !ok {
		st = &judgeState{stats: JudgeStats{Labels: map[string]int{}, MeanScore: map[string]float64{}}}
		j.clusters[strings.Clone(clusterID)] = st
	}
	return st
}

// sampled decides by a hash of the request id whether it is judged at
// rate (so retries of a request id decide alike).
func sampled(requestID string, rate float64) bool {
	if rate >= 1 {
		return true
	}
	h := fnv.New64a()
	h.Write([]byte(requestID))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return float64(x>>11)/(1<<53) < rate
}

// The rubric (G-Eval style: a criterion, evaluation steps, a form that
// asks for the score only). RubricRequestOpen … RubricAnswerClose delimit
// the texts; occurrences of the delimiters inside them are defused.
const (
	RubricSystem = "You are an impartial evaluator. You rate how well an AI assistant's answer fulfils a user's request. You reply with a single digit and nothing else."
	// RubricRequestOpen starts the request's text in the user message.
	RubricRequestOpen = "Request:\n<<<\n"
	// RubricAnswerOpen ends the request and starts the answer.
	RubricAnswerOpen = "\n>>>\n\nAnswer:\n<<<\n"
	// RubricAnswerClose ends the answer.
	RubricAnswerClose = "\n>>>\n\n"
	rubricHead        = `You will be given a user's request and an AI assistant's answer to it. Your task is to rate the answer on one metric.

Evaluation criterion:
Overall quality (1-5) - whether the answer correctly and completely fulfils the request: correctness (facts, reasoning, code, final result) first, then completeness, then clarity. A wrong answer is rated 1 or 2 however well it is written.

Evaluation steps:
1. Read the request and work out what a correct, complete answer must contain.
2. Read the answer and check each required element, and the final result, for correctness.
3. Note errors, omissions and irrelevant content.
4. Assign a score from 1 to 5: 1 wrong or unusable, 2 mostly wrong, 3 partly correct or incomplete, 4 correct with minor flaws, 5 correct, complete and clear.

`
	rubricForm = `Evaluation form (score only):
Reply with the score as a single digit from 1 to 5 and nothing else.`
)

// Rubric returns the judge's system and user messages for a request and
// its answer.
func Rubric(prompt, answer string) (system, user string) {
	defuse := strings.NewReplacer("<<<", "< < <", ">>>", "> > >")
	var b strings.Builder
	b.Grow(len(rubricHead) + len(prompt) + len(answer) + 200)
	b.WriteString(rubricHead)
	b.WriteString(RubricRequestOpen)
	b.WriteString(defuse.Replace(prompt))
	b.WriteString(RubricAnswerOpen)
	b.WriteString(defuse.Replace(answer))
	b.WriteString(RubricAnswerClose)
	b.WriteString(rubricForm)
	return RubricSystem, b.String()
}

// ErrNoScore is returned by ParseScore for a reply that is not a score.
var ErrNoScore = errors.New("quality: judge reply is not a score from 1 to 5")

// ParseScore reads the judge's reply strictly: optional white space, an
// optional "Score:" (any case), one digit 1–5, an optional ".", optional
// white space — and nothing else.
func ParseScore(reply string) (int, error) {
	if !utf8.ValidString(reply) || len(reply) > 64 {
		return 0, ErrNoScore
	}
	s := strings.TrimSpace(reply)
	if len(s) >= 6 && strings.EqualFold(s[:6], "score:") {
		s = strings.TrimLeft(s[6:], " \t")
	}
	s = strings.TrimSuffix(s, ".")
	if len(s) != 1 || s[0] < '1' || s[0] > '5' {
		return 0, ErrNoScore
	}
	return int(s[0] - '0'), nil
}

// ScoreQuality maps a judge score 1–5 onto quality in [0,1]: (s − 1)/4.
func ScoreQuality(score int) float64 { return float64(score-1) / 4 }
