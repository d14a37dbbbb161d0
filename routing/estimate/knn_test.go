package estimate

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/routebalance/routebalance/routing"
)

// testRecords writes a tiny labelled world: arithmetic prompts that
// "solver" answers right and "chatter" wrong, trivia prompts the other way
// round, with output lengths 200 (arithmetic) and 20 (trivia).
func testRecords() []Record {
	var recs []Record
	for i := 0; i < 40; i++ {
		recs = append(recs, Record{
			ID: fmt.Sprintf("math-%d", i), Task: "math",
			Prompt:       fmt.Sprintf("Compute the sum of %d and %d, then multiply the result by %d. Show your arithmetic.", i, 3*i+1, i%7+2),
			Scores:       map[string]float64{"solver": 1, "chatter": 0},
			OutputTokens: map[string]float64{"solver": 200, "chatter": 180},
		})
		recs = append(recs, Record{
			ID: fmt.Sprintf("trivia-%d", i), Task: "trivia",
			Prompt:       fmt.Sprintf("Which country's capital city hosted the famous festival number %d? Answer with the city name.", i),
			Scores:       map[string]float64{"solver": 0, "chatter": 1},
			OutputTokens: map[string]float64{"solver": 20, "chatter": 25},
		})
	}
	return recs
}

func buildTest(t *testing.T, cfg Config, opt BuildOptions) *KNN {
	t.Helper()
	if opt.Embedder == nil {
		b, err := NewBuiltin(DefaultBuiltinConfig())
		if err != nil {
			t.Fatal(err)
		}
		opt.Embedder = b
	}
	k, err := Build(context.Background(), testRecords(), cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestEstimateNeighbours(t *testing.T) {
	k := buildTest(t, Config{Shrink: -1, Estimator: "knn"}, BuildOptions{})
	prompts := []string{
		"Compute the sum of 1000 and 17, then multiply the result by 3. Show your arithmetic.",
		"Which country's capital city hosted the famous festival number 977? Answer with the city name.",
	}
	models := []string{"solver", "chatter", "newcomer"}
	out := make([]routing.PromptEstimate, 2)
	if err := k.Estimate(context.Background(), prompts, models, []float64{0.5, 0.5, 0.42}, out); err != nil {
		t.Fatal(err)
	}
	type row struct {
		Quality []float64
		Length  []float64
		Source  []routing.EstimateSource
	}
	got := []row{}
	for _, e := range out {
		got = append(got, row{Quality: e.Quality, Length: e.Length, Source: e.Source})
	}
	want := []row{
		{Quality: []float64{1, 0, 0.42}, Length: []float64{200, 180, 250}, Source: []routing.EstimateSource{routing.SourceIndex, routing.SourceIndex, routing.SourcePrior}},
		{Quality: []float64{0, 1, 0.42}, Length: []float64{20, 25, 250}, Source: []routing.EstimateSource{routing.SourceIndex, routing.SourceIndex, routing.SourcePrior}},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-6 })); diff != "" {
		t.Errorf("estimates (-want +got):\n%s", diff)
	}
	for j, e := range out {
		for m := range models {
			var s float32
			for _, v := range e.Hist[m] {
				s += v
			}
			if math.Abs(float64(s)-1) > 1e-5 {
				t.Errorf("prompt %d model %s: histogram mass %v, want 1", j, models[m], s)
			}
		}
	}
	if got, want := out[0].Hist[0].Quantile(0.9), routing.LengthBucketUpper(routing.LengthBucket(200)); got != want {
		t.Errorf("solver p90 length on math = %v, want %v", got, want)
	}
}

func TestEstimateShrinkPullsToModelMean(t *testing.T) {
	// Both models have mean quality 0.5 over the index; with shrinkage the
	// estimate moves from 1 towards 0.5 by Shrink/(Σw + Shrink).
	k := buildTest(t, Config{Shrink: 3, Estimator: "knn"}, BuildOptions{})
	out := make([]routing.PromptEstimate, 1)
	p := []string{"Compute the sum of 1000 and 17, then multiply the result by 3. Show your arithmetic."}
	if err := k.Estimate(context.Background(), p, []string{"solver"}, nil, out); err != nil {
		t.Fatal(err)
	}
	if q := out[0].Quality[0]; !(q > 0.5 && q < 1) {
		t.Errorf("shrunk quality = %v, want in (0.5, 1)", q)
	}
}

func TestEstimateErrors(t *testing.T) {
	k := buildTest(t, Config{}, BuildOptions{})
	err := k.Estimate(context.Background(), []string{"a", "b"}, []string{"solver"}, nil, make([]routing.PromptEstimate, 1))
	if err == nil {
		t.Fatal("Estimate with mismatched out: got nil error")
	}
	if _, err := Build(context.Background(), []Record{{ID: "x", Prompt: "p", Scores: map[string]float64{"m": 2}}}, Config{}, BuildOptions{Embedder: k.emb}); err == nil {
		t.Error("Build with score 2: got nil error")
	}
	if err := (Config{K: -1}).Validate(); err == nil {
		t.Error("Validate K=-1: got nil error")
	}
}

func TestObserveLearnsOnline(t *testing.T) {
	b, _ := NewBuiltin(DefaultBuiltinConfig())
	k := buildTest(t, Config{OnlineCapacity: 2, Estimator: "knn"}, BuildOptions{Embedder: b})
	ctx := context.Background()
	novel := "Translate this German poem about the sea into French verse."
	// Unknown everywhere: the default length.
	out := make([]routing.PromptEstimate, 1)
	if err := k.Estimate(ctx, []string{novel}, []string{"poet"}, nil, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Length[0] != 250 {
		t.Errorf("length before observing = %v, want default 250", out[0].Length[0])
	}
	k.ObserveLength(novel, "poet", 400)
	k.ObserveQuality(novel, "poet", 0.9)
	if err := k.Estimate(ctx, []string{novel}, []string{"poet"}, nil, out); err != nil {
		t.Fatal(err)
	}
	if got := out[0].Length[0]; got != 400 {
		t.Errorf("length after observing 400 = %v, want 400", got)
	}
	if got := out[0].Quality[0]; math.Abs(got-0.9) > 1e-6 || out[0].Source[0] != routing.SourceIndex {
		t.Errorf("quality after feedback 0.9 = %v (%v), want 0.9 from the index", got, out[0].Source[0])
	}
	// An observation on an indexed prompt updates it in place.
	recs := testRecords()
	k.ObserveLength(recs[0].Prompt, "solver", 100)
	if k.onFill != 1 {
		t.Errorf("online rows = %d after an indexed prompt, want 1", k.onFill)
	}
	// The ring is bounded.
	for i := 0; i < 5; i++ {
		k.ObserveLength(fmt.Sprintf("Completely unrelated prompt %d about gardening tulips in %d", i, i*13), "poet", 10)
	}
	if k.onFill != 2 {
		t.Errorf("online rows = %d, want capacity 2", k.onFill)
	}
	// The model-wide prior learned the poet's lengths: (400+5·10)/6 = 75.
	k.mu.RLock()
	got := k.models[k.cols["poet"]].lenMean
	k.mu.RUnlock()
	if math.Abs(got-75) > 1e-9 {
		t.Errorf("poet length prior = %v, want 75", got)
	}
}

func TestConcurrentEstimateAndObserve(t *testing.T) {
	k := buildTest(t, Config{OnlineCapacity: 16}, BuildOptions{})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			out := make([]routing.PromptEstimate, 2)
			for i := 0; i < 50; i++ {
				p := fmt.Sprintf("goroutine %d prompt %d about topic %d", g, i, i%5)
				if err := k.Estimate(ctx, []string{p, "Compute the sum"}, []string{"solver", "x"}, nil, out); err != nil {
					t.Error(err)
					return
				}
				k.ObserveLength(p, "x", 10+i)
				k.ObserveQuality(p, "solver", 0.5)
			}
		}(g)
	}
	wg.Wait()
}

func TestSaveOpenRoundTrip(t *testing.T) {
	for _, hnsw := range []bool{false, true} {
		t.Run(fmt.Sprintf("hnsw=%v", hnsw), func(t *testing.T) {
			k := buildTest(t, Config{}, BuildOptions{HNSW: HNSWConfig{Enabled: hnsw}})
			dir := t.TempDir()
			if err := k.Save(dir, nil); err != nil {
				t.Fatal(err)
			}
			k2, err := Open(dir, Config{})
			if err != nil {
				t.Fatal(err)
			}
			if _, isH := k2.index.(*HNSW); isH != hnsw {
				t.Errorf("opened index is %T, want hnsw=%v", k2.index, hnsw)
			}
			prompts := []string{"Compute the sum of 5 and 6", "Which capital city hosted festival 3?", "something else"}
			models := []string{"chatter", "solver", "absent"}
			a := make([]routing.PromptEstimate, 3)
			b := make([]routing.PromptEstimate, 3)
			ctx := context.Background()
			if err := k.Estimate(ctx, prompts, models, nil, a); err != nil {
				t.Fatal(err)
			}
			if err := k2.Estimate(ctx, prompts, models, nil, b); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(a, b); diff != "" {
				t.Errorf("estimates differ after Save/Open (-built +opened):\n%s", diff)
			}
		})
	}
}

func TestOpenRejectsBadFiles(t *testing.T) {
	k := buildTest(t, Config{}, BuildOptions{})
	dir := t.TempDir()
	if err := k.Save(dir, nil); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(dir+"/vectors.f32", func(w io.Writer) error { _, err := w.Write([]byte("NOTAVECTORFILE..")); return err }); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Config{}); err == nil {
		t.Error("Open with a corrupt vectors file: got nil error")
	}
	if _, err := Open(t.TempDir(), Config{}); err == nil {
		t.Error("Open of an empty directory: got nil error")
	}
}

func TestFlatSearchIsExact(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	const dim, n, k = 16, 200, 5
	vecs := make([]float32, dim*n)
	for i := range vecs {
		vecs[i] = float32(rng.NormFloat64())
	}
	for r := 0; r < n; r++ {
		normalize(vecs[r*dim : (r+1)*dim])
	}
	f, err := NewFlat(dim, vecs)
	if err != nil {
		t.Fatal(err)
	}
	q := append([]float32(nil), vecs[7*dim:8*dim]...)
	out := make([]Neighbor, k)
	if err := f.Search(context.Background(), q, k, out); err != nil {
		t.Fatal(err)
	}
	// Brute force in float64 for the reference.
	type pair struct {
		row int32
		sim float64
	}
	var all []pair
	for r := 0; r < n; r++ {
		var s float64
		for j := 0; j < dim; j++ {
			s += float64(q[j]) * float64(vecs[r*dim+j])
		}
		all = append(all, pair{int32(r), s})
	}
	for i := 0; i < k; i++ {
		best := i
		for j := i + 1; j < len(all); j++ {
			if all[j].sim > all[best].sim {
				best = j
			}
		}
		all[i], all[best] = all[best], all[i]
		if out[i].Row != all[i].row || math.Abs(float64(out[i].Sim)-all[i].sim) > 1e-5 {
			t.Errorf("neighbour %d = %+v, want row %d sim %.6f", i, out[i], all[i].row, all[i].sim)
		}
	}
	if out[0].Row != 7 {
		t.Errorf("a stored vector's nearest neighbour is row %d, want itself (7)", out[0].Row)
	}
}
