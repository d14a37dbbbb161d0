package estimate

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/routebalance/routebalance/routing"
)

// refFitLengths is fitLengths as first written: every refit computes each
// cell's weight min(n, 32) and exp(logMean) itself. The cached fitW and
// expLog must give the same bits.
func refFitLengths(k *KNN) (lenA []float64, lenB []float64, ratio float64) {
	T := len(k.lenA)
	lenA = append([]float64(nil), k.lenA...)
	lenB = make([]float64, len(k.models))
	for i, c := range k.models {
		lenB[i] = c.lenB
	}
	var rs, rw float64
	for _, c := range k.models {
		for t := range c.taskLen {
			if cell := &c.taskLen[t]; cell.n > 0 && t < T {
				w := math.Min(cell.n, 32)
				rs += w * cell.mean / math.Exp(cell.logMean)
				rw += w
			}
		}
	}
	ratio = 1
	if rw > 0 {
		ratio = rs / rw
	}
	for sweep := 0; sweep < 6; sweep++ {
		for t := 0; t < T; t++ {
			var s, w float64
			for i, c := range k.models {
				if t < len(c.taskLen) && c.taskLen[t].n > 0 {
					wi := math.Min(c.taskLen[t].n, 32)
					s += wi * (c.taskLen[t].logMean - lenB[i])
					w += wi
				}
			}
			if w > 0 {
				lenA[t] = s / w
			}
		}
		for i, c := range k.models {
			var s, w float64
			for t := range c.taskLen {
				if t < T && c.taskLen[t].n > 0 {
					wi := math.Min(c.taskLen[t].n, 32)
					s += wi * (c.taskLen[t].logMean - lenA[t])
					w += wi
				}
			}
			if w > 0 {
				lenB[i] = s / w
			}
		}
	}
	return lenA, lenB, ratio
}

// TestFitLengthsMatchesReference: after every observation, the two-way
// length model fitted from the cells' cached weights and exponentials is
// bit for bit the one the reference computes from the cells' counts and
// log means, from the same starting point; and learning a length through
// a decision's memo (the task it stored) leaves the same model as learning
// it from the prompt.
func TestFitLengthsMatchesReference(t *testing.T) {
	viaMemo := buildHead(t, Config{}, nil)
	viaPrompt := buildHead(t, Config{}, nil)
	models := []string{"solver", "chatter", "poet"}
	prompts := make([]string, 0, 24)
	for _, r := range difficultyRecords(12, 500) {
		prompts = append(prompts, r.Prompt)
	}
	out := make([]routing.PromptEstimate, len(prompts))
	if err := viaMemo.Estimate(context.Background(), prompts, models, nil, out); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300; i++ {
		j := (i * 7) % len(prompts)
		m := models[i%len(models)]
		tokens := 20 + (i*37)%500
		viaMemo.ObserveLengthMemo(out[j].Memo, prompts[j], m, tokens)
		viaPrompt.ObserveLength(prompts[j], m, tokens)

		// One refit from the state the observation left, by both formulas;
		// then that state is put back, so both KNNs stay in step.
		viaMemo.mu.Lock()
		gotA := append([]float64(nil), viaMemo.lenA...)
		gotB := make([]float64, len(viaMemo.models))
		for i, c := range viaMemo.models {
			gotB[i] = c.lenB
		}
		gotR := viaMemo.lenRatio
		refA, refB, refR := refFitLengths(viaMemo)
		viaMemo.fitLengths()
		for t2 := range refA {
			if refA[t2] != viaMemo.lenA[t2] {
				viaMemo.mu.Unlock()
				t.Fatalf("observation %d: lenA[%d] = %v, reference %v", i, t2, viaMemo.lenA[t2], refA[t2])
			}
		}
		for m2, c := range viaMemo.models {
			if refB[m2] != c.lenB {
				viaMemo.mu.Unlock()
				t.Fatalf("observation %d: lenB[%s] = %v, reference %v", i, c.name, c.lenB, refB[m2])
			}
		}
		if refR != viaMemo.lenRatio {
			viaMemo.mu.Unlock()
			t.Fatalf("observation %d: lenRatio = %v, reference %v", i, viaMemo.lenRatio, refR)
		}
		copy(viaMemo.lenA, gotA)
		for i, c := range viaMemo.models {
			c.lenB = gotB[i]
		}
		viaMemo.lenRatio = gotR
		viaMemo.mu.Unlock()
	}
	probe := append(prompts[:4:4], "Compute the sum of 2 and 9, then multiply the result by 4.")
	a, b := make([]routing.PromptEstimate, len(probe)), make([]routing.PromptEstimate, len(probe))
	if err := viaMemo.Estimate(context.Background(), probe, models, nil, a); err != nil {
		t.Fatal(err)
	}
	if err := viaPrompt.Estimate(context.Background(), probe, models, nil, b); err != nil {
		t.Fatal(err)
	}
	for j := range probe {
		for m := range models {
			if a[j].Length[m] != b[j].Length[m] {
				t.Errorf("prompt %d model %s: length %v via memo, %v via prompt", j, models[m], a[j].Length[m], b[j].Length[m])
			}
		}
	}
	if hits, misses := viaMemo.MemoHits(); hits != 300 || misses != 0 {
		t.Errorf("memo hits/misses = %d/%d, want 300/0", hits, misses)
	}
	if viaMemo.lenRatio == 1 || fmt.Sprint(viaMemo.lenA) == fmt.Sprint(make([]float64, len(viaMemo.lenA))) {
		t.Errorf("the length model never moved (ratio %v, lenA %v): the test observed nothing", viaMemo.lenRatio, viaMemo.lenA)
	}
}
