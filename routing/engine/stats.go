package engine

import "slices"

// Histogram bucket upper bounds, in seconds, as vLLM's V1 Prometheus
// logger defines them.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
		20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// Histogram is a cumulative-bucket histogram in Prometheus's sense: Counts[i]
// counts observations <= Bounds[i] (not cumulated; Cumulative does that),
// and the implicit +Inf bucket is Count.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

func newHistogram(bounds []float64) Histogram {
	return Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds))}
}

// Observe adds one value.
func (h *Histogram) Observe(v float64) {
	h.Count++
	h.Sum += v
	for i, b := range h.Bounds {
		if v <= b {
			h.Counts[i]++
			return
		}
	}
}

// Cumulative returns the cumulative count of each bound (Prometheus's
// le buckets, without +Inf).
func (h *Histogram) Cumulative() []uint64 {
	out := make([]uint64, len(h.Counts))
	var c uint64
	for i, n := range h.Counts {
		c += n
		out[i] = c
	}
	return out
}

func (h Histogram) clone() Histogram {
	h.Counts = slices.Clone(h.Counts)
	return h // Bounds are never modified
}

// Stats are an engine's counters and histograms since it started, in
// vLLM's units (tokens, requests, seconds of engine time).
type Stats struct {
	// Submitted and Aborted count requests given to Submit and removed by
	// Abort.
	Submitted, Aborted uint64
	// PromptTokens counts prompt tokens of admitted (prefilled) requests
	// (vllm:prompt_tokens_total).
	PromptTokens uint64
	// GenerationTokens counts output tokens (vllm:generation_tokens_total).
	GenerationTokens uint64
	// SuccessStop and SuccessLength count finished requests by finish
	// reason (vllm:request_success_total{finished_reason}).
	SuccessStop, SuccessLength uint64
	// Steps counts engine steps.
	Steps uint64
	// TTFT is submission → first token (vllm:time_to_first_token_seconds).
	TTFT Histogram
	// ITL is the gap between consecutive tokens of a sequence
	// (vllm:inter_token_latency_seconds).
	ITL Histogram
	// E2E is submission → last token (vllm:e2e_request_latency_seconds).
	E2E Histogram
	// Queue is schedulable → admitted (vllm:request_queue_time_seconds).
	Queue Histogram
}

func newStats() Stats {
	return Stats{
		TTFT:  newHistogram(ttftBuckets),
		ITL:   newHistogram(itlBuckets),
		E2E:   newHistogram(requestLatencyBuckets),
		Queue: newHistogram(requestLatencyBuckets),
	}
}

func (s *Stats) clone() Stats {
	c := *s
	c.TTFT = s.TTFT.clone()
	c.ITL = s.ITL.clone()
	c.E2E = s.E2E.clone()
	c.Queue = s.Queue.clone()
	return c
}
