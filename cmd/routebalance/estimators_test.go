package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/routebalance/routebalance/infra/vllmemu"
	"github.com/routebalance/routebalance/routing/engine"
)

// writeLabelled writes a tiny labelled set: arithmetic prompts "solver"
// gets right and trivia prompts "chatter" gets right.
func writeLabelled(t *testing.T, path string, n, offset int) {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for i := offset; i < offset+n; i++ {
		enc.Encode(map[string]any{"id": fmt.Sprintf("m%d", i), "task": "math",
			"prompt": fmt.Sprintf("Compute %d plus %d and explain the arithmetic step by step.", i, 2*i),
			"scores": map[string]float64{"solver": 1, "chatter": 0}, "output_tokens": map[string]float64{"solver": 150, "chatter": 90}})
		enc.Encode(map[string]any{"id": fmt.Sprintf("t%d", i), "task": "trivia",
			"prompt": fmt.Sprintf("Name the capital city of country number %d in the atlas.", i),
			"scores": map[string]float64{"solver": 0, "chatter": 1}, "output_tokens": map[string]float64{"solver": 12, "chatter": 8}})
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestIndexBuildAndEstimateCommands(t *testing.T) {
	dir := t.TempDir()
	train, test := filepath.Join(dir, "train.jsonl"), filepath.Join(dir, "test.jsonl")
	writeLabelled(t, train, 30, 0)
	writeLabelled(t, test, 5, 100)
	models := `{"model_info":{"solver":{"input_price":0.9,"output_price":0.9},"chatter":{"input_price":0.1,"output_price":0.1}}}`
	if err := os.WriteFile(filepath.Join(dir, "models.json"), []byte(models), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	idx := filepath.Join(dir, "idx")
	if code := run(context.Background(), []string{"index", "build", "--data", train, "--out", idx}, &stdout, &stderr); code != 0 {
		t.Fatalf("index build exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "embedding [") {
		t.Errorf("index build drew no progress bar on stderr: %q", stderr.String())
	}
	preds := filepath.Join(dir, "preds.jsonl")
	stdout.Reset()
	if code := run(context.Background(), []string{"estimate", "--index", idx, "--data", test, "--out", preds}, &stdout, &stderr); code != 0 {
		t.Fatalf("estimate exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := lines[len(lines)-1]
	if want := "summary: auc=1.0000 argmax_quality=1.0000 best_single=0.5000 oracle=1.0000"; last != want {
		t.Errorf("last line = %q, want %q\n%s", last, want, stdout.String())
	}
	if !strings.Contains(stdout.String(), "threshold_0.3") {
		t.Errorf("summary lacks the threshold rules:\n%s", stdout.String())
	}
	f, err := os.Open(preds)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var ids []string
	for sc.Scan() {
		var p struct {
			ID           string             `json:"id"`
			Quality      map[string]float64 `json:"quality"`
			OutputTokens map[string]float64 `json:"output_tokens"`
		}
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
		if len(p.Quality) != 2 || len(p.OutputTokens) != 2 {
			t.Errorf("prediction %s: %d qualities, %d lengths, want 2 each", p.ID, len(p.Quality), len(p.OutputTokens))
		}
		if p.ID[0] == 'm' && !(p.Quality["solver"] > p.Quality["chatter"] && p.OutputTokens["solver"] == 150) {
			t.Errorf("math prompt %s: %+v", p.ID, p)
		}
	}
	if got := strings.Join(ids, ","); got != "m100,t100,m101,t101,m102,t102,m103,t103,m104,t104" {
		t.Errorf("prediction order = %s, want the input order", got)
	}

	// Split is reproducible and complete.
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	for i := 0; i < 2; i++ {
		if code := run(context.Background(), []string{"index", "split", "--data", train, "--test-frac", "0.3", "--seed", "4", "--train-out", a, "--test-out", b}, &stdout, &stderr); code != 0 {
			t.Fatalf("split exit %d: %s", code, stderr.String())
		}
	}
	ta, _ := os.ReadFile(a)
	tb, _ := os.ReadFile(b)
	all, _ := os.ReadFile(train)
	if n := bytes.Count(ta, []byte("\n")) + bytes.Count(tb, []byte("\n")); n != bytes.Count(all, []byte("\n")) || len(tb) == 0 {
		t.Errorf("split wrote %d lines (test %d bytes), want all %d", n, len(tb), bytes.Count(all, []byte("\n")))
	}

	if code := run(context.Background(), []string{"index", "build", "--out", idx}, &stdout, &stderr); code != 2 {
		t.Errorf("index build without --data: exit %d, want 2", code)
	}
}

func TestProfileAgainstEmulator(t *testing.T) {
	f := engine.ReferenceCluster()
	f.Tiers = f.Tiers[3:4]
	f.Tiers[0].Instances = 1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := vllmemu.StartCluster(ctx, vllmemu.Config{File: f, TimeScale: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out := filepath.Join(t.TempDir(), "sweep.csv")
	var stdout, stderr bytes.Buffer
	args := []string{"profile", "--endpoint", c.Instances[0].URL, "--model", f.Tiers[0].Model, "--rates", "20,40",
		"--duration", "2s", "--time-scale", "0.05", "--max-tokens", "32", "--out", out}
	if code := run(ctx, args, &stdout, &stderr); code != 0 {
		t.Fatalf("profile exit %d: %s", code, stderr.String())
	}
	fh, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	recs, err := csv.NewReader(fh).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(recs[0], ",") != strings.Join(profileColumns, ",") {
		t.Fatalf("header = %v", recs[0])
	}
	if len(recs) < 20 {
		t.Fatalf("%d rows, want at least 20 from 2 s at 20 and 40 req/s", len(recs)-1)
	}
	ok := 0
	for _, r := range recs[1:] {
		if r[12] == "" && r[9] != "0" {
			ok++
		}
	}
	if ok < len(recs[1:])/2 {
		t.Errorf("only %d of %d rows succeeded with a TPOT", ok, len(recs)-1)
	}
	stdout.Reset()
	if code := run(ctx, []string{"profile", "eval", "--data", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("profile eval exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "analytic  tpot_mape=") {
		t.Errorf("profile eval output:\n%s", stdout.String())
	}
}
