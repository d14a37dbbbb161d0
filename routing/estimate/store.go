package estimate

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Record is one labelled prompt, the line format of `routebalance index
// build --data`: {"id","prompt","scores":{model: q},"output_tokens":{model: n}?,"task"?}.
type Record struct {
	ID           string             `json:"id"`
	Task         string             `json:"task,omitempty"`
	Prompt       string             `json:"prompt"`
	Scores       map[string]float64 `json:"scores,omitempty"`
	OutputTokens map[string]float64 `json:"output_tokens,omitempty"`
}

// ReadRecords reads JSON lines of Records; blank lines are skipped and a
// bad line is an error naming its number.
func ReadRecords(r io.Reader) ([]Record, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var out []Record
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(trimSpace(line)) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read records: %w", err)
	}
	return out, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	return b
}

// Manifest is index.json, the description of a saved index directory.
type Manifest struct {
	// Format is always "routebalance-knn-index".
	Format string `json:"format"`
	// Version is the layout version (1).
	Version int `json:"version"`
	// Dim and Count size vectors.f32.
	Dim   int `json:"dim"`
	Count int `json:"count"`
	// Models lists every model with at least one label.
	Models   []string     `json:"models"`
	Embedder EmbedderSpec `json:"embedder"`
	// Files names the other files of the directory.
	Files ManifestFiles `json:"files"`
	// Qdrant, when set, says the vectors were also upserted into a Qdrant
	// collection.
	Qdrant  *QdrantSpec `json:"qdrant,omitempty"`
	Created time.Time   `json:"created"`
}

// ManifestFiles names the files of an index directory.
type ManifestFiles struct {
	Vectors string `json:"vectors"`
	Labels  string `json:"labels"`
	IDF     string `json:"idf,omitempty"`
	HNSW    string `json:"hnsw,omitempty"`
	// Head is the learned quality head (head.json), when built.
	Head string `json:"head,omitempty"`
}

// QdrantSpec names the Qdrant collection mirroring an index.
type QdrantSpec struct {
	URL        string `json:"url"`
	Collection string `json:"collection"`
}

// EmbedderSpec records how the vectors were made so Open can recreate the
// embedder.
type EmbedderSpec struct {
	// Kind is "builtin" or "openai".
	Kind    string         `json:"kind"`
	Dim     int            `json:"dim"`
	Builtin *BuiltinConfig `json:"builtin,omitempty"`
	URL     string         `json:"url,omitempty"`
	Model   string         `json:"model,omitempty"`
}

// Layout constants of an index directory.
const (
	ManifestFormat  = "routebalance-knn-index"
	ManifestVersion = 1
	manifestFile    = "index.json"
	vectorsFile     = "vectors.f32"
	labelsFile      = "labels.jsonl"
	idfFile         = "idf.f32"
	hnswFile        = "hnsw.bin"
	headFileName    = "head.json"
	maxRows         = 50_000_000
)

// labelLine is one line of labels.jsonl, row order.
type labelLine struct {
	ID           string             `json:"id"`
	Task         string             `json:"task,omitempty"`
	Quality      map[string]float64 `json:"quality,omitempty"`
	OutputTokens map[string]float64 `json:"output_tokens,omitempty"`
}

// specer is implemented by embedders that can describe themselves.
type specer interface{ spec() EmbedderSpec }

// BuildOptions steer Build.
type BuildOptions struct {
	// Embedder makes the vectors. An unfitted *Builtin is fitted on the
	// records' prompts first. Required.
	Embedder Embedder
	// BatchSize is the number of prompts per Embed call (default 64).
	BatchSize int
	// HNSW also builds an HNSW graph (saved as hnsw.bin) and searches it.
	HNSW HNSWConfig
	// Progress, when set, is called after each batch with the prompts
	// embedded so far.
	Progress func(done, total int)
	// Head tunes the learned quality head trained after embedding.
	Head HeadConfig
	// NoHead skips the head (KNN only).
	NoHead bool
}

// Build embeds every record and returns a KNN over them with their labels.
// Scores outside [0,1] and non-positive lengths are errors.
func Build(ctx context.Context, recs []Record, cfg Config, opt BuildOptions) (*KNN, error) {
	if opt.Embedder == nil {
		return nil, errors.New("estimate: build needs an embedder")
	}
	if opt.BatchSize <= 0 {
		opt.BatchSize = 64
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for i, r := range recs {
		if err := checkRecord(r); err != nil {
			return nil, fmt.Errorf("record %d (%s): %w", i+1, r.ID, err)
		}
	}
	if b, ok := opt.Embedder.(*Builtin); ok && b.idf == nil {
		texts := make([]string, len(recs))
		for i, r := range recs {
			texts[i] = r.Prompt
		}
		b.Fit(texts)
	}
	dim := opt.Embedder.Dim()
	vecs := make([]float32, len(recs)*dim)
	texts := make([]string, 0, opt.BatchSize)
	for i := 0; i < len(recs); i += opt.BatchSize {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		end := min(i+opt.BatchSize, len(recs))
		texts = texts[:0]
		for _, r := range recs[i:end] {
			texts = append(texts, r.Prompt)
		}
		if err := opt.Embedder.Embed(ctx, texts, vecs[i*dim:end*dim]); err != nil {
			return nil, fmt.Errorf("estimate: embed records %d-%d: %w", i+1, end, err)
		}
		if opt.Progress != nil {
			opt.Progress(end, len(recs))
		}
	}
	flat, err := NewFlat(dim, vecs)
	if err != nil {
		return nil, err
	}
	var idx Index = flat
	if opt.HNSW.Enabled {
		h, err := NewHNSW(flat, opt.HNSW)
		if err != nil {
			return nil, err
		}
		idx = h
	}
	meta := make([]rowMeta, len(recs))
	for i, r := range recs {
		meta[i] = rowMeta{ID: r.ID, Task: r.Task}
	}
	k, err := newKNN(cfg, opt.Embedder, idx, meta)
	if err != nil {
		return nil, err
	}
	k.flat = flat
	lines := make([]labelLine, len(recs))
	for i, r := range recs {
		lines[i] = labelLine{ID: r.ID, Task: r.Task, Quality: r.Scores, OutputTokens: r.OutputTokens}
	}
	if err := k.loadLabels(lines); err != nil {
		return nil, err
	}
	var head *Head
	if !opt.NoHead {
		if head, err = TrainHead(recs, vecs, dim, featureMaxBytes, opt.Head); err != nil {
			return nil, err
		}
	}
	if err := k.attachHead(head); err != nil {
		return nil, err
	}
	k.seedTaskLengths(lines)
	return k, nil
}

// seedTaskLengths folds the labelled output lengths into the head's
// per-task length tables (by each record's own task).
func (k *KNN) seedTaskLengths(lines []labelLine) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.head == nil {
		return
	}
	taskOf := indexOf(k.head.tasks)
	for _, l := range lines {
		t, ok := taskOf[l.Task]
		if !ok {
			continue
		}
		for m, n := range l.OutputTokens {
			if c, ok := k.cols[m]; ok && t < len(k.models[c].taskLen) {
				k.models[c].taskLen[t].observe(n, taskLenWindow)
			}
		}
	}
	k.fitLengths()
}

func checkRecord(r Record) error {
	for m, q := range r.Scores {
		if !(q >= 0 && q <= 1) {
			return fmt.Errorf("score of %q is %v, want [0, 1]", m, q)
		}
	}
	for m, n := range r.OutputTokens {
		if !(n > 0) || math.IsInf(n, 0) {
			return fmt.Errorf("output_tokens of %q is %v, want > 0", m, n)
		}
	}
	return nil
}

// loadLabels fills the base rows' columns and the length priors.
func (k *KNN) loadLabels(lines []labelLine) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	// Create columns in sorted order so column numbers are reproducible.
	names := map[string]bool{}
	for _, l := range lines {
		for m := range l.Quality {
			names[m] = true
		}
		for m := range l.OutputTokens {
			names[m] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for m := range names {
		sorted = append(sorted, m)
	}
	sort.Strings(sorted)
	for _, m := range sorted {
		if _, err := k.column(m, true); err != nil {
			return err
		}
	}
	for row, l := range lines {
		for m, q := range l.Quality {
			c := k.models[k.cols[m]]
			c.q[row], c.qn[row] = float32(q), 1
		}
		for m, n := range l.OutputTokens {
			c := k.models[k.cols[m]]
			c.l[row], c.ln[row] = float32(n), 1
			c.observePrior(n)
		}
	}
	for _, c := range k.models {
		var sum, n float64
		for row := 0; row < k.base; row++ {
			if q := c.q[row]; q == q {
				sum += float64(q)
				n++
			}
		}
		c.qMean = math.NaN()
		if n > 0 {
			c.qMean = sum / n
		}
	}
	return nil
}

// Save writes the index directory that Open reads: index.json,
// vectors.f32, labels.jsonl, and idf.f32 / hnsw.bin when they apply. The
// base rows' labels are written with the online updates folded in; the
// online ring is not saved.
func (k *KNN) Save(dir string, qdrant *QdrantSpec) error {
	if k.flat == nil {
		return errors.New("estimate: save needs the vectors (index not built or opened in this process)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	man := Manifest{Format: ManifestFormat, Version: ManifestVersion, Dim: k.dim, Count: k.base,
		Models: k.Models(), Qdrant: qdrant, Created: time.Now().UTC(),
		Files: ManifestFiles{Vectors: vectorsFile, Labels: labelsFile}}
	if s, ok := k.emb.(specer); ok {
		man.Embedder = s.spec()
	} else {
		man.Embedder = EmbedderSpec{Kind: "custom", Dim: k.dim}
	}
	if b, ok := k.emb.(*Builtin); ok {
		man.Files.IDF = idfFile
		if err := writeFile(filepath.Join(dir, idfFile), b.WriteIDF); err != nil {
			return err
		}
	}
	if h := k.Head(); h != nil {
		man.Files.Head = headFileName
		if err := writeFile(filepath.Join(dir, headFileName), h.Write); err != nil {
			return err
		}
	}
	if h, ok := k.index.(*HNSW); ok {
		man.Files.HNSW = hnswFile
		if err := writeFile(filepath.Join(dir, hnswFile), h.Export); err != nil {
			return err
		}
	}
	if err := writeFile(filepath.Join(dir, vectorsFile), func(w io.Writer) error {
		return writeVectors(w, k.dim, k.flat.Vectors())
	}); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, labelsFile), k.writeLabels); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, manifestFile), func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(man)
	})
}

func (k *KNN) writeLabels(w io.Writer) error {
	k.mu.RLock()
	defer k.mu.RUnlock()
	enc := json.NewEncoder(w)
	for row := 0; row < k.base; row++ {
		l := labelLine{ID: k.meta[row].ID, Task: k.meta[row].Task}
		for _, c := range k.models {
			if q := c.q[row]; q == q {
				if l.Quality == nil {
					l.Quality = map[string]float64{}
				}
				l.Quality[c.name] = float64(q)
			}
			if n := c.l[row]; n == n {
				if l.OutputTokens == nil {
					l.OutputTokens = map[string]float64{}
				}
				l.OutputTokens[c.name] = float64(n)
			}
		}
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes through a temporary file and renames it into place.
func writeFile(path string, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save index: write %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	return nil
}

// ReadManifest reads and checks dir/index.json.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return nil, fmt.Errorf("open index: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("open index: %s: %w", manifestFile, err)
	}
	if m.Format != ManifestFormat {
		return nil, fmt.Errorf("open index: %s has format %q, want %q", manifestFile, m.Format, ManifestFormat)
	}
	if m.Version != ManifestVersion {
		return nil, fmt.Errorf("open index: version %d not supported (this build reads %d)", m.Version, ManifestVersion)
	}
	if m.Dim <= 0 || m.Count < 0 || m.Count > maxRows {
		return nil, fmt.Errorf("open index: implausible dim %d / count %d", m.Dim, m.Count)
	}
	return &m, nil
}

// Open loads an index directory written by `routebalance index build`
// (or Save). cfg.Embedder overrides the recorded embedder; an "openai"
// index needs either that or its recorded URL to be reachable at query
// time.
func Open(dir string, cfg Config) (*KNN, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	man, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	emb := cfg.Embedder
	if emb == nil {
		emb, err = embedderFromSpec(dir, man)
		if err != nil {
			return nil, err
		}
	}
	if emb.Dim() != man.Dim {
		return nil, fmt.Errorf("open index: embedder makes %d dims, index has %d", emb.Dim(), man.Dim)
	}
	f, err := os.Open(filepath.Join(dir, man.Files.Vectors))
	if err != nil {
		return nil, fmt.Errorf("open index: %w", err)
	}
	dim, vecs, err := readVectors(bufio.NewReaderSize(f, 1<<20), man.Count)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("open index: %w", err)
	}
	if dim != man.Dim || len(vecs) != man.Count*dim {
		return nil, fmt.Errorf("open index: vectors file is %d×%d, manifest says %d×%d", len(vecs)/max(dim, 1), dim, man.Count, man.Dim)
	}
	flat, err := NewFlat(dim, vecs)
	if err != nil {
		return nil, err
	}
	lf, err := os.Open(filepath.Join(dir, man.Files.Labels))
	if err != nil {
		return nil, fmt.Errorf("open index: %w", err)
	}
	lines, err := readLabelLines(lf)
	lf.Close()
	if err != nil {
		return nil, fmt.Errorf("open index: %w", err)
	}
	if len(lines) != man.Count {
		return nil, fmt.Errorf("open index: %d label lines for %d vectors", len(lines), man.Count)
	}
	var idx Index = flat
	if cfg.Index == "twostage" {
		// A second Flat over the same vectors keeps k.flat plain for Save.
		two, _ := NewFlat(dim, vecs)
		if err := two.SetPrefilter(min(cfg.PrefilterDims, dim-1), cfg.PrefilterCandidates); err != nil {
			return nil, fmt.Errorf("open index: %w", err)
		}
		idx = two
	}
	useHNSW := cfg.Index == "hnsw" || (cfg.Index == "auto" && man.Files.HNSW != "")
	if useHNSW {
		h, err := loadOrBuildHNSW(filepath.Join(dir, man.Files.HNSW), man.Files.HNSW != "", flat)
		if err != nil {
			return nil, fmt.Errorf("open index: %w", err)
		}
		idx = h
	}
	if cfg.Qdrant != nil {
		q, err := DialQdrant(context.Background(), *cfg.Qdrant)
		if err != nil {
			return nil, fmt.Errorf("open index: %w", err)
		}
		q.Attach(man.Count, man.Dim)
		idx = q
	}
	meta := make([]rowMeta, len(lines))
	for i, l := range lines {
		meta[i] = rowMeta{ID: l.ID, Task: l.Task}
	}
	k, err := newKNN(cfg, emb, idx, meta)
	if err != nil {
		return nil, err
	}
	k.flat = flat
	if err := k.loadLabels(lines); err != nil {
		return nil, err
	}
	var head *Head
	if man.Files.Head != "" {
		hf, err := os.Open(filepath.Join(dir, man.Files.Head))
		if err != nil {
			return nil, fmt.Errorf("open index: %w", err)
		}
		head, err = ReadHead(bufio.NewReader(hf))
		hf.Close()
		if err != nil {
			return nil, fmt.Errorf("open index: %w", err)
		}
	}
	if err := k.attachHead(head); err != nil {
		return nil, fmt.Errorf("open index: %w", err)
	}
	k.seedTaskLengths(lines)
	cfg.Logger.Info("estimate: index opened", "dir", dir, "rows", man.Count, "dim", man.Dim,
		"embedder", man.Embedder.Kind, "search", fmt.Sprintf("%T", idx))
	return k, nil
}

func readLabelLines(r io.Reader) ([]labelLine, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var out []labelLine
	for n := 1; sc.Scan(); n++ {
		var l labelLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", labelsFile, n, err)
		}
		out = append(out, l)
	}
	return out, sc.Err()
}

func embedderFromSpec(dir string, man *Manifest) (Embedder, error) {
	switch man.Embedder.Kind {
	case "builtin":
		if man.Embedder.Builtin == nil {
			return nil, errors.New("open index: builtin embedder without its config")
		}
		b, err := NewBuiltin(*man.Embedder.Builtin)
		if err != nil {
			return nil, fmt.Errorf("open index: %w", err)
		}
		if man.Files.IDF != "" {
			f, err := os.Open(filepath.Join(dir, man.Files.IDF))
			if err != nil {
				return nil, fmt.Errorf("open index: %w", err)
			}
			err = b.ReadIDF(bufio.NewReaderSize(f, 1<<20))
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("open index: %w", err)
			}
		}
		return b, nil
	case "openai":
		return NewOpenAI(OpenAIConfig{URL: man.Embedder.URL, Model: man.Embedder.Model, Dim: man.Embedder.Dim})
	}
	return nil, fmt.Errorf("open index: embedder %q cannot be recreated; pass Config.Embedder", man.Embedder.Kind)
}
