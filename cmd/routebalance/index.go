package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/routebalance/routebalance/routing/estimate"
)

// runIndex dispatches `routebalance index build|split`.
func runIndex(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stderr, "usage: routebalance index build --data FILE.jsonl --out DIR [--embedder builtin|openai --embedder-url URL] [--qdrant-url URL --collection NAME]")
		fmt.Fprintln(stderr, "       routebalance index split --data FILE.jsonl --test-frac 0.2 --seed 1 --train-out TRAIN.jsonl --test-out TEST.jsonl")
		if len(args) == 0 {
			return errUsage
		}
		return flag.ErrHelp
	}
	switch args[0] {
	case "build":
		return runIndexBuild(ctx, args[1:], stdout, stderr)
	case "split":
		return runIndexSplit(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "routebalance index: unknown subcommand %q (want build or split)\n", args[0])
	return errUsage
}

func runIndexBuild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("index build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "", "labelled prompts, JSON lines {id,prompt,scores,output_tokens?,task?} (required)")
	out := fs.String("out", "", "index directory to write (required)")
	embedder := fs.String("embedder", "builtin", "embedder: builtin or openai")
	embURL := fs.String("embedder-url", "", "base URL of an OpenAI-compatible /v1/embeddings server (with --embedder openai)")
	embModel := fs.String("embedder-model", "sentence-transformers/all-MiniLM-L6-v2", "embedding model name (with --embedder openai)")
	dim := fs.Int("dim", 384, "builtin embedder dimensions")
	def := estimate.DefaultBuiltinConfig()
	wordW := fs.Float64("word-weight", def.WordWeight, "builtin embedder: weight of word unigrams")
	bigramW := fs.Float64("bigram-weight", def.BigramWeight, "builtin embedder: weight of word bigrams")
	charW := fs.Float64("char-weight", def.CharWeight, "builtin embedder: weight of character n-grams")
	charMin := fs.Int("char-min", def.CharMin, "builtin embedder: smallest character n-gram")
	charMax := fs.Int("char-max", def.CharMax, "builtin embedder: largest character n-gram")
	useHNSW := fs.Bool("hnsw", false, "also build and save an HNSW graph (searched instead of the exact scan)")
	qdrantURL := fs.String("qdrant-url", "", "also upsert vectors and labels into this Qdrant (gRPC URL, e.g. http://127.0.0.1:6334)")
	collection := fs.String("collection", "", "Qdrant collection name (with --qdrant-url)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	noHead := fs.Bool("no-head", false, "do not train the learned quality head (KNN only)")
	headL2 := fs.Float64("head-l2", 0, "learned head: L2 weight decay (0 = default)")
	headEpochs := fs.Int("head-epochs", 0, "learned head: Adam epochs (0 = default)")
	headLR := fs.Float64("head-learn-rate", 0, "learned head: Adam step (0 = default)")
	headTaskL2 := fs.Float64("head-task-l2", 0, "learned head: L2 of the task classifier (0 = default)")
	headFolds := fs.Int("head-folds", 0, "learned head: cross-fitting folds of the task probabilities (0 = default, 1 = true task)")
	headEmb := fs.Bool("head-embedding", false, "learned head: feed the embedding to the quality models too (off: it overfitted on validation)")
	headInter := fs.Bool("head-interactions", false, "learned head: add a task × feature block (off: it did not help on validation)")
	headRank := fs.Int("head-rank", 0, "learned head: rank of the within-task weights across models (0 = default 1, negative = independent per model)")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if *data == "" || *out == "" {
		fmt.Fprintln(stderr, "index build: --data and --out are required")
		return errUsage
	}
	if (*qdrantURL == "") != (*collection == "") {
		fmt.Fprintln(stderr, "index build: --qdrant-url and --collection go together")
		return errUsage
	}
	recs, err := readRecordsFile(*data)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return fmt.Errorf("%s: no records", *data)
	}
	var emb estimate.Embedder
	switch *embedder {
	case "builtin":
		cfg := estimate.DefaultBuiltinConfig()
		cfg.Dim, cfg.WordWeight, cfg.BigramWeight, cfg.CharWeight = *dim, *wordW, *bigramW, *charW
		cfg.CharMin, cfg.CharMax = *charMin, *charMax
		b, err := estimate.NewBuiltin(cfg)
		if err != nil {
			return err
		}
		emb = b
	case "openai":
		if *embURL == "" {
			fmt.Fprintln(stderr, "index build: --embedder openai needs --embedder-url")
			return errUsage
		}
		o, err := estimate.NewOpenAI(estimate.OpenAIConfig{URL: *embURL, Model: *embModel})
		if err != nil {
			return err
		}
		if _, err := o.Probe(ctx); err != nil {
			return err
		}
		emb = o
	default:
		fmt.Fprintf(stderr, "index build: --embedder must be builtin or openai, got %q\n", *embedder)
		return errUsage
	}
	bar := newProgress(stderr, "embedding", len(recs), *quiet)
	start := time.Now()
	knn, err := estimate.Build(ctx, recs, estimate.Config{}, estimate.BuildOptions{
		Embedder: emb, HNSW: estimate.HNSWConfig{Enabled: *useHNSW}, NoHead: *noHead,
		Head:     estimate.HeadConfig{L2: *headL2, Epochs: *headEpochs, LearnRate: *headLR, Interactions: *headInter, Embedding: *headEmb, TaskL2: *headTaskL2, Folds: *headFolds, Rank: *headRank},
		Progress: func(done, _ int) { bar.set(done) },
	})
	bar.finish()
	if err != nil {
		return err
	}
	var qs *estimate.QdrantSpec
	if *qdrantURL != "" {
		qs = &estimate.QdrantSpec{URL: *qdrantURL, Collection: *collection}
		if err := upsertQdrant(ctx, knn, *qs, recs, stderr, *quiet); err != nil {
			return err
		}
	}
	if err := knn.Save(*out, qs); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "index: %d prompts, %d models, %d dims, embedder %s, written to %s in %s\n",
		knn.Len(), len(knn.Models()), knn.Dim(), *embedder, *out, time.Since(start).Round(time.Millisecond))
	return nil
}

func upsertQdrant(ctx context.Context, knn *estimate.KNN, spec estimate.QdrantSpec, recs []estimate.Record, stderr io.Writer, quiet bool) error {
	q, err := estimate.DialQdrant(ctx, estimate.QdrantConfig{URL: spec.URL, Collection: spec.Collection})
	if err != nil {
		return err
	}
	defer q.Close()
	bar := newProgress(stderr, "qdrant upsert", knn.Len(), quiet)
	err = q.Load(ctx, knn.Vectors(), knn.Dim(), recs, func(done int) { bar.set(done) })
	bar.finish()
	return err
}

// readRecordsFile reads a JSON-lines file of labelled prompts.
func readRecordsFile(path string) ([]estimate.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := estimate.ReadRecords(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return recs, nil
}

func runIndexSplit(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("index split", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "", "JSON-lines file with an \"id\" per line (required)")
	frac := fs.Float64("test-frac", 0.2, "fraction of lines for the test split")
	seed := fs.Uint64("seed", 1, "split seed")
	trainOut := fs.String("train-out", "", "train split file (required)")
	testOut := fs.String("test-out", "", "test split file (required)")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if *data == "" || *trainOut == "" || *testOut == "" || !(*frac > 0 && *frac < 1) {
		fmt.Fprintln(stderr, "index split: --data, --train-out, --test-out are required and --test-frac must be in (0, 1)")
		return errUsage
	}
	in, err := os.Open(*data)
	if err != nil {
		return err
	}
	defer in.Close()
	tr, err := os.Create(*trainOut)
	if err != nil {
		return err
	}
	defer tr.Close()
	te, err := os.Create(*testOut)
	if err != nil {
		return err
	}
	defer te.Close()
	trw, tew := bufio.NewWriter(tr), bufio.NewWriter(te)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var nTrain, nTest int
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var head struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(line, &head); err != nil || head.ID == "" {
			return fmt.Errorf("%s line %d: want a JSON object with an \"id\"", *data, n)
		}
		w := trw
		if splitTest(head.ID, *seed, *frac) {
			w, nTest = tew, nTest+1
		} else {
			nTrain++
		}
		w.Write(line)
		w.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if err := errors.Join(trw.Flush(), tew.Flush()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "split: %d train → %s, %d test → %s (seed %d, test-frac %g)\n", nTrain, *trainOut, nTest, *testOut, *seed, *frac)
	return nil
}

// splitTest puts a line in the test split when the mixed FNV-1a hash of
// "seed:id" falls below frac: reproducible and independent of line order.
func splitTest(id string, seed uint64, frac float64) bool {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d:%s", seed, id)
	// FNV's high bits barely change with the last bytes of similar ids;
	// the splitmix64 finaliser spreads every input bit over the output.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11)/float64(1<<53) < frac
}

func usageErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return errUsage
}

// progress is a small progress bar on stderr, redrawn at most every 100 ms.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	label string
	total int
	done  int
	start time.Time
	last  time.Time
	off   bool
}

func newProgress(w io.Writer, label string, total int, off bool) *progress {
	return &progress{w: w, label: label, total: total, start: time.Now(), off: off}
}

func (p *progress) set(done int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = done
	if p.off || time.Since(p.last) < 100*time.Millisecond && done < p.total {
		return
	}
	p.last = time.Now()
	p.draw()
}

func (p *progress) add(n int) {
	p.mu.Lock()
	done := p.done + n
	p.mu.Unlock()
	p.set(done)
}

func (p *progress) draw() {
	const width = 30
	frac := 0.0
	if p.total > 0 {
		frac = min(float64(p.done)/float64(p.total), 1)
	}
	n := int(frac * width)
	fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d %3.0f%% %s", p.label, strings.Repeat("=", n), strings.Repeat(" ", width-n),
		p.done, p.total, 100*frac, time.Since(p.start).Round(100*time.Millisecond))
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.off {
		return
	}
	p.draw()
	fmt.Fprintln(p.w)
}
