// Package quality keeps each cluster's own quality knowledge: an index
// built in the background from labels the tenant uploaded, taught online
// by feedback, and the estimator that puts it in front of the
// operator-wide index and the instances' priors. See README.md.
package quality

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/estimate"
)

// ErrNotFound is returned for a cluster that has no quality data.
var ErrNotFound = errors.New("quality: no quality data for this cluster")

// Status values of a cluster's quality data.
const (
	StateNone     = "none"     // nothing uploaded
	StateBuilding = "building" // an upload is being indexed
	StateReady    = "ready"    // the index serves estimates
	StateFailed   = "failed"   // the last build failed (Status.Error)
)

// Config tunes a Store. The zero value is usable.
type Config struct {
	// Limits bound one upload.
	Limits Limits
	// HoldOut is the fraction of an upload held back to measure the
	// validation AUC (default 0.1; records are assigned by a hash of their
	// id, so a re-upload holds back the same ones). The held-back records
	// are not in the served index.
	HoldOut float64
	// MinHoldOut is the fewest held-back records for which an AUC is
	// reported (default 20; fewer: no hold-out, every record is indexed).
	MinHoldOut int
	// HeadRecords is the fewest training records for which the learned
	// head is trained (default 200); smaller uploads use the KNN.
	HeadRecords int
	// OnlineLabels is how many recent online labels (feedback) of a
	// cluster are kept in memory to re-teach a rebuilt index (default 512).
	OnlineLabels int
	// OnlinePromptBytes caps the prompt bytes kept per online label
	// (default 4096).
	OnlinePromptBytes int
	// HistoryEvery is how often each cluster's mean Q̂ per model is
	// recorded for Status.History (default 30 s; also right after a
	// build); HistoryPoints bounds the points kept (default 360: 3 h).
	HistoryEvery  time.Duration
	HistoryPoints int
	// ProbePrompts is how many prompts of a cluster (a sample of the
	// upload, then the latest online labels') the mean Q̂ is taken over
	// (default 128; in memory only).
	ProbePrompts int
	// DefaultOutputTokens is the output length predicted for a cluster
	// with no index when there is no operator-wide estimator either
	// (default 256, the scheduler's default).
	DefaultOutputTokens float64
}

func (c Config) withDefaults() Config {
	c.Limits = c.Limits.withDefaults()
	if c.HoldOut <= 0 {
		c.HoldOut = 0.1
	}
	if c.MinHoldOut <= 0 {
		c.MinHoldOut = 20
	}
	if c.HeadRecords <= 0 {
		c.HeadRecords = 200
	}
	if c.OnlineLabels <= 0 {
		c.OnlineLabels = 512
	}
	if c.OnlinePromptBytes <= 0 {
		c.OnlinePromptBytes = 4096
	}
	if c.DefaultOutputTokens <= 0 {
		c.DefaultOutputTokens = 256
	}
	if c.HistoryEvery <= 0 {
		c.HistoryEvery = 30 * time.Second
	}
	if c.HistoryPoints <= 0 {
		c.HistoryPoints = 360
	}
	if c.ProbePrompts <= 0 {
		c.ProbePrompts = 128
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.HoldOut < 0 || c.HoldOut >= 1 || math.IsNaN(c.HoldOut) {
		return fmt.Errorf("quality: hold-out fraction must be in [0,1), got %v", c.HoldOut)
	}
	if c.MinHoldOut < 0 || c.HeadRecords < 0 || c.OnlineLabels < 0 || c.OnlinePromptBytes < 0 || c.DefaultOutputTokens < 0 {
		return errors.New("quality: counts must be >= 0")
	}
	return nil
}

// Estimator is the operator-wide estimator a Store falls back to
// ((*estimate.KNN) implements it); see schedule.Estimator for the contract.
type Estimator interface {
	Estimate(ctx context.Context, prompts []string, models []string, priors []float64, out []routing.PromptEstimate) error
}

// Saved is one cluster's persisted upload.
type Saved struct {
	TenantID   string
	ClusterID  string
	UploadedAt time.Time
	// Records is the number of records in Data.
	Records int
	// Meta is the upload report (unknown models), JSON.
	Meta []byte
	// Data is the valid records as gzip-compressed JSON lines.
	Data []byte
}

// Persister keeps uploads across restarts. Implementations are safe for
// concurrent use; Save replaces a cluster's upload, Delete of a missing
// one is not an error. (routing/quality/sqlstore implements it over
// Postgres and SQLite.)
type Persister interface {
	Save(ctx context.Context, s Saved) error
	Delete(ctx context.Context, clusterID string) error
	All(ctx context.Context) ([]Saved, error)
}

// Status is what GET /api/v1/clusters/{id}/quality-data reports.
type Status struct {
	ClusterID string `json:"cluster_id"`
	// State is none, building, ready or failed.
	State string `json:"status"`
	// Records is the number of valid uploaded records; Indexed of them
	// are in the served index, HeldOut were held back for validation.
	Records int `json:"records"`
	Indexed int `json:"indexed"`
	HeldOut int `json:"held_out"`
	// Models counts the uploaded labels per model.
	Models map[string]int `json:"models"`
	// Unknown counts the lines that scored models the cluster does not
	// serve (their scores were dropped).
	Unknown map[string]int `json:"unknown_models"`
	// Estimator is "head" or "knn".
	Estimator  string     `json:"estimator,omitempty"`
	UploadedAt *time.Time `json:"uploaded_at"`
	BuiltAt    *time.Time `json:"built_at"`
	// BuildSeconds is how long the last build took.
	BuildSeconds float64 `json:"build_seconds,omitempty"`
	// ValidationAUC is the mean per-model AUC of the index's Q̂ on the
	// held-back records (null when fewer than Config.MinHoldOut or no
	// model had both outcomes); ModelAUC is per model.
	ValidationAUC *float64           `json:"validation_auc"`
	ModelAUC      map[string]float64 `json:"model_auc"`
	// OnlineLabels counts, per model, the labels learned online
	// (feedback) since the process started.
	OnlineLabels map[string]int `json:"online_labels"`
	Error        string         `json:"error,omitempty"`
	// Qdrant is "stored" when the index's rows are in Qdrant and its
	// searches go there, "pending" when writing them failed (QdrantError;
	// retried every Config.HistoryEvery; searches stay in process), empty
	// without Qdrant or without uploaded rows.
	Qdrant      string `json:"qdrant,omitempty"`
	QdrantError string `json:"qdrant_error,omitempty"`
	// History is the mean Q̂ per model of the cluster's index over its
	// probe prompts, every Config.HistoryEvery, oldest first.
	History []HistoryPoint `json:"history"`
}

// HistoryPoint is the cluster index's mean Q̂ per model at a time (models
// the index knows only).
type HistoryPoint struct {
	At    time.Time          `json:"at"`
	MeanQ map[string]float64 `json:"mean_q"`
}

// entry is one cluster's state; mu guards everything but idx.
type entry struct {
	idx atomic.Pointer[estimate.KNN]

	mu       sync.Mutex
	gen      uint64
	tenantID string
	status   Status
	online   []onlineLabel // ring of recent online labels
	next     int
	probe    []string // prompts the history's mean Q̂ is taken over (ring)
	probeAt  int
	history  []HistoryPoint
	qpend    *pendingWrite // rows not yet in Qdrant
}

// addProbe puts a prompt in the probe ring. e.mu is held.
func (e *entry) addProbe(p string, n int) {
	if len(e.probe) < n {
		e.probe = append(e.probe, p)
		return
	}
	e.probe[e.probeAt] = p
	e.probeAt = (e.probeAt + 1) % n
}

type onlineLabel struct {
	prompt, model string
	q             float64
}

type job struct {
	e                   *entry
	gen                 uint64
	tenantID, clusterID string
	recs                []estimate.Record
	uploadedAt          time.Time
}

// Store holds every cluster's quality data. Uploads are indexed by Run's
// worker, one at a time. All methods are safe for concurrent use.
type Store struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	persist Persister
	global  Estimator
	qdrant  *QdrantStore

	mu       sync.RWMutex
	clusters map[string]*entry
	jobs     chan job
	syncs    chan string // tenants whose uploads another replica changed (sync.go)
}

// Deps are a Store's collaborators; all optional.
type Deps struct {
	Log *slog.Logger
	// Now is the clock (time.Now).
	Now func() time.Time
	// Persist keeps uploads across restarts; nil keeps them in memory.
	Persist Persister
	// Global is the operator-wide estimator used for the models a
	// cluster's index lacks.
	Global Estimator
	// Qdrant, when set, stores every cluster index's rows and answers
	// their neighbour searches (qdrant.go).
	Qdrant *QdrantStore
}

// New returns a Store; call Run to index uploads.
func New(cfg Config, deps Deps) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	return &Store{cfg: cfg.withDefaults(), log: deps.Log, now: deps.Now, persist: deps.Persist, global: deps.Global, qdrant: deps.Qdrant,
		clusters: map[string]*entry{}, jobs: make(chan job, 64), syncs: make(chan string, 64)}, nil
}

// Limits returns the upload limits in force.
func (s *Store) Limits() Limits { return s.cfg.Limits }

// Run indexes queued uploads until ctx ends.
func (s *Store) Run(ctx context.Context) error {
	tick := time.NewTicker(s.cfg.HistoryEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case j := <-s.jobs:
			if s.runJob(ctx, j) {
				s.snapshot(ctx, j.e)
			}
		case <-tick.C:
			s.mu.RLock()
			all := make([]*entry, 0, len(s.clusters))
			for _, e := range s.clusters {
				all = append(all, e)
			}
			s.mu.RUnlock()
			for _, e := range all {
				s.retryQdrant(ctx, e)
				s.snapshot(ctx, e)
			}
		}
	}
}

// snapshot records the mean Q̂ per model of a cluster's index over its
// probe prompts.
func (s *Store) snapshot(ctx context.Context, e *entry) {
	e.mu.Lock()
	idx := e.idx.Load()
	probes := append([]string(nil), e.probe...)
	e.mu.Unlock()
	if idx == nil || len(probes) == 0 {
		return
	}
	models := idx.Models()
	sum := make([]float64, len(models))
	n := make([]float64, len(models))
	out := make([]routing.PromptEstimate, 64)
	for i := 0; i < len(probes); i += 64 {
		part := probes[i:min(i+64, len(probes))]
		if err := idx.Estimate(ctx, part, models, nil, out[:len(part)]); err != nil {
			s.log.WarnContext(ctx, "quality history: estimate failed", slog.Any("err", err))
			return
		}
		for j := range part {
			for m := range models {
				if out[j].Source[m] == routing.SourceIndex {
					sum[m] += out[j].Quality[m]
					n[m]++
				}
			}
		}
	}
	pt := HistoryPoint{At: s.now().UTC().Truncate(time.Second), MeanQ: map[string]float64{}}
	for m, name := range models {
		if n[m] > 0 {
			pt.MeanQ[name] = sum[m] / n[m]
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.idx.Load() != idx {
		return // replaced or deleted meanwhile
	}
	e.history = append(e.history, pt)
	if over := len(e.history) - s.cfg.HistoryPoints; over > 0 {
		e.history = append(e.history[:0], e.history[over:]...)
	}
}

// Restore reads every persisted upload and queues it for indexing (the
// clusters report "building" until done). Call before serving.
func (s *Store) Restore(ctx context.Context) (int, error) {
	if s.persist == nil {
		return 0, nil
	}
	all, err := s.persist.All(ctx)
	if err != nil {
		return 0, fmt.Errorf("quality: restore: %w", err)
	}
	n := 0
	for _, sv := range all {
		if err := s.restoreOne(ctx, sv); err != nil {
			if ctx.Err() != nil {
				return n, err
			}
			s.log.ErrorContext(ctx, "quality data unreadable; skipped", slog.String("cluster", sv.ClusterID), slog.Any("err", err))
			continue
		}
		n++
	}
	return n, nil
}

// restoreOne queues a persisted upload for indexing.
func (s *Store) restoreOne(ctx context.Context, sv Saved) error {
	recs, err := decodeRecords(sv.Data)
	if err != nil {
		return err
	}
	var meta struct {
		Unknown map[string]int `json:"unknown_models"`
	}
	_ = json.Unmarshal(sv.Meta, &meta)
	return s.start(ctx, sv.TenantID, sv.ClusterID, recs, meta.Unknown, sv.UploadedAt)
}

// Upload validates an upload for a cluster serving models and, when at
// least one line is valid and none is bad, persists it and queues it for
// indexing, replacing the cluster's previous data. Bad lines leave the
// current data alone: the caller reports Parsed.Errors. The error is
// ErrTooLarge, a read error or a persistence error.
func (s *Store) Upload(ctx context.Context, tenantID, clusterID string, models []string, body io.Reader) (Parsed, error) {
	served := make(map[string]bool, len(models))
	for _, m := range models {
		served[m] = true
	}
	p, err := ParseUpload(body, func(m string) bool { return served[m] }, s.cfg.Limits)
	if err != nil || p.ErrorCount > 0 || len(p.Records) == 0 {
		return p, err
	}
	at := s.now().UTC().Truncate(time.Millisecond)
	if s.persist != nil {
		data, err := encodeRecords(p.Records)
		if err != nil {
			return p, err
		}
		meta, _ := json.Marshal(map[string]any{"unknown_models": p.Unknown, "lines": p.Lines})
		if err := s.persist.Save(ctx, Saved{TenantID: tenantID, ClusterID: clusterID, UploadedAt: at, Records: len(p.Records), Meta: meta, Data: data}); err != nil {
			return p, fmt.Errorf("quality: save upload: %w", err)
		}
	}
	return p, s.start(ctx, tenantID, clusterID, p.Records, p.Unknown, at)
}

// start replaces a cluster's status with "building" and queues the build.
func (s *Store) start(ctx context.Context, tenantID, clusterID string, recs []estimate.Record, unknown map[string]int, at time.Time) error {
	e := s.entry(clusterID, true)
	e.mu.Lock()
	e.gen++
	e.tenantID = strings.Clone(tenantID)
	online := e.status.OnlineLabels
	e.status = Status{ClusterID: e.status.ClusterID, State: StateBuilding, Records: len(recs), Models: labelCounts(recs),
		Unknown: unknown, UploadedAt: &at, OnlineLabels: online}
	j := job{e: e, gen: e.gen, tenantID: e.tenantID, clusterID: e.status.ClusterID, recs: recs, uploadedAt: at}
	e.mu.Unlock()
	select {
	case s.jobs <- j:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Delete removes a cluster's uploaded data and its index (online labels
// too). ErrNotFound when it has none.
func (s *Store) Delete(ctx context.Context, clusterID string) error {
	ok := s.forget(clusterID)
	if s.persist != nil {
		if err := s.persist.Delete(ctx, clusterID); err != nil {
			return fmt.Errorf("quality: delete: %w", err)
		}
	}
	if !ok {
		return ErrNotFound
	}
	if s.qdrant != nil {
		if err := s.qdrant.dropOthers(ctx, clusterID, nil); err != nil {
			// Never served again: searches are filtered to an upload.
			s.log.WarnContext(ctx, "quality: deleting a cluster's points from Qdrant failed", slog.String("cluster", clusterID), slog.Any("err", err))
		}
	}
	return nil
}

// forget drops a cluster's entry (its index, online labels and any
// running build's result) from memory; false when it had none.
func (s *Store) forget(clusterID string) bool {
	s.mu.Lock()
	e, ok := s.clusters[clusterID]
	delete(s.clusters, clusterID)
	s.mu.Unlock()
	if !ok {
		return false
	}
	e.mu.Lock()
	e.gen++ // a running build's result is dropped
	e.qpend = nil
	e.mu.Unlock()
	e.idx.Store(nil)
	return true
}

// Status reports a cluster's quality data (State "none" when it has none).
func (s *Store) Status(clusterID string) Status {
	e := s.entry(clusterID, false)
	if e == nil {
		return Status{ClusterID: clusterID, State: StateNone, Models: map[string]int{}, Unknown: map[string]int{}, ModelAUC: map[string]float64{}, OnlineLabels: map[string]int{}, History: []HistoryPoint{}}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.status
	if st.State == "" {
		st.State = StateNone
	}
	st.Models = cloneMap(st.Models)
	st.Unknown = cloneMap(st.Unknown)
	st.ModelAUC = cloneMap(st.ModelAUC)
	st.OnlineLabels = cloneMap(st.OnlineLabels)
	st.History = append([]HistoryPoint{}, e.history...)
	return st
}

// ObserveClusterQuality teaches a cluster's index that model scored q on
// prompt (a client's feedback). A cluster without an upload gets an empty
// index that learns online. The label is kept in memory (bounded by
// Config.OnlineLabels) so a later rebuild learns it again; it is never
// persisted.
func (s *Store) ObserveClusterQuality(clusterID, prompt, model string, q float64) {
	if !(q >= 0 && q <= 1) || prompt == "" || model == "" {
		return
	}
	e := s.entry(clusterID, true)
	if len(prompt) > s.cfg.OnlinePromptBytes {
		prompt = truncateUTF8(prompt, s.cfg.OnlinePromptBytes)
	}
	prompt, model = strings.Clone(prompt), strings.Clone(model)
	e.mu.Lock()
	idx := e.idx.Load()
	if idx == nil {
		var err error
		if idx, err = emptyIndex(); err != nil {
			e.mu.Unlock()
			s.log.Error("quality: cannot create an online index", slog.String("cluster", clusterID), slog.Any("err", err))
			return
		}
		e.idx.Store(idx)
		if e.status.State == "" || e.status.State == StateNone {
			e.status.State = StateReady
			e.status.Estimator = idx.Mode()
		}
	}
	if len(e.online) < s.cfg.OnlineLabels {
		e.online = append(e.online, onlineLabel{prompt: prompt, model: model, q: q})
	} else {
		e.online[e.next] = onlineLabel{prompt: prompt, model: model, q: q}
		e.next = (e.next + 1) % len(e.online)
	}
	if e.status.OnlineLabels == nil {
		e.status.OnlineLabels = map[string]int{}
	}
	e.status.OnlineLabels[model]++
	e.addProbe(prompt, s.cfg.ProbePrompts)
	e.mu.Unlock()
	idx.ObserveQuality(prompt, model, q)
}

// ObserveQuality passes a score without a cluster to the operator-wide
// estimator when it learns (api.QualityObserver).
func (s *Store) ObserveQuality(prompt, model string, q float64) {
	if o, ok := s.global.(interface {
		ObserveQuality(prompt, model string, q float64)
	}); ok {
		o.ObserveQuality(prompt, model, q)
	}
}

// Index returns a cluster's current index, or nil.
func (s *Store) Index(clusterID string) *estimate.KNN {
	if e := s.entry(clusterID, false); e != nil {
		return e.idx.Load()
	}
	return nil
}

func (s *Store) entry(clusterID string, create bool) *entry {
	s.mu.RLock()
	e := s.clusters[clusterID]
	s.mu.RUnlock()
	if e != nil || !create {
		return e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e = s.clusters[clusterID]; e == nil {
		clusterID = strings.Clone(clusterID) // callers may pass request-scoped bytes (fiber)
		e = &entry{status: Status{ClusterID: clusterID, State: StateNone}}
		s.clusters[clusterID] = e
	}
	return e
}

// runJob builds one upload's index (and writes its rows to Qdrant) and
// swaps it in unless a newer upload or a delete superseded it.
func (s *Store) runJob(ctx context.Context, j job) bool {
	start := s.now()
	res, err := s.build(ctx, j.recs)
	var pw *pendingWrite
	var qerr error
	if err == nil && s.qdrant != nil {
		if pw, err = s.qdrant.attach(j.tenantID, j.clusterID, j.uploadedAt, res.knn, res.train); err == nil && pw != nil {
			qerr = pw.run(ctx, s.qdrant)
		}
	}
	took := s.now().Sub(start)
	if !s.swapIn(ctx, j, res, err, took) {
		return false
	}
	if pw != nil {
		s.qdrantWritten(ctx, j.e, pw, qerr)
	}
	return true
}

// swapIn publishes a build's result (or failure) unless superseded.
func (s *Store) swapIn(ctx context.Context, j job, res buildResult, err error, took time.Duration) bool {
	j.e.mu.Lock()
	defer j.e.mu.Unlock()
	if j.e.gen != j.gen {
		return false
	}
	st := &j.e.status
	st.Qdrant, st.QdrantError, j.e.qpend = "", "", nil
	if err != nil {
		st.State, st.Error = StateFailed, err.Error()
		s.log.ErrorContext(ctx, "quality index build failed", slog.String("cluster", st.ClusterID), slog.Any("err", err))
		return false
	}
	for _, l := range j.e.online {
		res.knn.ObserveQuality(l.prompt, l.model, l.q)
	}
	j.e.idx.Store(res.knn)
	// Probe prompts: an even sample of the upload, then the online labels'.
	j.e.probe, j.e.probeAt = j.e.probe[:0], 0
	step := max(1, len(j.recs)/s.cfg.ProbePrompts)
	for i := 0; i < len(j.recs) && len(j.e.probe) < s.cfg.ProbePrompts; i += step {
		j.e.probe = append(j.e.probe, j.recs[i].Prompt)
	}
	for _, l := range j.e.online {
		j.e.addProbe(l.prompt, s.cfg.ProbePrompts)
	}
	built := s.now().UTC().Truncate(time.Millisecond)
	st.State, st.Error, st.BuiltAt, st.BuildSeconds = StateReady, "", &built, took.Seconds()
	st.Indexed, st.HeldOut, st.Estimator = res.indexed, res.heldOut, res.knn.Mode()
	st.ModelAUC, st.ValidationAUC = res.auc, res.meanAUC
	s.log.InfoContext(ctx, "quality index built", slog.String("cluster", st.ClusterID), slog.Int("records", res.indexed),
		slog.Int("held_out", res.heldOut), slog.String("estimator", st.Estimator), slog.Duration("took", took))
	return true
}

// qdrantWritten records the outcome of writing a served index's rows to
// Qdrant; once they are stored, the cluster's points of older uploads go.
func (s *Store) qdrantWritten(ctx context.Context, e *entry, pw *pendingWrite, err error) {
	e.mu.Lock()
	if e.idx.Load() != pw.knn {
		e.mu.Unlock()
		return // replaced or deleted meanwhile
	}
	cluster := e.status.ClusterID
	e.qpend = nil
	e.status.Qdrant, e.status.QdrantError = "stored", ""
	if err != nil {
		e.qpend = pw
		e.status.Qdrant, e.status.QdrantError = "pending", err.Error()
	}
	e.mu.Unlock()
	if err != nil {
		s.log.WarnContext(ctx, "quality: cluster index not in Qdrant yet; it searches in process", slog.String("cluster", cluster), slog.Any("err", err))
		return
	}
	if err := s.qdrant.dropOthers(ctx, cluster, pw.key); err != nil {
		s.log.WarnContext(ctx, "quality: deleting a cluster's older points from Qdrant failed", slog.String("cluster", cluster), slog.Any("err", err))
	}
}

// retryQdrant writes a cluster index's rows to Qdrant if an earlier
// write failed.
func (s *Store) retryQdrant(ctx context.Context, e *entry) {
	e.mu.Lock()
	pw := e.qpend
	e.mu.Unlock()
	if pw == nil {
		return
	}
	s.qdrantWritten(ctx, e, pw, pw.run(ctx, s.qdrant))
}

type buildResult struct {
	knn              *estimate.KNN
	train            []estimate.Record // the indexed records, row order
	indexed, heldOut int
	auc              map[string]float64
	meanAUC          *float64
}

// build splits the records into index and hold-out, builds the index and
// measures its AUC on the hold-out.
func (s *Store) build(ctx context.Context, recs []estimate.Record) (buildResult, error) {
	train, held := split(recs, s.cfg.HoldOut)
	if len(held) < s.cfg.MinHoldOut {
		train, held = recs, nil
	}
	emb, err := estimate.NewBuiltin(estimate.DefaultBuiltinConfig())
	if err != nil {
		return buildResult{}, err
	}
	knn, err := estimate.Build(ctx, train, estimate.Config{}, estimate.BuildOptions{Embedder: emb, NoHead: len(train) < s.cfg.HeadRecords})
	if err != nil {
		return buildResult{}, err
	}
	res := buildResult{knn: knn, train: train, indexed: len(train), heldOut: len(held), auc: map[string]float64{}}
	if len(held) == 0 {
		return res, nil
	}
	models := knn.Models()
	scores := make([][]float64, len(models))
	labels := make([][]float64, len(models))
	const batch = 64
	out := make([]routing.PromptEstimate, batch)
	prompts := make([]string, 0, batch)
	for i := 0; i < len(held); i += batch {
		part := held[i:min(i+batch, len(held))]
		prompts = prompts[:0]
		for _, r := range part {
			prompts = append(prompts, r.Prompt)
		}
		if err := knn.Estimate(ctx, prompts, models, nil, out[:len(part)]); err != nil {
			return buildResult{}, fmt.Errorf("validate: %w", err)
		}
		for j, r := range part {
			for m, name := range models {
				if q, ok := r.Scores[name]; ok {
					scores[m] = append(scores[m], out[j].Quality[m])
					labels[m] = append(labels[m], q)
				}
			}
		}
	}
	var sum float64
	var n int
	for m, name := range models {
		if a := estimate.AUC(scores[m], labels[m]); !math.IsNaN(a) {
			res.auc[name] = a
			sum += a
			n++
		}
	}
	if n > 0 {
		mean := sum / float64(n)
		res.meanAUC = &mean
	}
	return res, nil
}

// split assigns each record to the hold-out with probability frac by a
// hash of its id (or prompt), so the split is reproducible.
func split(recs []estimate.Record, frac float64) (train, held []estimate.Record) {
	cut := uint64(frac * (1 << 32))
	for _, r := range recs {
		h := fnv.New64a()
		key := r.ID
		if key == "" {
			key = r.Prompt
		}
		h.Write([]byte(key))
		x := h.Sum64() // FNV's low bits mix poorly: finalise (murmur3's fmix64)
		x ^= x >> 33
		x *= 0xff51afd7ed558ccd
		x ^= x >> 33
		if x>>32 < cut {
			held = append(held, r)
		} else {
			train = append(train, r)
		}
	}
	return train, held
}

// emptyIndex is a KNN with no rows that learns online.
func emptyIndex() (*estimate.KNN, error) {
	emb, err := estimate.NewBuiltin(estimate.DefaultBuiltinConfig())
	if err != nil {
		return nil, err
	}
	return estimate.Build(context.Background(), nil, estimate.Config{K: 10, SimPower: 4}, estimate.BuildOptions{Embedder: emb, NoHead: true})
}

func labelCounts(recs []estimate.Record) map[string]int {
	out := map[string]int{}
	for _, r := range recs {
		for m := range r.Scores {
			out[m]++
		}
	}
	return out
}

func cloneMap[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// encodeRecords writes records as gzip-compressed JSON lines.
func encodeRecords(recs []estimate.Record) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	enc := json.NewEncoder(zw)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func decodeRecords(data []byte) ([]estimate.Record, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	return estimate.ReadRecords(zr)
}
