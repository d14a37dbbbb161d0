package estimate

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/qdrant/go-client/qdrant"
	"github.com/routebalance/routebalance/routing"
	"google.golang.org/grpc"
)

// fakeQdrant is an in-process Qdrant built from the client's own generated
// service definitions: it keeps points in memory and answers QueryBatch by
// exact cosine search, so the adapter's request/response mapping is tested
// over real gRPC.
type fakeQdrant struct {
	mu           sync.Mutex
	colls        map[string]*fakeColl
	queryBatches int
	upserts      int
}

type fakeColl struct {
	dim  uint64
	dist qdrant.Distance
	pts  map[uint64]*qdrant.PointStruct
}

type fakeCollections struct {
	qdrant.UnimplementedCollectionsServer
	f *fakeQdrant
}

type fakePoints struct {
	qdrant.UnimplementedPointsServer
	f *fakeQdrant
}

func (s fakeCollections) CollectionExists(_ context.Context, r *qdrant.CollectionExistsRequest) (*qdrant.CollectionExistsResponse, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	_, ok := s.f.colls[r.GetCollectionName()]
	return &qdrant.CollectionExistsResponse{Result: &qdrant.CollectionExists{Exists: ok}}, nil
}

func (s fakeCollections) Delete(_ context.Context, r *qdrant.DeleteCollection) (*qdrant.CollectionOperationResponse, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	delete(s.f.colls, r.GetCollectionName())
	return &qdrant.CollectionOperationResponse{Result: true}, nil
}

func (s fakeCollections) Create(_ context.Context, r *qdrant.CreateCollection) (*qdrant.CollectionOperationResponse, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	p := r.GetVectorsConfig().GetParams()
	s.f.colls[r.GetCollectionName()] = &fakeColl{dim: p.GetSize(), dist: p.GetDistance(), pts: map[uint64]*qdrant.PointStruct{}}
	return &qdrant.CollectionOperationResponse{Result: true}, nil
}

func (s fakePoints) Upsert(_ context.Context, r *qdrant.UpsertPoints) (*qdrant.PointsOperationResponse, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	c, ok := s.f.colls[r.GetCollectionName()]
	if !ok {
		return nil, fmt.Errorf("no collection %q", r.GetCollectionName())
	}
	s.f.upserts++
	for _, p := range r.GetPoints() {
		if n := len(p.GetVectors().GetVector().GetDense().GetData()); uint64(n) != c.dim {
			return nil, fmt.Errorf("point %v has %d dims, collection %d", p.GetId(), n, c.dim)
		}
		c.pts[p.GetId().GetNum()] = p
	}
	return &qdrant.PointsOperationResponse{Result: &qdrant.UpdateResult{Status: qdrant.UpdateStatus_Completed}}, nil
}

func (s fakePoints) QueryBatch(_ context.Context, r *qdrant.QueryBatchPoints) (*qdrant.QueryBatchResponse, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.queryBatches++
	c, ok := s.f.colls[r.GetCollectionName()]
	if !ok {
		return nil, fmt.Errorf("no collection %q", r.GetCollectionName())
	}
	res := &qdrant.QueryBatchResponse{}
	for _, q := range r.GetQueryPoints() {
		v := q.GetQuery().GetNearest().GetDense().GetData()
		var hits []*qdrant.ScoredPoint
		for id, p := range c.pts {
			w := p.GetVectors().GetVector().GetDense().GetData()
			var dot, nv, nw float64
			for i := range v {
				dot += float64(v[i]) * float64(w[i])
				nv += float64(v[i]) * float64(v[i])
				nw += float64(w[i]) * float64(w[i])
			}
			hits = append(hits, &qdrant.ScoredPoint{Id: qdrant.NewIDNum(id), Score: float32(dot / math.Sqrt(nv*nw))})
		}
		sort.Slice(hits, func(i, j int) bool { return hits[i].Score > hits[j].Score })
		if n := int(q.GetLimit()); len(hits) > n {
			hits = hits[:n]
		}
		res.Result = append(res.Result, &qdrant.BatchResult{Result: hits})
	}
	return res, nil
}

// startFakeQdrant serves the fake on a loopback port and returns its URL.
func startFakeQdrant(t *testing.T) (*fakeQdrant, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeQdrant{colls: map[string]*fakeColl{}}
	srv := grpc.NewServer()
	qdrant.RegisterCollectionsServer(srv, fakeCollections{f: f})
	qdrant.RegisterPointsServer(srv, fakePoints{f: f})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return f, "http://" + lis.Addr().String()
}

func TestQdrantAdapterMapping(t *testing.T) {
	fake, url := startFakeQdrant(t)
	ctx := context.Background()
	recs := testRecords()
	k := buildTest(t, Config{Estimator: "knn"}, BuildOptions{})
	q, err := DialQdrant(ctx, QdrantConfig{URL: url, Collection: "test-index", BatchSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var progress []int
	if err := q.Load(ctx, k.Vectors(), k.Dim(), recs, func(d int) { progress = append(progress, d) }); err != nil {
		t.Fatal(err)
	}
	// Loading again replaces the collection instead of failing.
	if err := q.Load(ctx, k.Vectors(), k.Dim(), recs, nil); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	coll := fake.colls["test-index"]
	gotPayload := coll.pts[0].GetPayload()
	nPts, dist, upserts := len(coll.pts), coll.dist, fake.upserts
	fake.mu.Unlock()
	if nPts != len(recs) || dist != qdrant.Distance_Cosine || upserts != 2*5 {
		t.Errorf("collection: %d points, distance %v, %d upserts; want %d, Cosine, 10", nPts, dist, upserts, len(recs))
	}
	if diff := cmp.Diff([]int{16, 32, 48, 64, 80}, progress); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if got := gotPayload["id"].GetStringValue(); got != recs[0].ID {
		t.Errorf("payload id = %q, want %q", got, recs[0].ID)
	}
	if got := gotPayload["quality"].GetStructValue().GetFields()["solver"].GetDoubleValue(); got != 1 {
		t.Errorf("payload quality.solver = %v, want 1", got)
	}
	if got := gotPayload["output_tokens"].GetStructValue().GetFields()["chatter"].GetDoubleValue(); got != 180 {
		t.Errorf("payload output_tokens.chatter = %v, want 180", got)
	}

	// A KNN searching Qdrant agrees with the exact local search, and a
	// batch is one QueryBatch call.
	dir := t.TempDir()
	if err := k.Save(dir, &QdrantSpec{URL: url, Collection: "test-index"}); err != nil {
		t.Fatal(err)
	}
	kq, err := Open(dir, Config{Estimator: "knn", Qdrant: &QdrantConfig{URL: url, Collection: "test-index"}})
	if err != nil {
		t.Fatal(err)
	}
	prompts := []string{"Compute the sum of 5 and 6", "Which capital city hosted festival 3?", "unrelated words"}
	models := []string{"solver", "chatter"}
	a, b := make([]routing.PromptEstimate, 3), make([]routing.PromptEstimate, 3)
	if err := k.Estimate(ctx, prompts, models, nil, a); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	before := fake.queryBatches
	fake.mu.Unlock()
	if err := kq.Estimate(ctx, prompts, models, nil, b); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	calls := fake.queryBatches - before
	fake.mu.Unlock()
	if calls != 1 {
		t.Errorf("QueryBatch calls for one Estimate = %d, want 1", calls)
	}
	approx := cmp.Comparer(func(x, y float64) bool { return math.Abs(x-y) < 1e-4 })
	if diff := cmp.Diff(a, b, approx); diff != "" {
		t.Errorf("Qdrant-backed estimates differ from exact (-exact +qdrant):\n%s", diff)
	}
}

func TestQdrantDownIsAnError(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	q, err := DialQdrant(context.Background(), QdrantConfig{URL: "http://" + addr, Collection: "x", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	q.Attach(3, 4)
	if err := q.Search(context.Background(), make([]float32, 4), 2, make([]Neighbor, 2)); err == nil {
		t.Error("Search against a closed port: got nil error")
	}
	if err := (QdrantConfig{URL: "ftp://x", Collection: "c"}).Validate(); err == nil {
		t.Error("Validate(ftp URL) = nil, want an error")
	}
}

// TestQdrantRealServer runs the adapter against a real Qdrant when
// QDRANT_URL (gRPC, e.g. http://127.0.0.1:6334) is set.
func TestQdrantRealServer(t *testing.T) {
	url := os.Getenv("QDRANT_URL")
	if url == "" {
		t.Skip("QDRANT_URL not set: no Qdrant server on this machine; set QDRANT_URL=http://host:6334 to run against a real one")
	}
	ctx := context.Background()
	k := buildTest(t, Config{}, BuildOptions{})
	coll := fmt.Sprintf("routebalance-test-%d", time.Now().UnixNano())
	q, err := DialQdrant(ctx, QdrantConfig{URL: url, Collection: coll})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = q.client.DeleteCollection(ctx, coll)
		q.Close()
	}()
	if err := q.Load(ctx, k.Vectors(), k.Dim(), testRecords(), nil); err != nil {
		t.Fatal(err)
	}
	query := k.Vectors()[:k.Dim()]
	out := make([]Neighbor, 3)
	if err := q.Search(ctx, query, 3, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Row != 0 || math.Abs(float64(out[0].Sim)-1) > 1e-4 {
		t.Errorf("nearest to row 0 = %+v, want row 0 with similarity 1", out[0])
	}
}
