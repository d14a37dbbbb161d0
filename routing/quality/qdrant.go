package quality

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/routebalance/routebalance/routing/estimate"
)

// Payload fields of a cluster's points in the shared collection.
const (
	fieldTenant  = "tenant_id"
	fieldCluster = "cluster_id"
	fieldUpload  = "upload"
)

// DefaultQdrantCollection is the collection of a deployment's cluster
// indexes unless configured otherwise.
const DefaultQdrantCollection = "routebalance_quality"

// QdrantConfig configures the Qdrant behind the cluster indexes.
type QdrantConfig struct {
	// Client is the connection (URL, API key, collection; its Timeout
	// bounds the writes, default 10 s). The collection defaults to
	// DefaultQdrantCollection.
	Client estimate.QdrantConfig
	// QueryTimeout bounds one search on the serving path (default 50 ms):
	// past it the in-process index answers.
	QueryTimeout time.Duration
	// Breaker opens after consecutive failed searches.
	Breaker BreakerConfig
}

// QdrantStats are the counters of the serving path's Qdrant searches.
type QdrantStats struct {
	// State is the breaker's (BreakerClosed, BreakerOpen, BreakerHalfOpen);
	// Opens counts how often it opened.
	State int
	Opens int64
	// Searches were answered by Qdrant; Errors failed or timed out.
	Searches, Errors int64
	// Fallbacks are searches the in-process index answered, by reason:
	// the breaker was open, the Qdrant call failed, or the cluster's points
	// were not (or no longer) in Qdrant.
	FallbackOpen, FallbackError, FallbackMissing int64
}

// QdrantStore keeps the cluster indexes' rows in one Qdrant collection and
// searches it on the serving path, behind a circuit breaker with the
// in-process index as the fallback. Safe for concurrent use.
type QdrantStore struct {
	cfg    QdrantConfig
	client *estimate.Qdrant
	br     *Breaker
	log    *slog.Logger

	ensureMu sync.Mutex
	ensured  bool
	extra    []*estimate.Qdrant // AttachGlobal's connections

	searches, errs             atomic.Int64
	fbOpen, fbError, fbMissing atomic.Int64
}

// OpenQdrant connects (lazily: gRPC dials on first use, so a Qdrant that
// is down at start does not stop serve) to the Qdrant of cfg. now is the
// breaker's clock (nil: time.Now).
func OpenQdrant(ctx context.Context, cfg QdrantConfig, now func() time.Time, log *slog.Logger) (*QdrantStore, error) {
	if cfg.Client.Collection == "" {
		cfg.Client.Collection = DefaultQdrantCollection
	}
	if cfg.QueryTimeout <= 0 {
		cfg.QueryTimeout = 50 * time.Millisecond
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Reconnect within seconds of Qdrant coming back (gRPC's default
	// backoff grows to two minutes); the caller's options come after.
	redial := grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 5 * time.Second,
		Backoff: backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second}})
	cfg.Client.GRPCOptions = append([]grpc.DialOption{redial}, cfg.Client.GRPCOptions...)
	c, err := estimate.DialQdrant(ctx, cfg.Client)
	if err != nil {
		return nil, err
	}
	return &QdrantStore{cfg: cfg, client: c, br: NewBreaker(cfg.Breaker, "qdrant", now, log), log: log}, nil
}

// Close releases the connections.
func (q *QdrantStore) Close() error {
	for _, c := range q.extra {
		c.Close()
	}
	return q.client.Close()
}

// AttachGlobal makes an operator-wide index opened from disk (not yet
// shared) search the collection `routebalance index build --qdrant-url`
// filled for it (point id = row), through the same deadline and breaker
// as the cluster indexes, its local vectors the fallback.
func (q *QdrantStore) AttachGlobal(ctx context.Context, knn *estimate.KNN, collection string) error {
	cfg := q.cfg.Client
	cfg.Collection = collection
	c, err := estimate.DialQdrant(ctx, cfg)
	if err != nil {
		return err
	}
	c.Attach(knn.Len(), knn.Dim())
	x := &qdrantIndex{q: q, local: knn.BaseIndex(), cluster: "operator-wide index", whole: c}
	if err := knn.SetBaseIndex(x); err != nil {
		c.Close()
		return err
	}
	q.extra = append(q.extra, c)
	return nil
}

// Collection returns the collection's name.
func (q *QdrantStore) Collection() string { return q.cfg.Client.Collection }

// Stats returns the counters (telemetry reads them at scrape time).
func (q *QdrantStore) Stats() QdrantStats {
	st, opens := q.br.State()
	return QdrantStats{State: st, Opens: opens, Searches: q.searches.Load(), Errors: q.errs.Load(),
		FallbackOpen: q.fbOpen.Load(), FallbackError: q.fbError.Load(), FallbackMissing: q.fbMissing.Load()}
}

// uploadKey is the payload key of one cluster's upload.
func uploadKey(tenantID, clusterID string, at time.Time) map[string]string {
	return map[string]string{fieldTenant: tenantID, fieldCluster: clusterID, fieldUpload: at.UTC().Format(time.RFC3339Nano)}
}

// write puts a built index's rows in Qdrant (unless they are there
// already: another replica or an earlier start wrote the same upload) and
// returns its part.
func (q *QdrantStore) write(ctx context.Context, key map[string]string, knn *estimate.KNN, recs []estimate.Record) (*estimate.QdrantPart, error) {
	if err := q.ensure(ctx, knn.Dim()); err != nil {
		return nil, err
	}
	part := q.client.Part(key, len(recs), knn.Dim())
	if n, err := part.Count(ctx); err != nil {
		return nil, err
	} else if n == len(recs) {
		return part, nil
	}
	if err := part.Write(ctx, knn.Vectors(), recs); err != nil {
		return nil, err
	}
	return part, nil
}

// ensure creates the collection once.
func (q *QdrantStore) ensure(ctx context.Context, dim int) error {
	q.ensureMu.Lock()
	defer q.ensureMu.Unlock()
	if q.ensured {
		return nil
	}
	if err := q.client.EnsureCollection(ctx, dim, []string{fieldTenant, fieldCluster, fieldUpload}, fieldTenant); err != nil {
		return err
	}
	q.ensured = true
	return nil
}

// dropOthers deletes a cluster's points of every upload but keep's
// (keep nil: all of them).
func (q *QdrantStore) dropOthers(ctx context.Context, clusterID string, keep map[string]string) error {
	var not map[string]string
	if keep != nil {
		not = map[string]string{fieldUpload: keep[fieldUpload]}
	}
	return q.client.DeleteMatching(ctx, map[string]string{fieldCluster: clusterID}, not)
}

// qdrantIndex is a cluster index's base-row search: the cluster's part of
// the Qdrant collection when it is there and the breaker is closed, else
// the in-process index over the same rows.
type qdrantIndex struct {
	q       *QdrantStore
	local   estimate.Index
	cluster string
	part    atomic.Pointer[estimate.QdrantPart]
	whole   estimate.Index // instead of part: a collection of its own (the operator-wide index)
	lost    atomic.Bool
}

var _ estimate.Index = (*qdrantIndex)(nil)

func (x *qdrantIndex) Len() int { return x.local.Len() }

// errIncomplete says Qdrant answered with fewer hits than the part holds:
// its points are gone (replaced or deleted by another replica).
var errIncomplete = errors.New("qdrant: fewer hits than the cluster's rows")

// Search asks Qdrant, bounded by QueryTimeout, and falls back to the
// in-process index on any failure; only the caller's own cancellation is
// returned as an error.
func (x *qdrantIndex) Search(ctx context.Context, queries []float32, k int, out []estimate.Neighbor) error {
	var part estimate.Index = x.whole
	if p := x.part.Load(); p != nil {
		part = p
	}
	q := x.q
	switch {
	case part == nil || x.lost.Load():
		q.fbMissing.Add(1)
		return x.local.Search(ctx, queries, k, out)
	case !q.br.Allow():
		q.fbOpen.Add(1)
		return x.local.Search(ctx, queries, k, out)
	}
	qctx, cancel := context.WithTimeout(ctx, q.cfg.QueryTimeout)
	err := part.Search(qctx, queries, k, out)
	cancel()
	if err == nil && !complete(out, k, part.Len()) {
		q.br.Done(nil) // Qdrant answered; the cluster's points are what is missing
		if !x.lost.Swap(true) {
			q.log.Warn("quality: a cluster's points are gone from Qdrant; its index searches in process", slog.String("cluster", x.cluster))
		}
		q.fbMissing.Add(1)
		return x.local.Search(ctx, queries, k, out)
	}
	if err != nil && ctx.Err() != nil {
		q.br.Abandon()
		return ctx.Err()
	}
	q.br.Done(err)
	if err != nil {
		q.errs.Add(1)
		q.fbError.Add(1)
		return x.local.Search(ctx, queries, k, out)
	}
	q.searches.Add(1)
	return nil
}

// complete reports whether every query got min(k, n) hits.
func complete(out []estimate.Neighbor, k, n int) bool {
	want := min(k, n)
	for i := 0; i < len(out); i += k {
		got := 0
		for _, nb := range out[i : i+k] {
			if nb.Row >= 0 {
				got++
			}
		}
		if got < want {
			return false
		}
	}
	return true
}

// pendingWrite is a built index whose rows are not (yet) in Qdrant.
type pendingWrite struct {
	key  map[string]string
	knn  *estimate.KNN
	recs []estimate.Record
	x    *qdrantIndex
}

// attach makes a freshly built index (not yet shared) search through
// Qdrant once its rows are written there (pendingWrite.run); until then it
// searches in process. nil for an index with no base rows.
func (q *QdrantStore) attach(tenantID, clusterID string, at time.Time, knn *estimate.KNN, recs []estimate.Record) (*pendingWrite, error) {
	if knn.Len() == 0 || knn.Len() != len(recs) {
		return nil, nil
	}
	x := &qdrantIndex{q: q, local: knn.BaseIndex(), cluster: clusterID}
	if err := knn.SetBaseIndex(x); err != nil {
		return nil, err
	}
	return &pendingWrite{key: uploadKey(tenantID, clusterID, at), knn: knn, recs: recs, x: x}, nil
}

// run writes the rows (not while the breaker is open) and, once they are
// stored, turns the index's Qdrant search on.
func (w *pendingWrite) run(ctx context.Context, q *QdrantStore) error {
	if !q.br.Allow() {
		return errors.New("qdrant circuit breaker open")
	}
	part, err := q.write(ctx, w.key, w.knn, w.recs)
	if err != nil && ctx.Err() != nil {
		q.br.Abandon()
		return err
	}
	q.br.Done(err)
	if err != nil {
		return fmt.Errorf("write %d rows to qdrant: %w", len(w.recs), err)
	}
	w.x.part.Store(part)
	return nil
}
