package estimate

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"

	"github.com/coder/hnsw"
	"github.com/viterin/vek/vek32"
)

// HNSWConfig configures the approximate index.
type HNSWConfig struct {
	// Enabled builds the graph at index-build time.
	Enabled bool
	// M is the maximum number of neighbours per node (default 16).
	M int
	// EfSearch is the candidate list size during search; every search
	// asks the graph for max(k, EfSearch) nodes and keeps the k most
	// similar (default 64).
	EfSearch int
	// Seed makes level assignment reproducible (default 1).
	Seed int64
}

func (c HNSWConfig) withDefaults() HNSWConfig {
	if c.M == 0 {
		c.M = 16
	}
	if c.EfSearch == 0 {
		c.EfSearch = 64
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return c
}

// Validate reports whether the configuration is usable.
func (c HNSWConfig) Validate() error {
	c = c.withDefaults()
	if c.M < 2 || c.M > 256 || c.EfSearch < 1 || c.EfSearch > 10000 {
		return fmt.Errorf("hnsw: m must be in [2, 256] and ef_search in [1, 10000], got %d and %d", c.M, c.EfSearch)
	}
	return nil
}

// HNSW is an approximate cosine index on github.com/coder/hnsw. Node keys
// are row numbers of the Flat index it was built from. Safe for concurrent
// searches; it is never modified after construction.
type HNSW struct {
	g   *hnsw.Graph[int32]
	dim int
	ef  int
}

var _ Index = (*HNSW)(nil)

// NewHNSW inserts every row of flat into a new graph.
func NewHNSW(flat *Flat, cfg HNSWConfig) (*HNSW, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	g := hnsw.NewGraph[int32]()
	g.M, g.EfSearch, g.Distance = cfg.M, cfg.EfSearch, hnsw.CosineDistance
	g.Rng = rand.New(rand.NewSource(cfg.Seed))
	d := flat.Dim()
	v := flat.Vectors()
	for r := 0; r < flat.Len(); r++ {
		g.Add(hnsw.MakeNode(int32(r), v[r*d:(r+1)*d:(r+1)*d]))
	}
	return &HNSW{g: g, dim: d, ef: cfg.EfSearch}, nil
}

// Len returns the number of nodes.
func (h *HNSW) Len() int { return h.g.Len() }

// Search walks the graph for every query.
func (h *HNSW) Search(ctx context.Context, queries []float32, k int, out []Neighbor) error {
	nq, err := checkSearch(h.dim, queries, k, out)
	if err != nil {
		return err
	}
	if h.g.Len() == 0 {
		resetTop(out)
		return nil
	}
	for q := 0; q < nq; q++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		qv := queries[q*h.dim : (q+1)*h.dim]
		top := out[q*k : (q+1)*k]
		resetTop(top)
		for _, n := range h.g.Search(qv, max(k, h.ef)) {
			insertTop(top, Neighbor{Row: n.Key, Sim: vek32.Dot(qv, n.Value)})
		}
	}
	return nil
}

// insertTop puts n into the best-first list top if it beats the worst.
func insertTop(top []Neighbor, n Neighbor) {
	k := len(top)
	if top[k-1].Row >= 0 && n.Sim <= top[k-1].Sim {
		return
	}
	i := k - 1
	for i > 0 && (top[i-1].Row < 0 || top[i-1].Sim < n.Sim) {
		top[i] = top[i-1]
		i--
	}
	top[i] = n
}

// Export writes the graph in coder/hnsw's own encoding.
func (h *HNSW) Export(w io.Writer) error { return h.g.Export(w) }

// loadOrBuildHNSW imports a saved graph, or builds one over flat when none
// was saved.
func loadOrBuildHNSW(path string, saved bool, flat *Flat) (*HNSW, error) {
	if !saved {
		return NewHNSW(flat, HNSWConfig{Enabled: true})
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	g := hnsw.NewGraph[int32]()
	if err := g.Import(bufio.NewReaderSize(f, 1<<20)); err != nil {
		return nil, fmt.Errorf("import hnsw graph: %w", err)
	}
	if g.Len() != flat.Len() {
		return nil, fmt.Errorf("hnsw graph has %d nodes, vectors %d", g.Len(), flat.Len())
	}
	return &HNSW{g: g, dim: flat.Dim(), ef: max(g.EfSearch, 1)}, nil
}
