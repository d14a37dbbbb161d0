package fleet

import (
	"math"
	"strings"
	"testing"
)

// FuzzParseMetrics: /metrics is written by the tenant's upstream, so any
// text must give either an error or counts the scheduler can use: finite,
// not negative, KV use a fraction. (The NaN, -3, 7 and +Inf seeds were
// all accepted before: they now make the scrape fail.)
func FuzzParseMetrics(f *testing.F) {
	for _, s := range []string{
		"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n" +
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 1\n" +
			"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n",
		"vllm:num_requests_running 2\nvllm:num_requests_running{engine=\"1\"} 5\n",
		"vllm:gpu_cache_usage_perc 0.5\n",
		"vllm:num_requests_running NaN\n",
		"vllm:num_requests_waiting -3\n",
		"vllm:kv_cache_usage_perc 7\n",
		"vllm:num_requests_running +Inf\n",
		"process_cpu_seconds_total 12\n",
		"vllm:num_requests_running{a=\"\\\"\"} 1 1700000000000\n",
		"# HELP x\n# TYPE x counter\nx 1\n",
		"garbage {{{",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, page string) {
		s, err := ParseMetrics(strings.NewReader(page))
		if err != nil {
			if s != (Scrape{}) {
				t.Fatalf("error %v with a non-zero scrape %+v", err, s)
			}
			return
		}
		for name, v := range map[string]float64{"running": s.Running, "waiting": s.Waiting, "kv": s.KVUsage} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Fatalf("ParseMetrics(%q): %s = %v, want a finite count >= 0", page, name, v)
			}
		}
		if s.KVUsage > 1 {
			t.Fatalf("ParseMetrics(%q): KV usage %v > 1", page, s.KVUsage)
		}
	})
}
