package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
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
//
// The page is read with scanMetrics (scanmetrics.go), which looks only at
// the lines of those gauges and gives up on anything it is not sure it
// reads as the Prometheus parser does; then the page goes to expfmt's
// parser. Both fill the same families, so the checks below are one.
func ParseMetrics(r io.Reader) (Scrape, error) {
	page, err := io.ReadAll(r)
	if err != nil {
		return Scrape{}, fmt.Errorf("parse /metrics: %w", err)
	}
	var fs families
	if !scanMetrics(page, &fs) {
		fs = families{}
		if err := parseMetricsText(page, &fs); err != nil {
			return Scrape{}, err
		}
	}
	return fs.scrape()
}

// parseMetricsText fills fs from page with the Prometheus text parser.
func parseMetricsText(page []byte, fs *families) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return fmt.Errorf("parse /metrics: %w", err)
	}
	for name, mf := range fams {
		f := fs.of(name)
		if f == nil {
			continue
		}
		f.present = true
		for _, m := range mf.GetMetric() {
			f.add(value(m))
		}
	}
	return nil
}

// family is what ParseMetrics keeps of one of the metric families it
// reads: whether the page has a sample of it (the Prometheus parser drops
// a family with only HELP or TYPE lines), the
// sum and count of its samples in page order, and the last sample that is
// not a finite value >= 0.
type family struct {
	present bool
	sum     float64
	n       int
	hasBad  bool
	bad     float64
}

func (f *family) add(x float64) {
	if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
		f.hasBad, f.bad = true, x
	}
	f.sum += x
	f.n++
}

// families are the four vLLM families ParseMetrics reads.
type families struct{ running, waiting, kv, kvOld family }

// of returns name's family, nil for any other metric.
func (fs *families) of(name string) *family {
	switch name {
	case MetricRunning:
		return &fs.running
	case MetricWaiting:
		return &fs.waiting
	case MetricKVUsage:
		return &fs.kv
	case MetricKVUsageOld:
		return &fs.kvOld
	}
	return nil
}

// scrape turns the families into a Scrape. The page is the upstream's
// (tenant-controlled): a value that is not a finite count >= 0 makes the
// scrape fail rather than reach the scheduler as NaN or a negative load.
func (fs *families) scrape() (Scrape, error) {
	var s Scrape
	found := false
	var bad error
	check := func(name string, f *family) {
		if f.hasBad {
			bad = fmt.Errorf("parse /metrics: %s = %v, want a finite value >= 0", name, f.bad)
		}
	}
	if f := &fs.running; f.present {
		check(MetricRunning, f)
		s.Running, found = f.sum, true
	}
	if f := &fs.waiting; f.present {
		check(MetricWaiting, f)
		s.Waiting, found = f.sum, true
	}
	kvName, kv := MetricKVUsage, &fs.kv
	if !kv.present {
		kvName, kv = MetricKVUsageOld, &fs.kvOld
	}
	if kv.present && kv.n > 0 {
		// KV use is a fraction per engine: average, not sum.
		check(kvName, kv)
		s.KVUsage, found = kv.sum/float64(kv.n), true
		if bad == nil && s.KVUsage > 1 {
			bad = fmt.Errorf("parse /metrics: %s averages %v, want a fraction in [0, 1]", kvName, s.KVUsage)
		}
	}
	if bad != nil {
		return Scrape{}, bad
	}
	if math.IsInf(s.Running, 0) || math.IsInf(s.Waiting, 0) {
		return Scrape{}, errors.New("parse /metrics: request counts overflow")
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
// /health, feeding the results into a Fleet. An instance whose scrapes (or
// probes) keep failing is tried less and less often — after n consecutive
// failures the next attempt waits interval·2ⁿ, at most Config.MaxBackoff —
// and its failures are logged at most once per Config.FailureLogInterval.
// Redirects are never followed, so the instance's upstream key is sent to
// its registered host:port only. Instances removed from the fleet (a
// deleted instance, a new cluster version) are no longer scraped from the
// next round on.
type Scraper struct {
	fleet  *Fleet
	client *http.Client
	clock  routing.Clock
	log    *slog.Logger

	mu     sync.Mutex
	scrape map[*Member]*backoff
	probe  map[*Member]*backoff
}

// backoff is one instance's failure streak for scrapes or probes.
type backoff struct {
	fails      int
	next       time.Time // no attempt before this
	lastLog    time.Time
	suppressed int // failures not logged since lastLog
}

// NewScraper returns a scraper of f's instances using a copy of client that
// does not follow redirects.
func NewScraper(f *Fleet, client *http.Client, clock routing.Clock, log *slog.Logger) *Scraper {
	if client == nil {
		client = &http.Client{Timeout: f.cfg.ScrapeTimeout}
	}
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if log == nil {
		log = slog.Default()
	}
	return &Scraper{fleet: f, client: &c, clock: clock, log: log, scrape: map[*Member]*backoff{}, probe: map[*Member]*backoff{}}
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

// due reports whether m's back-off in table has passed at now.
func (s *Scraper) due(table map[*Member]*backoff, m *Member, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := table[m]
	return b == nil || !now.Before(b.next)
}

// prune forgets the streaks of members no longer listed.
func (s *Scraper) prune(table map[*Member]*backoff, members []*Member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(table) == 0 {
		return
	}
	listed := make(map[*Member]bool, len(members))
	for _, m := range members {
		listed[m] = true
	}
	for m := range table {
		if !listed[m] {
			delete(table, m)
		}
	}
}

// record updates m's streak after an attempt at now and logs at a bounded
// rate: the first failure of a streak, then at most once per
// FailureLogInterval with the number of failures in between, and the
// recovery.
func (s *Scraper) record(ctx context.Context, table map[*Member]*backoff, what string, interval time.Duration, m *Member, id string, now time.Time, err error) {
	cfg := s.fleet.cfg
	s.mu.Lock()
	b := table[m]
	if err == nil {
		delete(table, m)
		s.mu.Unlock()
		if b != nil {
			s.log.InfoContext(ctx, what+" recovered", slog.String("instance", id), slog.Int("failures", b.fails))
		}
		return
	}
	if b == nil {
		b = &backoff{}
		table[m] = b
	}
	b.fails++
	wait := cfg.MaxBackoff
	if b.fails < 32 {
		wait = min(interval<<b.fails, cfg.MaxBackoff)
	}
	if wait <= 0 {
		wait = cfg.MaxBackoff
	}
	b.next = now.Add(wait)
	logNow := b.fails == 1 || now.Sub(b.lastLog) >= cfg.FailureLogInterval
	suppressed := b.suppressed
	if logNow {
		b.lastLog, b.suppressed = now, 0
	} else {
		b.suppressed++
	}
	fails := b.fails
	s.mu.Unlock()
	if logNow {
		s.log.WarnContext(ctx, what+" failing", slog.String("instance", id), slog.Int("consecutive_failures", fails),
			slog.Int("not_logged", suppressed), slog.Duration("next_attempt_in", wait), slog.Any("err", err))
	}
}

// ScrapeOnce reads /metrics of every listed, enabled instance whose
// back-off has passed, in parallel, and waits for all of them.
func (s *Scraper) ScrapeOnce(ctx context.Context) {
	members := s.fleet.Members()
	s.prune(s.scrape, members)
	now := s.clock.Now()
	interval := s.fleet.cfg.ScrapeInterval
	done := make(chan struct{}, len(members))
	n := 0
	for _, m := range members {
		in := s.fleet.Instance(m)
		if in.Disabled || in.BaseURL == "" || !s.due(s.scrape, m, now) {
			continue
		}
		n++
		go func() {
			defer func() { done <- struct{}{} }()
			sc, err := s.scrapeOne(ctx, &in)
			if ctx.Err() != nil {
				return
			}
			at := s.clock.Now()
			s.record(ctx, s.scrape, "scrape", interval, m, in.ID, at, err)
			s.fleet.ReportScrape(at, m, sc, err)
		}()
	}
	for range n {
		<-done
	}
}

func (s *Scraper) scrapeOne(ctx context.Context, in *routing.Instance) (Scrape, error) {
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
// Probes back off like scrapes.
func (s *Scraper) ProbeOnce(ctx context.Context) {
	members := s.fleet.Members()
	s.prune(s.probe, members)
	for _, m := range members {
		in := s.fleet.Instance(m)
		if s.fleet.Healthy(m) || in.BaseURL == "" || !s.due(s.probe, m, s.clock.Now()) {
			continue
		}
		err := s.probeOne(ctx, &in)
		if ctx.Err() != nil {
			return
		}
		now := s.clock.Now()
		s.record(ctx, s.probe, "health probe", s.fleet.cfg.ProbeInterval, m, in.ID, now, err)
		s.fleet.ReportProbe(now, m, err == nil)
	}
}

func (s *Scraper) probeOne(ctx context.Context, in *routing.Instance) error {
	ctx, cancel := context.WithTimeout(ctx, s.fleet.cfg.ScrapeTimeout)
	defer cancel()
	resp, err := s.get(ctx, in, "/health")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxHealthBodySize))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /health: status %d", resp.StatusCode)
	}
	return nil
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
