package estimate

import (
	"bytes"
	"context"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAUCAndPearson(t *testing.T) {
	tests := []struct {
		name           string
		scores, labels []float64
		auc            float64
	}{
		{"perfect", []float64{0.1, 0.2, 0.8, 0.9}, []float64{0, 0, 1, 1}, 1},
		{"inverted", []float64{0.9, 0.8, 0.2, 0.1}, []float64{0, 0, 1, 1}, 0},
		{"ties count half", []float64{0.5, 0.5, 0.5, 0.5}, []float64{0, 1, 0, 1}, 0.5},
		{"one mistake", []float64{0.1, 0.6, 0.4, 0.9}, []float64{0, 0, 1, 1}, 0.75},
		{"one class", []float64{0.1, 0.2}, []float64{1, 1}, math.NaN()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := AUC(tc.scores, tc.labels)
			if !(got == tc.auc || math.IsNaN(got) && math.IsNaN(tc.auc)) {
				t.Errorf("AUC = %v, want %v", got, tc.auc)
			}
		})
	}
	if r := Pearson([]float64{1, 2, 3}, []float64{2, 4, 6}); math.Abs(r-1) > 1e-12 {
		t.Errorf("Pearson of a line = %v, want 1", r)
	}
}

func TestEvaluateRoutingOutcome(t *testing.T) {
	rows := []EvalRow{
		{Truth: map[string]float64{"cheap": 1, "big": 1}, Pred: map[string]float64{"cheap": 0.9, "big": 0.8}},
		{Truth: map[string]float64{"cheap": 0, "big": 1}, Pred: map[string]float64{"cheap": 0.2, "big": 0.7}},
		{Truth: map[string]float64{"cheap": 0, "big": 0}, Pred: map[string]float64{"cheap": 0.4, "big": 0.3}},
		{Truth: map[string]float64{"cheap": 1, "big": 0}, Pred: map[string]float64{"cheap": 0.6, "big": 0.9}},
	}
	prices := map[string]Price{"cheap": {In: 0.1, Out: 0.1}, "big": {In: 0.9, Out: 0.9}}
	rep := Evaluate(rows, prices)
	got := []Outcome{rep.BestSingle, rep.Argmax, rep.Oracle, rep.Threshold[2]}
	want := []Outcome{
		// Both models score 0.5 on average; the cheaper wins the tie.
		{Rule: "best_single", Quality: 0.5, Price: 0.1, Model: "cheap"},
		// argmax picks cheap, big, cheap, big: truths 1, 1, 0, 0.
		{Rule: "argmax", Quality: 0.5, Price: 0.5},
		// oracle: cheap(1), big(1), cheap(0, tie → cheaper), cheap(1).
		{Rule: "oracle", Quality: 0.75, Price: 0.3},
		// t = 0.5: cheap, big, argmax → cheap, cheap: truths 1, 1, 0, 1.
		{Rule: "threshold_0.5", Quality: 0.75, Price: 0.3},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-12 })); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if rep.Models[0].Model != "cheap" || rep.Models[0].AUC != 1 || rep.Models[1].AUC != 0.5 {
		t.Errorf("model scores = %+v, want cheap AUC 1 first, big AUC 0.5", rep.Models)
	}
}

func TestBuiltinEmbedder(t *testing.T) {
	b, err := NewBuiltin(DefaultBuiltinConfig())
	if err != nil {
		t.Fatal(err)
	}
	corpus := []string{"the cat sat on the mat", "the dog sat on the log", "solve the integral of x squared", "the the the"}
	b.Fit(corpus)
	ctx := context.Background()
	texts := []string{"The cat sat on the mat!", "the cat sat on the mat", "integral of x squared", ""}
	v := make([]float32, len(texts)*b.Dim())
	if err := b.Embed(ctx, texts, v); err != nil {
		t.Fatal(err)
	}
	d := b.Dim()
	row := func(i int) []float32 { return v[i*d : (i+1)*d] }
	dot := func(a, c []float32) float64 {
		var s float64
		for i := range a {
			s += float64(a[i]) * float64(c[i])
		}
		return s
	}
	if n := dot(row(0), row(0)); math.Abs(n-1) > 1e-5 {
		t.Errorf("norm² = %v, want 1", n)
	}
	if s := dot(row(0), row(1)); math.Abs(s-1) > 1e-5 {
		t.Errorf("case and punctuation changed the vector: cos = %v, want 1", s)
	}
	if a, c := dot(row(0), row(1)), dot(row(0), row(2)); !(c < 0.3 && a > c) {
		t.Errorf("cos(cat, cat) = %v, cos(cat, integral) = %v; want the second small", a, c)
	}
	if n := dot(row(3), row(3)); n != 0 {
		t.Errorf("empty text norm² = %v, want 0", n)
	}
	// The IDF table survives a write/read round trip.
	var buf bytes.Buffer
	if err := b.WriteIDF(&buf); err != nil {
		t.Fatal(err)
	}
	b2, _ := NewBuiltin(DefaultBuiltinConfig())
	if err := b2.ReadIDF(&buf); err != nil {
		t.Fatal(err)
	}
	v2 := make([]float32, len(texts)*d)
	_ = b2.Embed(ctx, texts, v2)
	if diff := cmp.Diff(v, v2); diff != "" {
		t.Errorf("embeddings differ after IDF round trip:\n%s", diff)
	}
	if err := b2.ReadIDF(bytes.NewReader([]byte("RBIDF001\x00\x00\x00\x01"))); err == nil {
		t.Error("ReadIDF of a truncated file: got nil error")
	}
	if _, err := NewBuiltin(BuiltinConfig{Dim: 3}); err == nil {
		t.Error("NewBuiltin(dim 3): got nil error")
	}
}
