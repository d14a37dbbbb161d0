package fleet

import (
	"math"
	"os"
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

// sameFamilies reports whether two readings of a page agree.
func sameFamilies(a, b *families) bool {
	same := func(x, y float64) bool { return x == y || math.IsNaN(x) && math.IsNaN(y) }
	for _, p := range [][2]*family{{&a.running, &b.running}, {&a.waiting, &b.waiting}, {&a.kv, &b.kv}, {&a.kvOld, &b.kvOld}} {
		x, y := p[0], p[1]
		if x.present != y.present || x.n != y.n || x.hasBad != y.hasBad || !same(x.sum, y.sum) || !same(x.bad, y.bad) {
			return false
		}
	}
	return true
}

// FuzzScanMetricsMatchesExpfmt: whenever the Prometheus text parser
// accepts a page and scanMetrics reads it (rather than handing it back),
// both read the same four families — presence, sample count, sum in page
// order and the last bad sample.
func FuzzScanMetricsMatchesExpfmt(f *testing.F) {
	for _, name := range []string{"vllm-v1.metrics", "vllm-v0.metrics", "not-vllm.metrics"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	for _, s := range []string{
		"vllm:num_requests_running 1\nfoo 2\nvllm:num_requests_running 3\n",
		"# HELP vllm:num_requests_running\n",
		"# HELP vllm:num_requests_running Number of requests.\n# TYPE vllm:num_requests_running gauge\n",
		"# TYPE vllm:num_requests_running histogram\nvllm:num_requests_running_bucket{le=\"+Inf\"} 1\n",
		"# TYPE vllm:num_requests_running counter\nvllm:num_requests_running 4\n",
		"vllm:num_requests_running{a=\"x\\ny\",b=\"\\\\\"} 2 -17\n",
		"vllm:num_requests_running{a=\"b\",} 2\n",
		"vllm:num_requests_running{} 2\n",
		"vllm:num_requests_running  2\n",
		"vllm:num_requests_running\t2\n",
		"vllm:num_requests_running 0x1p3\n",
		"vllm:num_requests_running 1_0\n",
		"vllm:num_requests_running 1e400\n",
		"vllm:num_requests_running inf\nvllm:num_requests_waiting nan\n",
		"vllm:num_requests_running 2\r\n",
		"{\"vllm:num_requests_running\"} 2\n",
		"{\"vllm:num_requests_running\",a=\"b\"} 2\n",
		"  vllm:num_requests_running 2\n",
		"vllm:num_requests_running_total 9\nxvllm:num_requests_running 9\n",
		"foo{x=\"vllm:num_requests_running\"} 1\nvllm:kv_cache_usage_perc 0.5\nvllm:kv_cache_usage_perc{e=\"1\"} 0.25\n",
		"# TYPE vllm:num_requests_running gauge\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n",
		"vllm:num_requests_running 1\n# TYPE vllm:num_requests_running gauge\n",
		"vllm:gpu_cache_usage_perc 0.5\n# TYPE vllm:kv_cache_usage_perc gauge\n",
		"vllm:num_requests_running 3 +5\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, page string) {
		var want families
		if err := parseMetricsText([]byte(page), &want); err != nil {
			return // refused by the Prometheus parser: scanMetrics may still read the gauges
		}
		var got families
		if !scanMetrics([]byte(page), &got) {
			return // handed back: ParseMetrics uses the parser's reading
		}
		if !sameFamilies(&got, &want) {
			t.Fatalf("page %q:\nscan    %+v\nexpfmt  %+v", page, got, want)
		}
	})
}

// TestScanMetricsReadsVLLMPages: the pages vLLM (v0, v1) and the emulator
// serve are read by the scanner itself, not handed back to expfmt, and
// read as expfmt reads them.
func TestScanMetricsReadsVLLMPages(t *testing.T) {
	for _, name := range []string{"vllm-v1.metrics", "vllm-v0.metrics", "not-vllm.metrics"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var got, want families
		if !scanMetrics(b, &got) {
			t.Errorf("%s: handed back to expfmt", name)
			continue
		}
		if err := parseMetricsText(b, &want); err != nil {
			t.Fatal(err)
		}
		if !sameFamilies(&got, &want) {
			t.Errorf("%s: scan %+v, expfmt %+v", name, got, want)
		}
	}
}

// BenchmarkParseMetrics: the scanner against expfmt's parser on vLLM's page.
func BenchmarkParseMetrics(b *testing.B) {
	page, err := os.ReadFile("testdata/vllm-v1.metrics")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var fs families
			if !scanMetrics(page, &fs) {
				b.Fatal("handed back")
			}
		}
	})
	b.Run("expfmt", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var fs families
			if err := parseMetricsText(page, &fs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
