package loadgen

// Overhead is what the router adds over calling an instance directly with
// the same load: differences router − direct of the latency statistics, in
// milliseconds, and both throughputs.
type Overhead struct {
	TTFTMeanMs float64 `json:"ttft_mean_ms"`
	TTFTP50Ms  float64 `json:"ttft_p50_ms"`
	TTFTP99Ms  float64 `json:"ttft_p99_ms"`
	E2EMeanMs  float64 `json:"e2el_mean_ms"`
	E2EP50Ms   float64 `json:"e2el_p50_ms"`
	E2EP99Ms   float64 `json:"e2el_p99_ms"`
	// RouterReqPerS and DirectReqPerS are the completed requests per second
	// of each run.
	RouterReqPerS float64 `json:"router_req_per_s"`
	DirectReqPerS float64 `json:"direct_req_per_s"`
	// RouterCPUPerReqMs is the router process's CPU per request (0 when its
	// pid was not given); ClientCPUPerReqMs is the load generator's own, in
	// the router run.
	RouterCPUPerReqMs float64 `json:"router_cpu_per_req_ms,omitempty"`
	ClientCPUPerReqMs float64 `json:"client_cpu_per_req_ms"`
}

// Compare returns the router's added latency: router minus direct for each
// statistic (percentiles of the two runs, not of per-request differences,
// as the runs serve different requests at different times).
func Compare(router, direct *Result) Overhead {
	r, d := &router.Summary, &direct.Summary
	return Overhead{
		TTFTMeanMs:        r.TTFTms.Mean - d.TTFTms.Mean,
		TTFTP50Ms:         r.TTFTms.Median - d.TTFTms.Median,
		TTFTP99Ms:         r.TTFTms.P99 - d.TTFTms.P99,
		E2EMeanMs:         r.E2Ems.Mean - d.E2Ems.Mean,
		E2EP50Ms:          r.E2Ems.Median - d.E2Ems.Median,
		E2EP99Ms:          r.E2Ems.P99 - d.E2Ems.P99,
		RouterReqPerS:     r.RequestThroughput,
		DirectReqPerS:     d.RequestThroughput,
		RouterCPUPerReqMs: router.RouterCPUPerReqMs,
		ClientCPUPerReqMs: router.ClientCPUPerReqMs,
	}
}
