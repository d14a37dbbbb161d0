package estimate

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/routebalance/routebalance/infra/clusters"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
)

// TestLengthAccuracyOnData measures L̂ against the simulated world's
// output lengths (the calibrated reference-13 cluster, world seed 1 as
// routing/sim uses it) on labelled data: the estimator of the index
// RB_LEN_INDEX learns the true length of every prompt of RB_LEN_FIT on
// every fleet model (ObserveLength, as served requests would teach it),
// then predicts the prompts of RB_LEN_VAL. Printed per model: MAE in
// tokens and mean |ln L̂ − ln L| for the estimator and for the best
// task-level estimate (each model's world mean on the prompt's true task;
// for log-MAE also its median, the log-MAE optimum), and Σ L / Σ L̂. Skipped unless the
// three variables are set (the numbers are in README.md, "Lengths
// against the task-level ceiling"). It fails when L̂ is biased by more
// than a quarter over all prompts or its MAE exceeds the task-level
// estimate's by more than a quarter.
func TestLengthAccuracyOnData(t *testing.T) {
	dir, fit, val := os.Getenv("RB_LEN_INDEX"), os.Getenv("RB_LEN_FIT"), os.Getenv("RB_LEN_VAL")
	if dir == "" || fit == "" || val == "" {
		t.Skip("set RB_LEN_INDEX, RB_LEN_FIT and RB_LEN_VAL to measure length accuracy on data")
	}
	f, err := engine.ParseCluster(clusters.Reference13())
	if err != nil {
		t.Fatal(err)
	}
	const worldSeed = 1
	var models []string
	verb := map[string]float64{}
	for _, tr := range f.Tiers {
		if _, ok := verb[tr.Model]; !ok {
			models = append(models, tr.Model)
			verb[tr.Model] = tr.Verbosity
		}
	}
	ol := &f.OutputLengths
	trueLen := func(p lenItem, m string) float64 {
		return float64(ol.Natural(p.Prompt, m, p.Task, verb[m], worldSeed))
	}
	knn, err := Open(dir, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range readLenItems(t, fit) {
		for _, m := range models {
			knn.ObserveLength(p.Prompt, m, int(trueLen(p, m)))
		}
	}
	vals := readLenItems(t, val)
	type acc struct{ mae, lmae, tmae, tlmae, tlmean, sumL, sumHat, n float64 }
	res := make([]acc, len(models))
	priors := make([]float64, len(models))
	out := make([]routing.PromptEstimate, 1)
	for _, p := range vals {
		if err := knn.Estimate(context.Background(), []string{p.Prompt}, models, priors, out); err != nil {
			t.Fatal(err)
		}
		for m, name := range models {
			l, hat := trueLen(p, name), out[0].Length[m]
			med := ol.Median(p.Task) * verb[name]
			mean := med * math.Exp(ol.Sigma*ol.Sigma/2)
			r := &res[m]
			r.mae += math.Abs(hat - l)
			r.lmae += math.Abs(math.Log(max(hat, 1)) - math.Log(l))
			r.tmae += math.Abs(mean - l)
			r.tlmae += math.Abs(math.Log(med) - math.Log(l))
			r.tlmean += math.Abs(math.Log(mean) - math.Log(l))
			r.sumL += l
			r.sumHat += hat
			r.n++
		}
	}
	fmt.Printf("lengths on %d prompts of %s (index %s, learned from %s):\n", len(vals), val, dir, fit)
	fmt.Printf("%-34s %9s %9s %9s %9s %9s %9s\n", "model", "MAE", "task MAE", "logMAE", "task log", "(median)", "ΣL/ΣL̂")
	for m, name := range models {
		r := res[m]
		fmt.Printf("%-34s %9.1f %9.1f %9.3f %9.3f %9.3f %9.3f\n", name, r.mae/r.n, r.tmae/r.n, r.lmae/r.n, r.tlmean/r.n, r.tlmae/r.n, r.sumL/r.sumHat)
		if b := r.sumL / r.sumHat; b < 0.8 || b > 1.25 {
			t.Errorf("%s: Σ L / Σ L̂ = %.3f, want within 0.8–1.25", name, b)
		}
		if r.mae > 1.25*r.tmae {
			t.Errorf("%s: MAE %.1f tokens, more than 1.25 × the task-level %.1f", name, r.mae/r.n, r.tmae/r.n)
		}
	}
}

type lenItem struct {
	Prompt string `json:"prompt"`
	Task   string `json:"task"`
}

func readLenItems(t *testing.T, path string) []lenItem {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	var items []lenItem
	for sc.Scan() {
		var it lenItem
		if err := json.Unmarshal(sc.Bytes(), &it); err != nil {
			t.Fatal(err)
		}
		items = append(items, it)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return items
}
