package workload

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRead(t *testing.T) {
	in := `{"id":"a","prompt":"hi","task":"gsm8k","scores":{"m1":1,"m2":0}}

{"prompt":"no labels"}
`
	got, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Item{
		{ID: "a", Prompt: "hi", Task: "gsm8k", Scores: map[string]float64{"m1": 1, "m2": 0}},
		{ID: "line-3", Prompt: "no labels"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Read (-want +got):\n%s", d)
	}
	if q, ok := got[0].Quality("m2"); !ok || q != 0 {
		t.Errorf("Quality(m2) = %v, %v; want 0, true", q, ok)
	}
	if _, ok := got[1].Quality("m1"); ok {
		t.Error("unlabelled item reports a label")
	}
	for _, bad := range []string{"", `{"id":"x"}`, `{"prompt":`} {
		if _, err := Read(strings.NewReader(bad)); err == nil {
			t.Errorf("Read(%q) = nil error, want one", bad)
		}
	}
}

func TestSample(t *testing.T) {
	items := []Item{{ID: "0"}, {ID: "1"}, {ID: "2"}, {ID: "3"}}
	// Without replacement: every item at most once.
	got := Sample(items, 4, 7)
	seen := map[string]bool{}
	for _, it := range got {
		if seen[it.ID] {
			t.Fatalf("Sample(4 of 4) repeated %s: %v", it.ID, got)
		}
		seen[it.ID] = true
	}
	// With replacement when n exceeds the data; deterministic per seed.
	a, b := Sample(items, 50, 3), Sample(items, 50, 3)
	if d := cmp.Diff(a, b); d != "" {
		t.Errorf("same seed, different samples:\n%s", d)
	}
	if len(a) != 50 {
		t.Errorf("len = %d, want 50", len(a))
	}
	if d := cmp.Diff(a, Sample(items, 50, 4)); d == "" {
		t.Error("different seeds gave the same sample")
	}
}

func TestArrivalsDeterministicAndShaped(t *testing.T) {
	if d := cmp.Diff(Arrivals(5, math.Inf(1), 1, 1), make([]time.Duration, 5)); d != "" {
		t.Errorf("infinite rate must send all at 0:\n%s", d)
	}
	a := Arrivals(100, 10, 1, 42)
	if a[0] != 0 {
		t.Errorf("first arrival = %v, want 0", a[0])
	}
	for k := 1; k < len(a); k++ {
		if a[k] < a[k-1] {
			t.Fatalf("arrivals not sorted at %d: %v < %v", k, a[k], a[k-1])
		}
	}
	if d := cmp.Diff(a, Arrivals(100, 10, 1, 42)); d != "" {
		t.Errorf("same seed, different arrivals:\n%s", d)
	}
	// Mean gap is 1/rate and the squared coefficient of variation is
	// 1/burstiness (gamma with shape b): check both on a large sample.
	for _, b := range []float64{0.5, 1, 4} {
		const n = 200000
		arr := Arrivals(n, 8, b, 9)
		var sum, sq float64
		for k := 1; k < n; k++ {
			g := (arr[k] - arr[k-1]).Seconds()
			sum += g
			sq += g * g
		}
		mean := sum / (n - 1)
		cv2 := (sq/(n-1) - mean*mean) / (mean * mean)
		if math.Abs(mean-0.125) > 0.125*0.02 {
			t.Errorf("burstiness %v: mean gap %v, want 0.125 ± 2%%", b, mean)
		}
		if math.Abs(cv2-1/b) > 0.05/b {
			t.Errorf("burstiness %v: CV² %v, want %v ± 5%%", b, cv2, 1/b)
		}
	}
}

func TestGammaMoments(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, shape := range []float64{0.3, 1, 2.5} {
		const n = 200000
		var sum, sq float64
		for range n {
			x := Gamma(rng, shape)
			sum += x
			sq += x * x
		}
		mean := sum / n
		v := sq/n - mean*mean
		if math.Abs(mean-shape) > 0.02*shape || math.Abs(v-shape) > 0.05*shape {
			t.Errorf("Gamma(%v): mean %v var %v, want both %v", shape, mean, v, shape)
		}
	}
}
