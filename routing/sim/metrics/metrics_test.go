package metrics

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestPercentile(t *testing.T) {
	tests := []struct {
		vals []float64
		p    float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, 50, 2.5},
		{[]float64{1, 2, 3, 4}, 0, 1},
		{[]float64{1, 2, 3, 4}, 100, 4},
		{[]float64{1, 2, 3, 4, 5}, 50, 3},
		// h = 4·0.99 = 3.96 → 4 + 0.96·(5−4)
		{[]float64{1, 2, 3, 4, 5}, 99, 4.96},
		// h = 10·0.95 = 9.5 → between 10 and 100
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100}, 95, 55},
		{[]float64{7}, 99, 7},
	}
	for _, tt := range tests {
		if got := Percentile(tt.vals, tt.p); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tt.vals, tt.p, got, tt.want)
		}
	}
	if got := Percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("Percentile(nil) = %v, want NaN", got)
	}
}

func TestSummarize(t *testing.T) {
	got := Summarize([]float64{4, 1, 3, 2})
	want := Stats{N: 4, Mean: 2.5, Median: 2.5, P95: 3.85, P99: 3.97, Max: 4}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Errorf("Summarize (-want +got):\n%s", d)
	}
	if d := cmp.Diff(Stats{}, Summarize(nil)); d != "" {
		t.Errorf("Summarize(nil) (-want +got):\n%s", d)
	}
}

func TestTPOT(t *testing.T) {
	tests := []struct {
		name   string
		r      Record
		want   time.Duration
		wantOK bool
	}{
		{"11 tokens", Record{TTFT: 100 * time.Millisecond, E2E: 600 * time.Millisecond, OutputTokens: 11}, 50 * time.Millisecond, true},
		{"2 tokens", Record{TTFT: time.Second, E2E: 3 * time.Second, OutputTokens: 2}, 2 * time.Second, true},
		{"1 token", Record{TTFT: time.Second, E2E: 3 * time.Second, OutputTokens: 1}, 0, false},
		{"0 tokens", Record{OutputTokens: 0}, 0, false},
	}
	for _, tt := range tests {
		got, ok := tt.r.TPOT()
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: TPOT = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestSLOMet(t *testing.T) {
	slo := SLO{TTFT: 200 * time.Millisecond, TPOT: 50 * time.Millisecond, E2E: time.Second}
	tests := []struct {
		name string
		r    Record
		want bool
	}{
		{"all met", Record{TTFT: 200 * time.Millisecond, E2E: 700 * time.Millisecond, OutputTokens: 11}, true},
		{"ttft missed", Record{TTFT: 201 * time.Millisecond, E2E: 700 * time.Millisecond, OutputTokens: 11}, false},
		{"tpot missed", Record{TTFT: 100 * time.Millisecond, E2E: 700 * time.Millisecond, OutputTokens: 11}, false}, // 60 ms
		{"e2e missed", Record{TTFT: 100 * time.Millisecond, E2E: 1100 * time.Millisecond, OutputTokens: 30}, false},
		{"one token has no tpot", Record{TTFT: 100 * time.Millisecond, E2E: 900 * time.Millisecond, OutputTokens: 1}, true},
		{"failed", Record{Err: "boom"}, false},
	}
	for _, tt := range tests {
		if got := slo.Met(&tt.r); got != tt.want {
			t.Errorf("%s: Met = %v, want %v", tt.name, got, tt.want)
		}
	}
	if !(SLO{}).Met(&Record{E2E: time.Hour}) {
		t.Error("zero SLO must accept every successful request")
	}
}

func TestParseSLO(t *testing.T) {
	got, err := ParseSLO("ttft:500,tpot:50 e2el:2500.5")
	if err != nil {
		t.Fatal(err)
	}
	want := SLO{TTFT: 500 * time.Millisecond, TPOT: 50 * time.Millisecond, E2E: 2500500 * time.Microsecond}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ParseSLO (-want +got):\n%s", d)
	}
	if got.String() != "ttft:500,tpot:50,e2el:2500.5" {
		t.Errorf("String = %q", got.String())
	}
	for _, bad := range []string{"ttft", "ttft:x", "ttft:-1", "foo:10"} {
		if _, err := ParseSLO(bad); err == nil {
			t.Errorf("ParseSLO(%q) = nil error, want one", bad)
		}
	}
}

func TestSummarizeRun(t *testing.T) {
	s := time.Second
	ms := time.Millisecond
	recs := []Record{
		// starts at 0, ends at 1 s; 11 tokens → TPOT 80 ms; two ITL gaps.
		{Start: 0, TTFT: 200 * ms, E2E: s, PromptTokens: 100, OutputTokens: 11, ITL: []time.Duration{100 * ms, 300 * ms},
			Quality: 1, HasQuality: true, CostUSD: 0.002},
		// starts at 1 s, ends at 4 s; 2 tokens → TPOT 2 s.
		{Start: s, TTFT: s, E2E: 3 * s, PromptTokens: 300, OutputTokens: 2, CostUSD: 0.004},
		// failed: counts in Failed and the duration only.
		{Start: 2 * s, E2E: 500 * ms, Err: "500"},
		// starts at 3 s, ends at 3.4 s; 1 token: no TPOT.
		{Start: 3 * s, TTFT: 400 * ms, E2E: 400 * ms, PromptTokens: 100, OutputTokens: 1, Quality: 0, HasQuality: true},
	}
	got := SummarizeRun(recs, SLO{E2E: 2 * s}, 0)
	want := Summary{
		Completed: 3, Failed: 1, DurationS: 4,
		TotalInputTokens: 500, TotalOutputTokens: 14,
		RequestThroughput: 0.75, OutputThroughput: 3.5, TotalTokThroughput: 128.5,
		Goodput: 0.5, GoodFraction: 0.5,
		TTFTms:      Stats{N: 3, Mean: 1600.0 / 3, Median: 400, P95: 940, P99: 988, Max: 1000},
		TPOTms:      Stats{N: 2, Mean: 1040, Median: 1040, P95: 1904, P99: 1980.8, Max: 2000},
		ITLms:       Stats{N: 2, Mean: 200, Median: 200, P95: 290, P99: 298, Max: 300},
		E2Ems:       Stats{N: 3, Mean: 4400.0 / 3, Median: 1000, P95: 2800, P99: 2960, Max: 3000},
		MeanQuality: 0.5, QualityN: 2,
		TotalCostUSD: 0.006, CostPerRequestUSD: 0.002, CostPer1kTokUSD: 0.006 / 514 * 1000,
	}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Errorf("SummarizeRun (-want +got):\n%s", d)
	}
	if got := SummarizeRun(recs, SLO{}, 10*s); got.DurationS != 10 || got.RequestThroughput != 0.3 {
		t.Errorf("duration override: got %v s, %v req/s; want 10 s, 0.3 req/s", got.DurationS, got.RequestThroughput)
	}
}
