package estimate

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/routebalance/routebalance/routing"
)

// difficultyRecords is a world where the task decides most of the label
// and a cheap feature decides the rest: "solver" answers arithmetic
// prompts right unless they carry many numbers (hard), "chatter" answers
// trivia right; lengths 200 (arithmetic) and 20 (trivia).
func difficultyRecords(n int, offset int) []Record {
	var recs []Record
	for i := offset; i < offset+n; i++ {
		hard := i%2 == 0
		nums := fmt.Sprintf("%d and %d", i, 3*i+1)
		if hard {
			nums = fmt.Sprintf("%d, %d, %d, %d, %d, %d, %d and %d", i, i+7, i+19, 2*i, 5*i+3, i*i%97, i+101, 3*i+1)
		}
		solver := 1.0
		if hard {
			solver = 0
		}
		recs = append(recs, Record{
			ID: fmt.Sprintf("math-%d", i), Task: "math",
			Prompt:       fmt.Sprintf("Compute the sum of %s, then multiply the result by %d. Show your arithmetic.", nums, i%7+2),
			Scores:       map[string]float64{"solver": solver, "chatter": 0},
			OutputTokens: map[string]float64{"solver": 200, "chatter": 180},
		}, Record{
			ID: fmt.Sprintf("trivia-%d", i), Task: "trivia",
			Prompt:       fmt.Sprintf("Which country's capital city hosted the famous festival number %d? Answer with the city name.", i),
			Scores:       map[string]float64{"solver": 0, "chatter": 1},
			OutputTokens: map[string]float64{"solver": 20, "chatter": 25},
		})
	}
	return recs
}

func buildHead(t *testing.T, cfg Config, emb Embedder) *KNN {
	t.Helper()
	if emb == nil {
		b, err := NewBuiltin(DefaultBuiltinConfig())
		if err != nil {
			t.Fatal(err)
		}
		emb = b
	}
	k, err := Build(context.Background(), difficultyRecords(60, 0), cfg, BuildOptions{Embedder: emb})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestHeadLearnsTaskAndDifficulty(t *testing.T) {
	k := buildHead(t, Config{}, nil)
	if k.Mode() != "head" {
		t.Fatalf("mode = %q, want head (auto with a trained head)", k.Mode())
	}
	test := difficultyRecords(20, 1000) // prompts the head never saw
	prompts := make([]string, len(test))
	for i, r := range test {
		prompts[i] = r.Prompt
	}
	models := []string{"solver", "chatter", "newcomer"}
	out := make([]routing.PromptEstimate, len(prompts))
	if err := k.Estimate(context.Background(), prompts, models, []float64{0, 0, 0.42}, out); err != nil {
		t.Fatal(err)
	}
	for i, r := range test {
		for m, name := range models[:2] {
			if got := out[i].Quality[m]; math.Abs(got-r.Scores[name]) > 0.35 {
				t.Errorf("%s: Q̂[%s] = %.3f, label %v", r.ID, name, got, r.Scores[name])
			}
		}
		if out[i].Quality[2] != 0.42 || out[i].Source[2] != routing.SourcePrior {
			t.Errorf("%s: unknown model got %v (%v), want its prior", r.ID, out[i].Quality[2], out[i].Source[2])
		}
		wantLen := 200.0
		if r.Task == "trivia" {
			wantLen = 20
		}
		if math.Abs(out[i].Length[0]-wantLen) > 0.02*wantLen || out[i].Length[2] != 250 {
			t.Errorf("%s: L̂ = %v, want %v ±2%% for solver (its task's labels) and the default 250 for the unknown model", r.ID, out[i].Length, wantLen)
		}
		if out[i].Memo == 0 {
			t.Errorf("%s: no memo", r.ID)
		}
	}
}

func TestHeadSaveOpenRoundTrip(t *testing.T) {
	k := buildHead(t, Config{}, nil)
	dir := t.TempDir()
	if err := k.Save(dir, nil); err != nil {
		t.Fatal(err)
	}
	k2, err := Open(dir, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if k2.Mode() != "head" {
		t.Fatalf("reopened mode = %q, want head", k2.Mode())
	}
	prompts := []string{"Compute the sum of 5 and 6, then multiply the result by 3.", "Which capital city hosted festival 3?", "unrelated words"}
	models := []string{"solver", "chatter"}
	a, b := make([]routing.PromptEstimate, 3), make([]routing.PromptEstimate, 3)
	if err := k.Estimate(context.Background(), prompts, models, nil, a); err != nil {
		t.Fatal(err)
	}
	if err := k2.Estimate(context.Background(), prompts, models, nil, b); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(a, b, cmpopts.EquateApprox(0, 1e-6)); d != "" {
		t.Errorf("reopened head estimates differ (-built +opened):\n%s", d)
	}
	// Asking for a mode the index cannot serve is an error.
	if err := k.Save(dir, nil); err != nil {
		t.Fatal(err)
	}
	kn := buildTest(t, Config{}, BuildOptions{NoHead: true})
	dir2 := t.TempDir()
	if err := kn.Save(dir2, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir2, Config{Estimator: "head"}); err == nil {
		t.Error("Open with estimator head on an index without a head succeeded")
	}
	if kn2, err := Open(dir2, Config{}); err != nil || kn2.Mode() != "knn" {
		t.Errorf("auto on an index without a head: mode %v, err %v; want knn", kn2, err)
	}
}

func TestReadHeadRejectsBadFiles(t *testing.T) {
	k := buildHead(t, Config{}, nil)
	var buf bytes.Buffer
	if err := k.Head().Write(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.String()
	if _, err := ReadHead(strings.NewReader(good)); err != nil {
		t.Fatalf("good head: %v", err)
	}
	for name, in := range map[string]string{
		"not json":       "{",
		"format":         strings.Replace(good, headFormat, "other-format", 1),
		"feature name":   strings.Replace(good, `"log_bytes"`, `"log_kilobytes"`, 1),
		"weights length": strings.Replace(good, `"quality_weights":[[`, `"quality_weights":[[0.5,`, 1),
	} {
		if _, err := ReadHead(strings.NewReader(in)); err == nil {
			t.Errorf("%s: ReadHead accepted a bad file", name)
		}
	}
}

// countingEmbedder counts the texts it embeds.
type countingEmbedder struct {
	Embedder
	texts atomic.Int64
}

func (c *countingEmbedder) Embed(ctx context.Context, texts []string, dst []float32) error {
	c.texts.Add(int64(len(texts)))
	return c.Embedder.Embed(ctx, texts, dst)
}

// TestObserveMemoLearnsTheSame: learning from a decided request through
// its memo changes the estimator exactly as learning from the prompt does,
// without embedding (or searching) again.
func TestObserveMemoLearnsTheSame(t *testing.T) {
	for _, mode := range []string{"knn", "head", "blend"} {
		t.Run(mode, func(t *testing.T) {
			b, _ := NewBuiltin(DefaultBuiltinConfig())
			recs := difficultyRecords(60, 0)
			b.Fit(func() []string {
				var s []string
				for _, r := range recs {
					s = append(s, r.Prompt)
				}
				return s
			}())
			cnt := &countingEmbedder{Embedder: b}
			viaMemo := buildHead(t, Config{Estimator: mode, OnlineCapacity: 8}, cnt)
			viaPrompt := buildHead(t, Config{Estimator: mode, OnlineCapacity: 8}, b)
			ctx := context.Background()
			prompts := []string{
				"Compute the sum of 5 and 6, then multiply the result by 3.",  // near a stored prompt
				"Translate this German poem about the sea into French verse.", // novel
				"Which capital city hosted festival 3?",
			}
			models := []string{"solver", "chatter", "poet"}
			out := make([]routing.PromptEstimate, len(prompts))
			if err := viaMemo.Estimate(ctx, prompts, models, nil, out); err != nil {
				t.Fatal(err)
			}
			before := cnt.texts.Load()
			for j, p := range prompts {
				for r := 0; r < 3; r++ {
					viaMemo.ObserveLengthMemo(out[j].Memo, p, "poet", 300+100*j)
					viaMemo.ObserveQualityMemo(out[j].Memo, p, "solver", 0.1*float64(j))
					viaPrompt.ObserveLength(p, "poet", 300+100*j)
					viaPrompt.ObserveQuality(p, "solver", 0.1*float64(j))
				}
			}
			if got := cnt.texts.Load() - before; got != 0 {
				t.Errorf("observations through memos embedded %d texts, want 0", got)
			}
			if hits, misses := viaMemo.MemoHits(); hits != 18 || misses != 0 {
				t.Errorf("memo hits/misses = %d/%d, want 18/0", hits, misses)
			}
			probe := append(prompts, "Compute the sum of 8 and 9.", "Which festival city?")
			a, c := make([]routing.PromptEstimate, len(probe)), make([]routing.PromptEstimate, len(probe))
			if err := viaMemo.Estimate(ctx, probe, models, nil, a); err != nil {
				t.Fatal(err)
			}
			if err := viaPrompt.Estimate(ctx, probe, models, nil, c); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(a, c, cmpopts.IgnoreFields(routing.PromptEstimate{}, "Memo")); d != "" {
				t.Errorf("learning via memo differs from learning via prompt (-memo +prompt):\n%s", d)
			}
			// An expired memo falls back to the prompt.
			viaMemo.ObserveLengthMemo(out[0].Memo+1000, prompts[0], "poet", 10)
			if _, misses := viaMemo.MemoHits(); misses != 1 {
				t.Errorf("expired memo: misses = %d, want 1", misses)
			}
		})
	}
}

func TestHeadLearnsOnline(t *testing.T) {
	k := buildHead(t, Config{}, nil)
	ctx := context.Background()
	p := "Compute the sum of 5 and 6, then multiply the result by 3. Show your arithmetic."
	trivia := "Which country's capital city hosted the famous festival number 5000? Answer with the city name."
	q := func(prompt, model string) (float64, float64) {
		out := make([]routing.PromptEstimate, 1)
		if err := k.Estimate(ctx, []string{prompt}, []string{model}, []float64{0.5}, out); err != nil {
			t.Fatal(err)
		}
		return out[0].Quality[0], out[0].Length[0]
	}
	q0, _ := q(p, "solver")
	for i := 0; i < 20; i++ {
		k.ObserveQuality(p, "solver", 0)
	}
	if q1, _ := q(p, "solver"); !(q1 < q0-0.2) {
		t.Errorf("Q̂ after 20 zero scores = %.3f, before %.3f: want a clear drop", q1, q0)
	}
	// A model the head never saw starts at the prior and learns.
	if q0, _ := q(p, "poet"); q0 != 0.5 {
		t.Errorf("unseen model Q̂ = %v, want prior 0.5", q0)
	}
	for i := 0; i < 20; i++ {
		k.ObserveQuality(p, "poet", 1)
		k.ObserveLength(p, "poet", 400)
	}
	if q1, l1 := q(p, "poet"); !(q1 > 0.8) || math.Abs(l1-400) > 4 {
		t.Errorf("after 20 observations poet Q̂ = %.3f, L̂ = %v: want > 0.8 and 400 ±1%%", q1, l1)
	}
	// Lengths are per predicted task; a task the model was never seen on
	// borrows from the two-way model log L = a_task + b_model: trivia
	// answers are ~10× shorter than arithmetic ones for solver and chatter
	// (20–25 vs 180–200), so poet's 400 becomes ~45 there.
	_, l0 := q(trivia, "poet")
	if l0 < 35 || l0 > 60 {
		t.Errorf("poet L̂ on trivia = %v, want ~45 (400 × the other models' trivia/arithmetic ratio)", l0)
	}
	for i := 0; i < 8; i++ {
		k.ObserveLength(trivia, "poet", 30)
	}
	if _, l := q(trivia, "poet"); !(l < l0-5 && l > 30) {
		t.Errorf("poet L̂ on trivia after 8 observations of 30 = %v, want between 30 and %v", l, l0-5)
	}
	if _, l := q(p, "poet"); math.Abs(l-400) > 12 {
		t.Errorf("poet L̂ on arithmetic = %v, want still 400 ±3%% (the two-way model's pull on a full cell)", l)
	}
}

func TestHeadEstimateAllocatesNothing(t *testing.T) {
	k := buildHead(t, Config{}, nil)
	prompts := []string{"Compute the sum of 5 and 6, then multiply the result by 3.", "Which capital city hosted festival 3?"}
	models := []string{"solver", "chatter", "poet"}
	out := make([]routing.PromptEstimate, 2)
	ctx := context.Background()
	_ = k.Estimate(ctx, prompts, models, nil, out)
	if a := testing.AllocsPerRun(50, func() { _ = k.Estimate(ctx, prompts, models, nil, out) }); a != 0 {
		t.Errorf("head Estimate allocates %v per call, want 0", a)
	}
}

func TestPromptFeatures(t *testing.T) {
	var f [NumPromptFeatures]float32
	PromptFeatures("Which of these?\nA) one\nB) two\n(C) three\nD. four", 0, &f)
	if got := math.Expm1(float64(f[6])); math.Abs(got-4) > 1e-4 {
		t.Errorf("choice lines = %v, want 4", got)
	}
	PromptFeatures("def f(x):\n    return x + 1", 0, &f)
	if f[5] == 0 || f[4] == 0 {
		t.Errorf("code/math markers of a function = %v/%v, want > 0", f[5], f[4])
	}
	PromptFeatures("who sings i've got to be me", 0, &f)
	if f[14] != 1 || f[15] != 0 {
		t.Errorf("starts_lower/ends_question = %v/%v, want 1/0", f[14], f[15])
	}
}

func FuzzPromptFeatures(f *testing.F) {
	for _, s := range []string{"", "?", "A) x\n", "def return import", "\xff\xfe", "$x^2$ = 3"} {
		f.Add(s, 16)
	}
	f.Fuzz(func(t *testing.T, s string, maxBytes int) {
		var v [NumPromptFeatures]float32
		PromptFeatures(s, maxBytes, &v)
		for i, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) || x < 0 {
				t.Fatalf("feature %s = %v for %q", PromptFeatureNames[i], x, s)
			}
		}
	})
}

// TestHeadRankConstrainsSlopes: with Rank 1 the within-task weights of
// all models (feature block) are multiples of one direction; with
// Rank < 0 (independent per model) they are not; both still learn the
// world's difficulty signal.
func TestHeadRankConstrainsSlopes(t *testing.T) {
	recs := difficultyRecords(60, 0)
	emb, err := NewBuiltin(DefaultBuiltinConfig())
	if err != nil {
		t.Fatal(err)
	}
	texts := make([]string, len(recs))
	for i, r := range recs {
		texts[i] = r.Prompt
	}
	emb.Fit(texts)
	d := emb.Dim()
	vecs := make([]float32, len(recs)*d)
	if err := emb.Embed(context.Background(), texts, vecs); err != nil {
		t.Fatal(err)
	}
	// maxMinor is the largest |2×2 minor| of the models' feature weights
	// relative to the product of the two rows' norms (0 for rank 1).
	maxMinor := func(h *Head) float64 {
		var worst float64
		for a := range h.qW {
			for b := a + 1; b < len(h.qW); b++ {
				wa, wb := h.qW[a][d:d+NumPromptFeatures], h.qW[b][d:d+NumPromptFeatures]
				na, nb := math.Sqrt(float64(dot32(wa, wa))), math.Sqrt(float64(dot32(wb, wb)))
				for j := range wa {
					for k := j + 1; k < len(wa); k++ {
						m := float64(wa[j]*wb[k]-wa[k]*wb[j]) / (na * nb)
						worst = max(worst, math.Abs(m))
					}
				}
			}
		}
		return worst
	}
	for _, rank := range []int{1, -1} {
		h, err := TrainHead(recs, vecs, d, featureMaxBytes, HeadConfig{Rank: rank})
		if err != nil {
			t.Fatal(err)
		}
		minor := maxMinor(h)
		if rank == 1 && minor > 1e-4 {
			t.Errorf("rank 1: feature weights have a 2×2 minor of %.3g, want rank 1", minor)
		}
		if rank < 0 && minor < 1e-2 {
			t.Errorf("independent slopes: largest minor %.3g, want clearly rank > 1", minor)
		}
		// The solver's difficulty (many numbers) is learned either way.
		x := make([]float32, h.width())
		xt := make([]float32, h.taskWidth())
		p := make([]float32, len(h.tasks))
		solver := indexOf(h.models)["solver"]
		var easy, hard float64
		for _, r := range difficultyRecords(20, 1000) {
			if r.Task != "math" {
				continue
			}
			var i int
			fmt.Sscanf(r.ID, "math-%d", &i)
			v := make([]float32, d)
			if err := emb.Embed(context.Background(), []string{r.Prompt}, v); err != nil {
				t.Fatal(err)
			}
			var raw [NumPromptFeatures]float32
			PromptFeatures(r.Prompt, featureMaxBytes, &raw)
			h.forward(v, &raw, xt, p, x)
			if i%2 == 0 {
				hard += h.quality(solver, x)
			} else {
				easy += h.quality(solver, x)
			}
		}
		if !(easy > hard+3) { // 10 easy and 10 hard prompts
			t.Errorf("rank %d: solver's summed Q̂ easy %.2f vs hard %.2f, want easy clearly higher", rank, easy, hard)
		}
	}
}
