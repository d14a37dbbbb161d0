package estimate

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"unsafe"

	"github.com/viterin/vek/vek32"
)

// Embedder turns texts into vectors. The KNN calls it once per batch.
type Embedder interface {
	// Dim returns the length of every vector Embed writes.
	Dim() int
	// Embed writes one unit-length vector per text into dst, row-major;
	// len(dst) is len(texts)·Dim(). It is safe for concurrent use.
	Embed(ctx context.Context, texts []string, dst []float32) error
}

// Neighbor is one search hit: the row of the indexed vector and its cosine
// similarity to the query. Row is -1 for an unfilled slot.
type Neighbor struct {
	Row int32
	Sim float32
}

// Index finds the nearest stored vectors of a batch of queries. The KNN
// calls Search once per batch; implementations are safe for concurrent
// searches.
type Index interface {
	// Len returns the number of stored vectors.
	Len() int
	// Search writes, for each of the len(queries)/dim query vectors, its k
	// most similar rows (best first) into out[q·k:(q+1)·k]; unfilled slots
	// get Row -1.
	Search(ctx context.Context, queries []float32, k int, out []Neighbor) error
}

// Flat is an exact cosine index over unit vectors kept in one contiguous
// float32 slice; its dot products use SIMD where the CPU has it.
type Flat struct {
	dim  int
	vecs []float32
	// Optional two-stage search: pre holds the first preDim dimensions of
	// every row contiguously; a query first ranks rows by that partial dot
	// product, keeps cand of them, and re-ranks those exactly.
	pre     []float32
	preDim  int
	cand    int
	scratch sync.Pool // *[]Neighbor
}

var _ Index = (*Flat)(nil)

// NewFlat returns an exact index over vecs (row-major, len a multiple of
// dim). It keeps vecs without copying.
func NewFlat(dim int, vecs []float32) (*Flat, error) {
	if dim <= 0 || len(vecs)%dim != 0 {
		return nil, fmt.Errorf("flat index: %d floats is not a multiple of dim %d", len(vecs), dim)
	}
	return &Flat{dim: dim, vecs: vecs}, nil
}

// SetPrefilter turns on two-stage search: rows are first ranked by the dot
// product of their first preDim dimensions, the best candidates per query
// are re-ranked with the full vectors. It is approximate (see README for
// its recall); preDim = 0 turns it off. Call it before searching.
func (f *Flat) SetPrefilter(preDim, candidates int) error {
	if preDim == 0 {
		f.pre, f.preDim, f.cand = nil, 0, 0
		return nil
	}
	if preDim < 0 || preDim >= f.dim || candidates < 1 {
		return fmt.Errorf("flat index: prefilter needs 0 < dims < %d and candidates ≥ 1, got %d and %d", f.dim, preDim, candidates)
	}
	n := f.Len()
	pre := make([]float32, n*preDim)
	for r := 0; r < n; r++ {
		copy(pre[r*preDim:(r+1)*preDim], f.vecs[r*f.dim:r*f.dim+preDim])
	}
	f.pre, f.preDim, f.cand = pre, preDim, candidates
	return nil
}

// Len returns the number of stored vectors.
func (f *Flat) Len() int { return len(f.vecs) / f.dim }

// Dim returns the vector length.
func (f *Flat) Dim() int { return f.dim }

// Vectors returns the stored vectors (not a copy; do not modify).
func (f *Flat) Vectors() []float32 { return f.vecs }

// Search scans every row once for the whole batch: each row is dotted
// with every query while it is in cache, so the index streams through
// memory once per batch instead of once per query.
func (f *Flat) Search(ctx context.Context, queries []float32, k int, out []Neighbor) error {
	nq, err := checkSearch(f.dim, queries, k, out)
	if err != nil {
		return err
	}
	if f.pre != nil && f.Len() > 2*f.cand && f.cand >= k {
		return f.searchTwoStage(ctx, queries, nq, k, out)
	}
	resetTop(out)
	var buf [64]float32
	worst := buf[:0]
	if nq > len(buf) {
		worst = make([]float32, 0, nq)
	}
	for q := 0; q < nq; q++ {
		worst = append(worst, float32(math.Inf(-1)))
	}
	d := f.dim
	n := len(f.vecs) / d
	for r := 0; r < n; r++ {
		if r%4096 == 4095 && ctx.Err() != nil {
			return ctx.Err()
		}
		row := f.vecs[r*d : (r+1)*d]
		for q := 0; q < nq; q++ {
			s := vek32.Dot(queries[q*d:(q+1)*d], row)
			if s <= worst[q] {
				continue
			}
			top := out[q*k : (q+1)*k]
			insertTop(top, Neighbor{Row: int32(r), Sim: s})
			if top[k-1].Row >= 0 {
				worst[q] = top[k-1].Sim
			}
		}
	}
	return nil
}

func (f *Flat) searchTwoStage(ctx context.Context, queries []float32, nq, k int, out []Neighbor) error {
	d, pd, c := f.dim, f.preDim, f.cand
	sp, _ := f.scratch.Get().(*[]Neighbor)
	if sp == nil {
		sp = new([]Neighbor)
	}
	defer f.scratch.Put(sp)
	if cap(*sp) < nq*c {
		*sp = make([]Neighbor, nq*c)
	}
	cand := (*sp)[:nq*c]
	resetTop(cand)
	var buf [64]float32
	worst := buf[:0]
	if nq > len(buf) {
		worst = make([]float32, 0, nq)
	}
	for q := 0; q < nq; q++ {
		worst = append(worst, float32(math.Inf(-1)))
	}
	n := f.Len()
	for r := 0; r < n; r++ {
		if r%4096 == 4095 && ctx.Err() != nil {
			return ctx.Err()
		}
		row := f.pre[r*pd : (r+1)*pd]
		for q := 0; q < nq; q++ {
			s := vek32.Dot(queries[q*d:q*d+pd], row)
			if s <= worst[q] {
				continue
			}
			top := cand[q*c : (q+1)*c]
			insertTop(top, Neighbor{Row: int32(r), Sim: s})
			if top[c-1].Row >= 0 {
				worst[q] = top[c-1].Sim
			}
		}
	}
	resetTop(out)
	for q := 0; q < nq; q++ {
		qv := queries[q*d : (q+1)*d]
		top := out[q*k : (q+1)*k]
		for _, cn := range cand[q*c : (q+1)*c] {
			if cn.Row < 0 {
				continue
			}
			r := int(cn.Row)
			insertTop(top, Neighbor{Row: cn.Row, Sim: vek32.Dot(qv, f.vecs[r*d:(r+1)*d])})
		}
	}
	return nil
}

func checkSearch(dim int, queries []float32, k int, out []Neighbor) (int, error) {
	if k <= 0 {
		return 0, fmt.Errorf("search: k must be > 0, got %d", k)
	}
	if len(queries)%dim != 0 {
		return 0, fmt.Errorf("search: %d query floats is not a multiple of dim %d", len(queries), dim)
	}
	nq := len(queries) / dim
	if len(out) != nq*k {
		return 0, fmt.Errorf("search: out has %d slots, want %d", len(out), nq*k)
	}
	return nq, nil
}

// scanTopK merges the rows of vecs (row numbers offset by base) into top,
// a best-first list whose empty slots have Row -1 — call resetTop first
// for a fresh list.
func scanTopK(q, vecs []float32, dim int, base int32, top []Neighbor) {
	k := len(top)
	worst := top[k-1].Sim
	if top[k-1].Row < 0 {
		worst = float32(math.Inf(-1))
	}
	n := len(vecs) / dim
	for r := 0; r < n; r++ {
		s := vek32.Dot(q, vecs[r*dim:(r+1)*dim])
		if s <= worst {
			continue
		}
		// Insert into the sorted list.
		i := k - 1
		for i > 0 && (top[i-1].Row < 0 || top[i-1].Sim < s) {
			top[i] = top[i-1]
			i--
		}
		top[i] = Neighbor{Row: base + int32(r), Sim: s}
		if top[k-1].Row >= 0 {
			worst = top[k-1].Sim
		}
	}
}

func resetTop(top []Neighbor) {
	for i := range top {
		top[i] = Neighbor{Row: -1, Sim: float32(math.Inf(-1))}
	}
}

// vecMagic starts a vectors file.
const vecMagic = "RBVEC001"

// writeVectors writes the 8-byte magic "RBVEC001", little-endian uint32 dim
// and uint32 count, then count·dim float32 values.
func writeVectors(w io.Writer, dim int, vecs []float32) error {
	hdr := make([]byte, 16)
	copy(hdr, vecMagic)
	binary.LittleEndian.PutUint32(hdr[8:], uint32(dim))
	binary.LittleEndian.PutUint32(hdr[12:], uint32(len(vecs)/dim))
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("write vectors: %w", err)
	}
	return writeFloat32s(w, vecs)
}

// readVectors reads what writeVectors wrote; maxCount bounds the
// allocation a corrupt header can ask for.
func readVectors(r io.Reader, maxCount int) (dim int, vecs []float32, err error) {
	hdr := make([]byte, 16)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return 0, nil, fmt.Errorf("read vectors header: %w", err)
	}
	if string(hdr[:8]) != vecMagic {
		return 0, nil, fmt.Errorf("read vectors: bad magic %q", hdr[:8])
	}
	dim = int(binary.LittleEndian.Uint32(hdr[8:]))
	n := int(binary.LittleEndian.Uint32(hdr[12:]))
	if dim <= 0 || dim > 65536 || n > maxCount {
		return 0, nil, fmt.Errorf("read vectors: implausible header dim=%d count=%d", dim, n)
	}
	vecs = make([]float32, dim*n)
	if err := readFloat32s(r, vecs); err != nil {
		return 0, nil, fmt.Errorf("read vectors: %w", err)
	}
	return dim, vecs, nil
}

var errBigEndian = errors.New("float32 files need a little-endian host")

func littleEndianHost() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

func writeFloat32s(w io.Writer, v []float32) error {
	if len(v) == 0 {
		return nil
	}
	if !littleEndianHost() {
		return errBigEndian
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
	_, err := w.Write(b)
	return err
}

func readFloat32s(r io.Reader, v []float32) error {
	if len(v) == 0 {
		return nil
	}
	if !littleEndianHost() {
		return errBigEndian
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
	_, err := io.ReadFull(r, b)
	return err
}
