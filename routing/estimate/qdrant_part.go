package estimate

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"

	"github.com/qdrant/go-client/qdrant"
)

// rowField is the payload field holding a point's row in its part.
const rowField = "row"

// QdrantPart is an Index over the points of a shared collection that carry
// every keyword of a key in their payload (say one cluster's upload:
// {"cluster_id": …, "upload": …}): several indexes live in one collection,
// each search is filtered to its part, and a hit's row comes from the
// point's "row" payload field. Point ids are a hash of the key and the row,
// so writing a part again (another replica, a restart) overwrites the same
// points. Safe for concurrent use.
type QdrantPart struct {
	q      *Qdrant
	keys   []string // sorted
	key    map[string]string
	filter *qdrant.Filter
	n, dim int
}

var _ Index = (*QdrantPart)(nil)

// Part returns the part of q's collection selected by key, holding n rows
// of dim dimensions (Write puts them there).
func (q *Qdrant) Part(key map[string]string, n, dim int) *QdrantPart {
	p := &QdrantPart{q: q, key: make(map[string]string, len(key)), n: n, dim: dim}
	for k, v := range key {
		p.keys = append(p.keys, k)
		p.key[k] = v
	}
	sort.Strings(p.keys)
	p.filter = matchFilter(p.key, nil)
	return p
}

// matchFilter is a filter of keyword matches: every must pair, none of the
// mustNot pairs.
func matchFilter(must, mustNot map[string]string) *qdrant.Filter {
	f := &qdrant.Filter{}
	for _, k := range keysOf(must) {
		f.Must = append(f.Must, qdrant.NewMatchKeyword(k, must[k]))
	}
	for _, k := range keysOf(mustNot) {
		f.MustNot = append(f.MustNot, qdrant.NewMatchKeyword(k, mustNot[k]))
	}
	return f
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Len returns the number of rows of the part.
func (p *QdrantPart) Len() int { return p.n }

// EnsureCollection creates the collection (cosine distance, dim
// dimensions) with a keyword payload index on each field when it does not
// exist; tenantField's index is marked as the tenant field (Qdrant keeps
// each tenant's points together). An existing collection is kept as it is.
func (q *Qdrant) EnsureCollection(ctx context.Context, dim int, fields []string, tenantField string) error {
	cctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	exists, err := q.client.CollectionExists(cctx, q.cfg.Collection)
	cancel()
	if err != nil {
		return fmt.Errorf("qdrant: %w", err)
	}
	if exists {
		return nil
	}
	cctx, cancel = context.WithTimeout(ctx, q.cfg.Timeout)
	err = q.client.CreateCollection(cctx, &qdrant.CreateCollection{
		CollectionName: q.cfg.Collection,
		VectorsConfig:  qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: uint64(dim), Distance: qdrant.Distance_Cosine}),
	})
	cancel()
	if err != nil {
		return fmt.Errorf("qdrant: create collection %s: %w", q.cfg.Collection, err)
	}
	wait := true
	for _, f := range fields {
		tenant := f == tenantField
		cctx, cancel = context.WithTimeout(ctx, q.cfg.Timeout)
		_, err = q.client.CreateFieldIndex(cctx, &qdrant.CreateFieldIndexCollection{
			CollectionName: q.cfg.Collection, Wait: &wait, FieldName: f, FieldType: qdrant.FieldType_FieldTypeKeyword.Enum(),
			FieldIndexParams: qdrant.NewPayloadIndexParamsKeyword(&qdrant.KeywordIndexParams{IsTenant: &tenant}),
		})
		cancel()
		if err != nil {
			return fmt.Errorf("qdrant: index payload field %s: %w", f, err)
		}
	}
	return nil
}

// Count returns how many points the part holds now.
func (p *QdrantPart) Count(ctx context.Context) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, p.q.cfg.Timeout)
	defer cancel()
	exact := true
	n, err := p.q.client.Count(cctx, &qdrant.CountPoints{CollectionName: p.q.cfg.Collection, Filter: p.filter, Exact: &exact})
	if err != nil {
		return 0, fmt.Errorf("qdrant: %w", err)
	}
	return int(n), nil
}

// Write upserts the part's rows: vecs row-major (len(recs)·dim), each
// point's payload the key, its row and the record's labels. len(recs) must
// be the part's n.
func (p *QdrantPart) Write(ctx context.Context, vecs []float32, recs []Record) error {
	if len(recs) != p.n || len(vecs) != p.n*p.dim {
		return fmt.Errorf("qdrant: %d records and %d floats for a part of %d rows of dim %d", len(recs), len(vecs), p.n, p.dim)
	}
	wait := true
	for i := 0; i < len(recs); i += p.q.cfg.BatchSize {
		end := min(i+p.q.cfg.BatchSize, len(recs))
		pts := make([]*qdrant.PointStruct, 0, end-i)
		for r := i; r < end; r++ {
			pl := recordPayload(recs[r])
			for k, v := range p.key {
				pl[k] = v
			}
			pl[rowField] = int64(r)
			payload, err := qdrant.TryValueMap(pl)
			if err != nil {
				return fmt.Errorf("qdrant: payload of %s: %w", recs[r].ID, err)
			}
			pts = append(pts, &qdrant.PointStruct{Id: qdrant.NewIDNum(p.pointID(r)),
				Vectors: qdrant.NewVectors(vecs[r*p.dim : (r+1)*p.dim]...), Payload: payload})
		}
		cctx, cancel := context.WithTimeout(ctx, p.q.cfg.Timeout)
		_, err := p.q.client.Upsert(cctx, &qdrant.UpsertPoints{CollectionName: p.q.cfg.Collection, Wait: &wait, Points: pts})
		cancel()
		if err != nil {
			return fmt.Errorf("qdrant: upsert rows %d-%d: %w", i, end-1, err)
		}
	}
	return nil
}

// pointID is the point id of a row: FNV-1a over the key and the row.
func (p *QdrantPart) pointID(row int) uint64 {
	h := fnv.New64a()
	for _, k := range p.keys {
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write([]byte(p.key[k]))
		h.Write([]byte{0})
	}
	h.Write(strconv.AppendInt(nil, int64(row), 10))
	return h.Sum64()
}

// DeleteMatching deletes the points carrying every must keyword and none
// of the mustNot ones (say a cluster's points of other uploads).
func (q *Qdrant) DeleteMatching(ctx context.Context, must, mustNot map[string]string) error {
	if len(must) == 0 {
		return errors.New("qdrant: refusing to delete without a must condition")
	}
	wait := true
	cctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	_, err := q.client.Delete(cctx, &qdrant.DeletePoints{CollectionName: q.cfg.Collection, Wait: &wait,
		Points: qdrant.NewPointsSelectorFilter(matchFilter(must, mustNot))})
	if err != nil {
		return fmt.Errorf("qdrant: delete: %w", err)
	}
	return nil
}

// Search sends one QueryBatch with a query per vector, filtered to the
// part.
func (p *QdrantPart) Search(ctx context.Context, queries []float32, k int, out []Neighbor) error {
	return p.q.search(ctx, queries, p.dim, p.n, k, out, p.filter, func(sp *qdrant.ScoredPoint) (int32, error) {
		return PointRow(sp.GetPayload(), p.n)
	})
}

// PointRow reads a hit's row from its payload: an integer "row" field in
// [0, n). Anything else (a point written by something else, a corrupt
// answer) is an error, never a row.
func PointRow(payload map[string]*qdrant.Value, n int) (int32, error) {
	v, ok := payload[rowField]
	if !ok {
		return 0, errors.New("qdrant: hit without a row field")
	}
	iv, ok := v.GetKind().(*qdrant.Value_IntegerValue)
	if !ok {
		return 0, fmt.Errorf("qdrant: hit's row field is not an integer: %v", v)
	}
	if iv.IntegerValue < 0 || iv.IntegerValue >= int64(n) {
		return 0, fmt.Errorf("qdrant: hit's row %d is not in [0, %d)", iv.IntegerValue, n)
	}
	return int32(iv.IntegerValue), nil
}

// BaseIndex returns the index the KNN searches over its base rows.
func (k *KNN) BaseIndex() Index { return k.index }

// SetBaseIndex replaces the index searched over the base rows (e.g. a
// Qdrant part holding the same vectors, behind a local fallback). It must
// hold the same rows, and it must be called before the KNN is shared: the
// index is read without a lock.
func (k *KNN) SetBaseIndex(idx Index) error {
	if idx.Len() != k.base {
		return fmt.Errorf("estimate: index has %d rows, the KNN %d", idx.Len(), k.base)
	}
	k.index = idx
	return nil
}
