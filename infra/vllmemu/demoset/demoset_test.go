package demoset

import (
	"bytes"
	"regexp"
	"testing"
)

func TestEmbeddedMatchesGenerator(t *testing.T) {
	if got := Encode(Generate(Seed)); !bytes.Equal(got, JSONL()) {
		t.Fatal("demo.jsonl differs from Generate(Seed); run go generate ./infra/vllmemu/demoset")
	}
}

func TestItemsWellFormed(t *testing.T) {
	items, err := Items()
	if err != nil {
		t.Fatal(err)
	}
	if want := len(taskOrder) * 3 * PerLevel; len(items) != want {
		t.Fatalf("items = %d, want %d", len(items), want)
	}
	leftover := regexp.MustCompile(`[{}]`)
	ids := map[string]bool{}
	for _, it := range items {
		if ids[it.ID] {
			t.Errorf("duplicate id %s", it.ID)
		}
		ids[it.ID] = true
		if leftover.MatchString(it.Prompt) {
			t.Errorf("%s: unfilled slot in %q", it.ID, it.Prompt)
		}
		if len(it.Scores) != len(Models()) {
			t.Errorf("%s: %d scores", it.ID, len(it.Scores))
		}
		for _, m := range Models() {
			if q, ok := it.Scores[m]; !ok || (q != 0 && q != 1) {
				t.Errorf("%s: score of %s = %v, %v", it.ID, m, q, ok)
			}
			if n := it.OutputTokens[m]; n < 1 {
				t.Errorf("%s: output tokens of %s = %v", it.ID, m, n)
			}
		}
	}
}

// TestQualityStructure checks the labels carry what routing can learn:
// difficulty lowers every model's mean score, the strongest model leads
// overall, and picking the best model per prompt beats any single model.
func TestQualityStructure(t *testing.T) {
	items, _ := Items()
	models := Models()
	mean := map[string]float64{}
	byLevel := map[string][3]float64{}
	oracle := 0.0
	for _, it := range items {
		lvl := 0
		switch {
		case bytes.Contains([]byte(it.ID), []byte("-medium-")):
			lvl = 1
		case bytes.Contains([]byte(it.ID), []byte("-hard-")):
			lvl = 2
		}
		best := 0.0
		for _, m := range models {
			q := it.Scores[m]
			mean[m] += q / float64(len(items))
			l := byLevel[m]
			l[lvl] += q
			byLevel[m] = l
			best = max(best, q)
		}
		oracle += best / float64(len(items))
	}
	for _, m := range models {
		l := byLevel[m]
		if !(l[0] > l[1] && l[1] > l[2]) {
			t.Errorf("%s: correct answers by level %v do not fall with difficulty", m, l)
		}
		if mean[m] > mean[models[0]] {
			t.Errorf("%s mean %.3f beats the strongest model's %.3f", m, mean[m], mean[models[0]])
		}
	}
	if oracle < mean[models[0]]+0.1 {
		t.Errorf("oracle %.3f is not clearly above the best single model %.3f", oracle, mean[models[0]])
	}
	t.Logf("means %v, oracle %.3f", mean, oracle)
}
