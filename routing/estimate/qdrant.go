package estimate

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc"
)

// QdrantConfig configures the Qdrant adapter.
type QdrantConfig struct {
	// URL is the gRPC endpoint, e.g. http://127.0.0.1:6334 (https for
	// TLS). The port defaults to 6334.
	URL string
	// Collection is the collection holding this index (one per index).
	Collection string
	// APIKey is sent when set.
	APIKey string
	// BatchSize is the number of points per upsert request (default 256).
	BatchSize int
	// Timeout bounds each request (default 10s).
	Timeout time.Duration
	// GRPCOptions are extra dial options (tests use them for in-process
	// servers).
	GRPCOptions []grpc.DialOption
}

// Validate reports whether the configuration is usable.
func (c QdrantConfig) Validate() error {
	if c.Collection == "" {
		return errors.New("qdrant: collection name required")
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("qdrant: url must look like http://host:6334, got %q", c.URL)
	}
	if c.BatchSize < 0 || c.Timeout < 0 {
		return errors.New("qdrant: batch size and timeout must be ≥ 0")
	}
	return nil
}

// Qdrant is an Index stored in a Qdrant collection: point id = row number,
// the vector, and the row's labels in the payload ({"id", "task",
// "quality": {model: q}, "output_tokens": {model: n}}) so the collection
// describes itself. Search sends all queries of a batch in one QueryBatch
// request. Safe for concurrent use.
type Qdrant struct {
	cfg    QdrantConfig
	client *qdrant.Client
	n, dim int
}

var _ Index = (*Qdrant)(nil)

// DialQdrant connects (lazily, as gRPC does) to the server of cfg.
func DialQdrant(_ context.Context, cfg QdrantConfig) (*Qdrant, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 256
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	u, _ := url.Parse(cfg.URL)
	port := 6334
	if p := u.Port(); p != "" {
		var err error
		if port, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("qdrant: bad port in %q", cfg.URL)
		}
	}
	c, err := qdrant.NewClient(&qdrant.Config{Host: u.Hostname(), Port: port, APIKey: cfg.APIKey,
		UseTLS: u.Scheme == "https", SkipCompatibilityCheck: true, PoolSize: 1, GrpcOptions: cfg.GRPCOptions})
	if err != nil {
		return nil, fmt.Errorf("qdrant: connect %s: %w", cfg.URL, err)
	}
	return &Qdrant{cfg: cfg, client: c}, nil
}

// Close releases the connection.
func (q *Qdrant) Close() error { return q.client.Close() }

// Len returns the number of points loaded or attached.
func (q *Qdrant) Len() int { return q.n }

// Attach declares that the collection already holds n points of dim
// dimensions (an index opened from disk).
func (q *Qdrant) Attach(n, dim int) { q.n, q.dim = n, dim }

// Load (re)creates the collection with cosine distance and upserts every
// row with its labels. progress, when set, gets the rows written so far.
func (q *Qdrant) Load(ctx context.Context, vecs []float32, dim int, recs []Record, progress func(done int)) error {
	if dim <= 0 || len(vecs) != len(recs)*dim {
		return fmt.Errorf("qdrant: %d floats for %d records of dim %d", len(vecs), len(recs), dim)
	}
	coll := q.cfg.Collection
	cctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	exists, err := q.client.CollectionExists(cctx, coll)
	cancel()
	if err != nil {
		return fmt.Errorf("qdrant: %w", err)
	}
	if exists {
		cctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
		err := q.client.DeleteCollection(cctx, coll)
		cancel()
		if err != nil {
			return fmt.Errorf("qdrant: replace collection: %w", err)
		}
	}
	cctx, cancel = context.WithTimeout(ctx, q.cfg.Timeout)
	err = q.client.CreateCollection(cctx, &qdrant.CreateCollection{
		CollectionName: coll,
		VectorsConfig:  qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: uint64(dim), Distance: qdrant.Distance_Cosine}),
	})
	cancel()
	if err != nil {
		return fmt.Errorf("qdrant: %w", err)
	}
	wait := true
	for i := 0; i < len(recs); i += q.cfg.BatchSize {
		end := min(i+q.cfg.BatchSize, len(recs))
		pts := make([]*qdrant.PointStruct, 0, end-i)
		for r := i; r < end; r++ {
			payload, err := qdrant.TryValueMap(recordPayload(recs[r]))
			if err != nil {
				return fmt.Errorf("qdrant: payload of %s: %w", recs[r].ID, err)
			}
			pts = append(pts, &qdrant.PointStruct{
				Id:      qdrant.NewIDNum(uint64(r)),
				Vectors: qdrant.NewVectors(vecs[r*dim : (r+1)*dim]...),
				Payload: payload,
			})
		}
		cctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
		_, err := q.client.Upsert(cctx, &qdrant.UpsertPoints{CollectionName: coll, Wait: &wait, Points: pts})
		cancel()
		if err != nil {
			return fmt.Errorf("qdrant: upsert rows %d-%d: %w", i, end-1, err)
		}
		if progress != nil {
			progress(end)
		}
	}
	q.n, q.dim = len(recs), dim
	return nil
}

// recordPayload is the payload of one point.
func recordPayload(r Record) map[string]any {
	p := map[string]any{"id": r.ID}
	if r.Task != "" {
		p["task"] = r.Task
	}
	if len(r.Scores) > 0 {
		m := make(map[string]any, len(r.Scores))
		for k, v := range r.Scores {
			m[k] = v
		}
		p["quality"] = m
	}
	if len(r.OutputTokens) > 0 {
		m := make(map[string]any, len(r.OutputTokens))
		for k, v := range r.OutputTokens {
			m[k] = v
		}
		p["output_tokens"] = m
	}
	return p
}

// Search sends one QueryBatch with a query per vector, without payloads.
func (q *Qdrant) Search(ctx context.Context, queries []float32, k int, out []Neighbor) error {
	return q.search(ctx, queries, q.dim, q.n, k, out, nil, func(p *qdrant.ScoredPoint) (int32, error) {
		id := p.GetId()
		if id == nil || id.GetUuid() != "" || id.GetNum() >= uint64(q.n) {
			return 0, fmt.Errorf("qdrant: point id %v is not a row of this index", id)
		}
		return int32(id.GetNum()), nil
	})
}

// search sends one QueryBatch of len(queries)/dim queries of n stored rows,
// each restricted to filter (nil: none), and maps every hit to its row
// with rowOf (a filter asks for the "row" payload field).
func (q *Qdrant) search(ctx context.Context, queries []float32, dim, n, k int, out []Neighbor, filter *qdrant.Filter,
	rowOf func(*qdrant.ScoredPoint) (int32, error)) error {
	if n == 0 {
		resetTop(out)
		return nil
	}
	nq, err := checkSearch(dim, queries, k, out)
	if err != nil {
		return err
	}
	limit := uint64(k)
	payload := qdrant.NewWithPayload(false)
	if filter != nil {
		payload = qdrant.NewWithPayloadInclude(rowField)
	}
	batch := make([]*qdrant.QueryPoints, nq)
	for i := range batch {
		batch[i] = &qdrant.QueryPoints{
			CollectionName: q.cfg.Collection,
			Query:          qdrant.NewQueryDense(queries[i*dim : (i+1)*dim]),
			Filter:         filter,
			Limit:          &limit,
			WithPayload:    payload,
		}
	}
	cctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	res, err := q.client.QueryBatch(cctx, &qdrant.QueryBatchPoints{CollectionName: q.cfg.Collection, QueryPoints: batch})
	if err != nil {
		return fmt.Errorf("qdrant: %w", err)
	}
	if len(res) != nq {
		return fmt.Errorf("qdrant: %d results for %d queries", len(res), nq)
	}
	resetTop(out)
	for i, r := range res {
		top := out[i*k : (i+1)*k]
		for _, p := range r.GetResult() {
			row, err := rowOf(p)
			if err != nil {
				return err
			}
			insertTop(top, Neighbor{Row: row, Sim: p.GetScore()})
		}
	}
	return nil
}
