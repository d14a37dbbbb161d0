package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/routebalance/routebalance/routing"
)

// vLLM metric names read by ParseMetrics. Older vLLM versions export the
// KV-cache use as gpu_cache_usage_perc; both are fractions in [0,1].
const (
	MetricRunning     = "vllm:num_requests_running"
	MetricWaiting     = "vllm:num_requests_waiting"
	MetricKVUsage     = "vllm:kv_cache_usage_perc"
	MetricKVUsageOld  = "vllm:gpu_cache_usage_perc"
	maxMetricsBytes   = 4 << 20
	maxHealthBodySize = 64 << 10
)

// ErrNoVLLMMetrics means a /metrics page had none of the vLLM gauges.
var ErrNoVLLMMetrics = errors.New("no vllm metrics in /metrics")

// ParseMetrics reads the Prometheus text exposition of a vLLM server and
// returns its running and waiting request counts and KV-cache use, summed
// over every series (one per engine or model label). A page without any of
// the three gauges is ErrNoVLLMMetrics.
func ParseMetrics(r io.Reader) (Scrape, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Scrape{}, fmt.Errorf("parse /metrics: %w", err)
	}
	var s Scrape
	found := false
	sum := func(name string) (float64, bool) {
		f, ok := fams[name]
		if !ok {
			return 0, false
		}
		v := 0.0
		for _, m := range f.GetMetric() {
			v += value(m)
		}
		return v, true
	}
	if v, ok := sum(MetricRunning); ok {
		s.Running, found = v, true
	}
	if v, ok := sum(MetricWaiting); ok {
		s.Waiting, found = v, true
	}
	kvName := MetricKVUsage
	if _, ok := fams[kvName]; !ok {
		kvName = MetricKVUsageOld
	}
	if f, ok := fams[kvName]; ok && len(f.GetMetric()) > 0 {
		// KV use is a fraction per engine: average, not sum.
		v, _ := sum(kvName)
		s.KVUsage, found = v/float64(len(f.GetMetric())), true
	}
	if !found {
		return Scrape{}, ErrNoVLLMMetrics
	}
	return s, nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// Scraper reads every instance's /metrics and probes ejected instances'
// /health, feeding the results into a Fleet.
type Scraper struct {
	fleet  *Fleet
	client *http.Client
	clock  routing.Clock
	log    *slog.Logger
}

// NewScraper returns a scraper of f's instances using client.
func NewScraper(f *Fleet, client *http.Client, clock routing.Clock, log *slog.Logger) *Scraper {
	return &Scraper{fleet: f, client: client, clock: clock, log: log}
}

// Run scrapes every ScrapeInterval and probes ejected instances every
// ProbeInterval until ctx is done.
func (s *Scraper) Run(ctx context.Context) {
	cfg := s.fleet.Config()
	scrape := time.NewTicker(cfg.ScrapeInterval)
	defer scrape.Stop()
	probe := time.NewTicker(cfg.ProbeInterval)
	defer probe.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-scrape.C:
			s.ScrapeOnce(ctx)
		case <-probe.C:
			s.ProbeOnce(ctx)
		}
	}
}

// ScrapeOnce reads /metrics of every listed, enabled instance once, in
// parallel, and waits for all of them.
func (s *Scraper) ScrapeOnce(ctx context.Context) {
	members := s.fleet.Members()
	done := make(chan struct{}, len(members))
	n := 0
	for _, m := range members {
		in := s.fleet.Instance(m)
		if in.Disabled || in.BaseURL == "" {
			continue
		}
		n++
		go func() {
			defer func() { done <- struct{}{} }()
			sc, err := s.scrape(ctx, &in)
			if err != nil && ctx.Err() == nil {
				s.log.DebugContext(ctx, "scrape failed", slog.String("instance", in.ID), slog.Any("err", err))
			}
			s.fleet.ReportScrape(s.clock.Now(), m, sc, err)
		}()
	}
	for range n {
		<-done
	}
}

func (s *Scraper) scrape(ctx context.Context, in *routing.Instance) (Scrape, error) {
	ctx, cancel := context.WithTimeout(ctx, s.fleet.cfg.ScrapeTimeout)
	defer cancel()
	resp, err := s.get(ctx, in, "/metrics")
	if err != nil {
		return Scrape{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Scrape{}, fmt.Errorf("GET /metrics: status %d", resp.StatusCode)
	}
	return ParseMetrics(io.LimitReader(resp.Body, maxMetricsBytes))
}

// ProbeOnce probes /health of every ejected instance once; a 200 counts
// towards re-admission, anything else towards staying out.
func (s *Scraper) ProbeOnce(ctx context.Context) {
	for _, m := range s.fleet.Members() {
		in := s.fleet.Instance(m)
		if s.fleet.Healthy(m) || in.BaseURL == "" {
			continue
		}
		ok := s.probe(ctx, &in)
		if ctx.Err() != nil {
			return
		}
		s.fleet.ReportProbe(s.clock.Now(), m, ok)
	}
}

func (s *Scraper) probe(ctx context.Context, in *routing.Instance) bool {
	ctx, cancel := context.WithTimeout(ctx, s.fleet.cfg.ScrapeTimeout)
	defer cancel()
	resp, err := s.get(ctx, in, "/health")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxHealthBodySize))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (s *Scraper) get(ctx context.Context, in *routing.Instance, path string) (*http.Response, error) {
	base := strings.TrimSuffix(in.BaseURL, "/")
	base = strings.TrimSuffix(base, "/v1")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, err
	}
	if k := in.APIKey.Reveal(); k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	return s.client.Do(req)
}
