package vllmemu

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/routebalance/routebalance/routing/engine"
)

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.advanceLocked()
	st, stats := s.eng.State(), s.eng.Stats()
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_ = WriteMetrics(w, s.model, st, &stats)
}

// WriteMetrics writes an instance's state and statistics in the Prometheus
// text format (version 0.0.4) under vLLM's metric names, each with the
// label model_name.
func WriteMetrics(w io.Writer, model string, st engine.State, stats *engine.Stats) error {
	b := bufio.NewWriter(w)
	lbl := `model_name="` + escapeLabel(model) + `"`
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s gauge\n%s{%s} %s\n", name, help, name, name, lbl, num(v))
	}
	counter := func(name, help string, v uint64) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s counter\n%s{%s} %d\n", name, help, name, name, lbl, v)
	}
	hist := func(name, help string, h *engine.Histogram) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
		cum := h.Cumulative()
		for i, bound := range h.Bounds {
			fmt.Fprintf(b, "%s_bucket{le=\"%s\",%s} %d\n", name, num(bound), lbl, cum[i])
		}
		fmt.Fprintf(b, "%s_bucket{le=\"+Inf\",%s} %d\n", name, lbl, h.Count)
		fmt.Fprintf(b, "%s_sum{%s} %s\n%s_count{%s} %d\n", name, lbl, num(h.Sum), name, lbl, h.Count)
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", float64(st.Running))
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", float64(st.Waiting))
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", st.KVUsage)
	counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", stats.PromptTokens)
	counter("vllm:generation_tokens_total", "Number of generation tokens processed.", stats.GenerationTokens)
	const succ = "vllm:request_success_total"
	fmt.Fprintf(b, "# HELP %s Count of successfully processed requests.\n# TYPE %s counter\n", succ, succ)
	fmt.Fprintf(b, "%s{finished_reason=\"stop\",%s} %d\n", succ, lbl, stats.SuccessStop)
	fmt.Fprintf(b, "%s{finished_reason=\"length\",%s} %d\n", succ, lbl, stats.SuccessLength)
	hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", &stats.TTFT)
	hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", &stats.ITL)
	hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", &stats.E2E)
	hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", &stats.Queue)
	return b.Flush()
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
