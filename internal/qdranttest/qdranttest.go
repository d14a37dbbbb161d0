// Package qdranttest is an in-process Qdrant for tests, built from the
// official client's own generated gRPC service definitions: it keeps
// points in memory, answers QueryBatch by exact cosine search, and
// understands the part of Qdrant's filter language RouteBalance sends
// (must / must_not keyword matches). No Qdrant server can run on the
// development machines, so this is the stand-in the adapters are tested
// against over real gRPC on loopback; tests that set QDRANT_URL also run
// against a real server.
package qdranttest

import (
	"context"
	"fmt"
	"math"
	"net"
	"sort"
	"sync"
	"testing"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server is one in-process Qdrant. Its counters and collections are
// guarded by Mu.
type Server struct {
	Mu           sync.Mutex
	Colls        map[string]*Coll
	QueryBatches int
	Upserts      int
	Counts       int
	Deletes      int

	t    testing.TB
	addr string
	srv  *grpc.Server
}

// Coll is one collection.
type Coll struct {
	Dim uint64
	// Dist is the distance the collection was created with.
	Dist qdrant.Distance
	// Pts holds the points by numeric id.
	Pts map[uint64]*qdrant.PointStruct
	// Indexed lists the payload fields given an index, with whether it was
	// created as the tenant field.
	Indexed map[string]bool
}

// Start serves a fresh Server on a loopback port; it stops with the test.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{Colls: map[string]*Coll{}, t: t}
	s.serve("127.0.0.1:0")
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's gRPC URL (http://127.0.0.1:port).
func (s *Server) URL() string { return "http://" + s.addr }

func (s *Server) serve(addr string) {
	s.t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	srv := grpc.NewServer()
	qdrant.RegisterCollectionsServer(srv, collections{s: s})
	qdrant.RegisterPointsServer(srv, points{s: s})
	s.Mu.Lock()
	s.srv = srv
	s.Mu.Unlock()
	go srv.Serve(lis)
}

// Stop stops serving (connections are closed; the data is kept).
func (s *Server) Stop() {
	s.Mu.Lock()
	srv := s.srv
	s.srv = nil
	s.Mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// Restart serves again on the same address, with the data kept.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.serve(s.addr)
}

// Points returns a copy of a collection's points (nil when it does not
// exist).
func (s *Server) Points(coll string) []*qdrant.PointStruct {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	c, ok := s.Colls[coll]
	if !ok {
		return nil
	}
	out := make([]*qdrant.PointStruct, 0, len(c.Pts))
	for _, p := range c.Pts {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId().GetNum() < out[j].GetId().GetNum() })
	return out
}

type collections struct {
	qdrant.UnimplementedCollectionsServer
	s *Server
}

type points struct {
	qdrant.UnimplementedPointsServer
	s *Server
}

func (c collections) CollectionExists(_ context.Context, r *qdrant.CollectionExistsRequest) (*qdrant.CollectionExistsResponse, error) {
	c.s.Mu.Lock()
	defer c.s.Mu.Unlock()
	_, ok := c.s.Colls[r.GetCollectionName()]
	return &qdrant.CollectionExistsResponse{Result: &qdrant.CollectionExists{Exists: ok}}, nil
}

func (c collections) Delete(_ context.Context, r *qdrant.DeleteCollection) (*qdrant.CollectionOperationResponse, error) {
	c.s.Mu.Lock()
	defer c.s.Mu.Unlock()
	delete(c.s.Colls, r.GetCollectionName())
	return &qdrant.CollectionOperationResponse{Result: true}, nil
}

func (c collections) Create(_ context.Context, r *qdrant.CreateCollection) (*qdrant.CollectionOperationResponse, error) {
	c.s.Mu.Lock()
	defer c.s.Mu.Unlock()
	if _, ok := c.s.Colls[r.GetCollectionName()]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "collection %q already exists", r.GetCollectionName())
	}
	p := r.GetVectorsConfig().GetParams()
	c.s.Colls[r.GetCollectionName()] = &Coll{Dim: p.GetSize(), Dist: p.GetDistance(), Pts: map[uint64]*qdrant.PointStruct{}, Indexed: map[string]bool{}}
	return &qdrant.CollectionOperationResponse{Result: true}, nil
}

// coll returns a collection; s.Mu is held.
func (s *Server) coll(name string) (*Coll, error) {
	c, ok := s.Colls[name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no collection %q", name)
	}
	return c, nil
}

func done() *qdrant.PointsOperationResponse {
	return &qdrant.PointsOperationResponse{Result: &qdrant.UpdateResult{Status: qdrant.UpdateStatus_Completed}}
}

func (p points) CreateFieldIndex(_ context.Context, r *qdrant.CreateFieldIndexCollection) (*qdrant.PointsOperationResponse, error) {
	p.s.Mu.Lock()
	defer p.s.Mu.Unlock()
	c, err := p.s.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	c.Indexed[r.GetFieldName()] = r.GetFieldIndexParams().GetKeywordIndexParams().GetIsTenant()
	return done(), nil
}

func (p points) Upsert(_ context.Context, r *qdrant.UpsertPoints) (*qdrant.PointsOperationResponse, error) {
	p.s.Mu.Lock()
	defer p.s.Mu.Unlock()
	c, err := p.s.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	p.s.Upserts++
	for _, pt := range r.GetPoints() {
		if n := len(pt.GetVectors().GetVector().GetDense().GetData()); uint64(n) != c.Dim {
			return nil, status.Errorf(codes.InvalidArgument, "point %v has %d dims, collection %d", pt.GetId(), n, c.Dim)
		}
		if pt.GetId().GetUuid() != "" {
			return nil, status.Errorf(codes.Unimplemented, "this test server keeps numeric point ids only")
		}
		c.Pts[pt.GetId().GetNum()] = pt
	}
	return done(), nil
}

func (p points) Delete(_ context.Context, r *qdrant.DeletePoints) (*qdrant.PointsOperationResponse, error) {
	p.s.Mu.Lock()
	defer p.s.Mu.Unlock()
	c, err := p.s.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	p.s.Deletes++
	f := r.GetPoints().GetFilter()
	if f == nil {
		return nil, status.Errorf(codes.Unimplemented, "this test server deletes by filter only")
	}
	for id, pt := range c.Pts {
		ok, err := matches(f, pt.GetPayload())
		if err != nil {
			return nil, err
		}
		if ok {
			delete(c.Pts, id)
		}
	}
	return done(), nil
}

func (p points) Count(_ context.Context, r *qdrant.CountPoints) (*qdrant.CountResponse, error) {
	p.s.Mu.Lock()
	defer p.s.Mu.Unlock()
	c, err := p.s.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	p.s.Counts++
	n := 0
	for _, pt := range c.Pts {
		ok, err := matches(r.GetFilter(), pt.GetPayload())
		if err != nil {
			return nil, err
		}
		if ok {
			n++
		}
	}
	return &qdrant.CountResponse{Result: &qdrant.CountResult{Count: uint64(n)}}, nil
}

func (p points) QueryBatch(_ context.Context, r *qdrant.QueryBatchPoints) (*qdrant.QueryBatchResponse, error) {
	p.s.Mu.Lock()
	defer p.s.Mu.Unlock()
	p.s.QueryBatches++
	c, err := p.s.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	res := &qdrant.QueryBatchResponse{}
	for _, q := range r.GetQueryPoints() {
		hits, err := c.search(q)
		if err != nil {
			return nil, err
		}
		res.Result = append(res.Result, &qdrant.BatchResult{Result: hits})
	}
	return res, nil
}

// search answers one query exactly.
func (c *Coll) search(q *qdrant.QueryPoints) ([]*qdrant.ScoredPoint, error) {
	v := q.GetQuery().GetNearest().GetDense().GetData()
	if uint64(len(v)) != c.Dim {
		return nil, status.Errorf(codes.InvalidArgument, "query has %d dims, collection %d", len(v), c.Dim)
	}
	var hits []*qdrant.ScoredPoint
	var rows []int64
	for id, pt := range c.Pts {
		ok, err := matches(q.GetFilter(), pt.GetPayload())
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		w := pt.GetVectors().GetVector().GetDense().GetData()
		hits = append(hits, &qdrant.ScoredPoint{Id: qdrant.NewIDNum(id), Score: cosine(v, w),
			Payload: selectPayload(q.GetWithPayload(), pt.GetPayload())})
		rows = append(rows, rowOf(pt))
	}
	// Best first; ties go to the lower "row" payload (else the lower id),
	// as the in-process exact index breaks them, so a test can assert that
	// both answer alike. (A real Qdrant breaks ties its own way.)
	idx := make([]int, len(hits))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool {
		ha, hb := hits[idx[a]], hits[idx[b]]
		if ha.Score != hb.Score {
			return ha.Score > hb.Score
		}
		if rows[idx[a]] != rows[idx[b]] {
			return rows[idx[a]] < rows[idx[b]]
		}
		return ha.GetId().GetNum() < hb.GetId().GetNum()
	})
	sorted := make([]*qdrant.ScoredPoint, len(hits))
	for i, j := range idx {
		sorted[i] = hits[j]
	}
	hits = sorted
	if n := int(q.GetLimit()); len(hits) > n {
		hits = hits[:n]
	}
	return hits, nil
}

// cosine is the cosine similarity; vectors of unit length (to 1e-3: all
// RouteBalance stores) are taken as unit, so the score is their dot product
// and rows tied for a query stay exactly tied.
func cosine(v, w []float32) float32 {
	var dot, nv, nw float64
	for i := range v {
		dot += float64(v[i]) * float64(w[i])
		nv += float64(v[i]) * float64(v[i])
		nw += float64(w[i]) * float64(w[i])
	}
	if math.Abs(nv-1) > 1e-3 || math.Abs(nw-1) > 1e-3 {
		dot /= math.Sqrt(nv * nw)
	}
	return float32(dot)
}

// rowOf is a point's "row" payload field, else its numeric id.
func rowOf(pt *qdrant.PointStruct) int64 {
	if v, ok := pt.GetPayload()["row"]; ok {
		return v.GetIntegerValue()
	}
	return int64(pt.GetId().GetNum())
}

// selectPayload applies a WithPayload selector: none, all, or an include
// list.
func selectPayload(sel *qdrant.WithPayloadSelector, p map[string]*qdrant.Value) map[string]*qdrant.Value {
	if sel == nil {
		return nil
	}
	if inc := sel.GetInclude(); inc != nil {
		out := map[string]*qdrant.Value{}
		for _, f := range inc.GetFields() {
			if v, ok := p[f]; ok {
				out[f] = v
			}
		}
		return out
	}
	if sel.GetEnable() {
		return p
	}
	return nil
}

// matches evaluates the filter's must and must_not keyword conditions; any
// other kind of condition is an error, so a test never passes on a filter
// this server ignored.
func matches(f *qdrant.Filter, p map[string]*qdrant.Value) (bool, error) {
	if f == nil {
		return true, nil
	}
	if len(f.GetShould()) > 0 || f.GetMinShould() != nil {
		return false, status.Errorf(codes.Unimplemented, "this test server evaluates must and must_not only")
	}
	for _, c := range f.GetMust() {
		ok, err := keywordMatch(c, p)
		if err != nil || !ok {
			return false, err
		}
	}
	for _, c := range f.GetMustNot() {
		ok, err := keywordMatch(c, p)
		if err != nil || ok {
			return false, err
		}
	}
	return true, nil
}

func keywordMatch(c *qdrant.Condition, p map[string]*qdrant.Value) (bool, error) {
	fc := c.GetField()
	if fc == nil || fc.GetMatch() == nil {
		return false, status.Errorf(codes.Unimplemented, "this test server evaluates field keyword matches only, got %v", c)
	}
	kw, ok := fc.GetMatch().GetMatchValue().(*qdrant.Match_Keyword)
	if !ok {
		return false, fmt.Errorf("this test server matches keywords only, got %v", fc.GetMatch())
	}
	v, ok := p[fc.GetKey()]
	return ok && v.GetStringValue() == kw.Keyword, nil
}
