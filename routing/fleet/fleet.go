// Package fleet keeps the live state of one cluster's instances: requests
// in flight, dead-reckoned pending decode tokens, scraped vLLM metrics,
// health (ejection and re-admission) and exploration of new instances.
//
// A Fleet has no goroutines and reads time only from the values its callers
// pass in, so the discrete-event simulator can drive it on a virtual clock.
// The live router runs a Scraper (scrape.go) beside it.
package fleet

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/routebalance/routebalance/routing"
)

// Config holds the fleet's settings. The zero value of a field means its
// default (see DefaultConfig).
type Config struct {
	// ScrapeInterval is how often each instance's /metrics is read.
	ScrapeInterval time.Duration
	// ScrapeTimeout bounds one scrape or probe request.
	ScrapeTimeout time.Duration
	// StaleAfter is the age beyond which scraped data is not trusted.
	StaleAfter time.Duration
	// ProbeInterval is how often an ejected instance's /health is probed.
	ProbeInterval time.Duration
	// EjectAfter is the number of consecutive failures (requests blamed on
	// the instance, or probes) that ejects an instance.
	EjectAfter int
	// ReadmitAfter is the number of consecutive successful probes that
	// brings an ejected instance back.
	ReadmitAfter int
	// ExploreRequests is how many successful requests a new instance serves
	// before its latency predictions are trusted.
	ExploreRequests int
	// DefaultTPOT is the decode time per token used for dead reckoning when
	// a lease carries no prediction.
	DefaultTPOT time.Duration
	// MaxBackoff caps the exponential back-off of an instance whose
	// scrapes (or probes) keep failing: after n consecutive failures the
	// next attempt waits interval·2ⁿ, at most MaxBackoff.
	MaxBackoff time.Duration
	// FailureLogInterval is the least time between two log lines about
	// one instance's failing scrapes; the failures in between are counted
	// in the next line.
	FailureLogInterval time.Duration
}

// DefaultConfig returns the defaults: scrape every 250 ms with a 1 s
// timeout, stale after 2 s, probe ejected instances every second, eject
// after 3 consecutive failures, re-admit after 1 good probe, explore with 3
// requests, 20 ms per token when nothing better is known; failing scrapes
// back off up to 30 s and are logged at most once a minute per instance.
func DefaultConfig() Config {
	return Config{
		ScrapeInterval:  250 * time.Millisecond,
		ScrapeTimeout:   time.Second,
		StaleAfter:      2 * time.Second,
		ProbeInterval:   time.Second,
		EjectAfter:      3,
		ReadmitAfter:    1,
		ExploreRequests: 3,
		DefaultTPOT:     20 * time.Millisecond,

		MaxBackoff:         30 * time.Second,
		FailureLogInterval: time.Minute,
	}
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.ScrapeInterval == 0 {
		c.ScrapeInterval = d.ScrapeInterval
	}
	if c.ScrapeTimeout == 0 {
		c.ScrapeTimeout = d.ScrapeTimeout
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = d.StaleAfter
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = d.ProbeInterval
	}
	if c.EjectAfter == 0 {
		c.EjectAfter = d.EjectAfter
	}
	if c.ReadmitAfter == 0 {
		c.ReadmitAfter = d.ReadmitAfter
	}
	if c.ExploreRequests == 0 {
		c.ExploreRequests = d.ExploreRequests
	}
	if c.DefaultTPOT == 0 {
		c.DefaultTPOT = d.DefaultTPOT
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = d.MaxBackoff
	}
	if c.FailureLogInterval == 0 {
		c.FailureLogInterval = d.FailureLogInterval
	}
	return c
}

// Validate reports a setting out of range.
func (c Config) Validate() error {
	var errs []error
	pos := func(name string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("fleet: %s must be > 0, got %v", name, d))
		}
	}
	pos("scrape interval", c.ScrapeInterval)
	pos("scrape timeout", c.ScrapeTimeout)
	pos("stale after", c.StaleAfter)
	pos("probe interval", c.ProbeInterval)
	pos("default TPOT", c.DefaultTPOT)
	pos("max backoff", c.MaxBackoff)
	pos("failure log interval", c.FailureLogInterval)
	if c.EjectAfter < 0 || c.ReadmitAfter < 0 || c.ExploreRequests < 0 {
		errs = append(errs, errors.New("fleet: eject after, readmit after and explore requests must be >= 0"))
	}
	return errors.Join(errs...)
}

// Fleet is the live state of one cluster's instances. It is safe for
// concurrent use.
type Fleet struct {
	cfg Config

	mu      sync.Mutex
	members []*Member
	byID    map[string]*Member
}

// New returns the fleet of instances. Settings left zero take their
// defaults.
func New(cfg Config, instances []routing.Instance) *Fleet {
	f := &Fleet{cfg: cfg.WithDefaults(), byID: map[string]*Member{}}
	f.Rebuild(instances)
	return f
}

// Config returns the fleet's effective settings.
func (f *Fleet) Config() Config { return f.cfg }

// Rebuild replaces the instance list with a new cluster version. Instances
// whose ID persists keep their live state (leases, counters, health,
// scrapes); a removed instance's leases stay valid until released but the
// instance is no longer listed.
func (f *Fleet) Rebuild(instances []routing.Instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := make([]*Member, 0, len(instances))
	byID := make(map[string]*Member, len(instances))
	for _, in := range instances {
		m := f.byID[in.ID]
		if m == nil {
			m = &Member{healthy: true}
		}
		m.inst = in
		m.index = len(next)
		next = append(next, m)
		byID[in.ID] = m
	}
	for id, m := range f.byID {
		if byID[id] == nil {
			m.index = -1
		}
	}
	f.members, f.byID = next, byID
}

// Len returns the number of listed instances.
func (f *Fleet) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.members)
}

// Member returns the listed member at index i (0 ≤ i < Len).
func (f *Fleet) Member(i int) *Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.members[i]
}

// Lookup returns the listed member with the instance ID, or nil.
func (f *Fleet) Lookup(id string) *Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byID[id]
}

// Member is one instance's live state. Its fields are guarded by the
// Fleet's lock; read them through Fleet.Snapshot.
type Member struct {
	inst  routing.Instance
	index int // position in the current listing, -1 when removed

	leases []*Lease

	healthy     bool
	fails       int // consecutive failures (requests or probes)
	goodProbes  int // consecutive good probes while ejected
	ejectedAt   time.Time
	served      int // successful requests completed
	failedTotal int

	scrape   Scrape
	scraped  bool
	scrapeAt time.Time
	scrapeOK bool

	tpot float64 // last predicted TPOT (s/token), for State
}

// Instance returns m's current instance description.
func (f *Fleet) Instance(m *Member) routing.Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	return m.inst
}

// Scrape is one reading of an instance's vLLM /metrics.
type Scrape struct {
	Running float64 // vllm:num_requests_running
	Waiting float64 // vllm:num_requests_waiting
	KVUsage float64 // vllm:kv_cache_usage_perc, in [0,1]
}

// Snapshot is one instance's state at one moment, as the scheduler reads
// it before a decision.
type Snapshot struct {
	// Index is the instance's position in the cluster's instance list.
	Index    int
	Member   *Member
	Instance *routing.Instance
	// Healthy is false while the instance is ejected.
	Healthy bool
	// Exploring is true until the instance served ExploreRequests requests.
	Exploring bool
	// InFlight counts this router's admitted, unreleased requests.
	InFlight int
	// Running is the decode batch size b: the router's in-flight count, or
	// the scraped running count when fresh and larger (other routers).
	Running float64
	// Waiting is the scraped queue inside the engine (0 when stale).
	Waiting float64
	// KVUsage is the scraped KV-cache use (0 when stale or never scraped).
	KVUsage float64
	// Pending is d, the dead-reckoned decode tokens still to generate by
	// this router's requests on the instance.
	Pending float64
	// Stale is true when no scrape newer than StaleAfter exists.
	Stale bool
	// ScrapeAge is the age of the last good scrape (0 when never).
	ScrapeAge time.Duration
	// Served and Failed count completed requests.
	Served, Failed int
	// TPOT is the last predicted time per output token, in seconds.
	TPOT float64
}

// Snapshot writes the state of every listed instance at now into dst
// (reused) and returns it.
func (f *Fleet) Snapshot(now time.Time, dst []Snapshot) []Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	dst = dst[:0]
	for i, m := range f.members {
		dst = append(dst, f.snapshotLocked(now, i, m))
	}
	return dst
}

// SnapshotOf returns m's state at now, as Snapshot would, and false when m
// is no longer listed (removed by a newer cluster version).
func (f *Fleet) SnapshotOf(now time.Time, m *Member) (Snapshot, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m.index < 0 || m.index >= len(f.members) || f.members[m.index] != m {
		return Snapshot{}, false
	}
	return f.snapshotLocked(now, m.index, m), true
}

func (f *Fleet) snapshotLocked(now time.Time, i int, m *Member) Snapshot {
	s := Snapshot{
		Index:     i,
		Member:    m,
		Instance:  &m.inst,
		Healthy:   m.healthy,
		Exploring: m.served < f.cfg.ExploreRequests,
		InFlight:  len(m.leases),
		Running:   float64(len(m.leases)),
		Stale:     true,
		Served:    m.served,
		Failed:    m.failedTotal,
		TPOT:      m.tpot,
	}
	for _, l := range m.leases {
		s.Pending += l.remaining(now, f.cfg.DefaultTPOT)
	}
	if m.scraped {
		s.ScrapeAge = now.Sub(m.scrapeAt)
		if s.ScrapeAge <= f.cfg.StaleAfter {
			s.Stale = false
			s.Running = math.Max(s.Running, m.scrape.Running)
			s.Waiting = m.scrape.Waiting
			s.KVUsage = m.scrape.KVUsage
		}
	}
	return s
}

// LeaseSpec describes a request being admitted on an instance.
type LeaseSpec struct {
	RequestID string
	// Tokens is the predicted output length L̂.
	Tokens float64
	// TTFT and TPOT are the predictions at admission; TPOT ≤ 0 uses
	// Config.DefaultTPOT.
	TTFT time.Duration
	TPOT time.Duration
	// Load is the instance state the latency prediction was made from,
	// kept for learning when the request completes.
	Load routing.Load
}

// Lease is one admitted request on one member. Its holder ends it exactly
// once with Fleet.Release.
type Lease struct {
	Spec     LeaseSpec
	Admitted time.Time
	member   *Member
	slot     int // index in member.leases, -1 once released

	anchorAt     time.Time // time at which anchorTokens were generated
	anchorTokens float64
	tpot         float64 // seconds per token
}

// Member returns the member the lease is on.
func (l *Lease) Member() *Member { return l.member }

// remaining is the dead-reckoned decode tokens still to generate.
func (l *Lease) remaining(now time.Time, def time.Duration) float64 {
	tpot := l.tpot
	if tpot <= 0 {
		tpot = def.Seconds()
	}
	gen := l.anchorTokens
	if dt := now.Sub(l.anchorAt).Seconds(); dt > 0 && tpot > 0 {
		gen += dt / tpot
	}
	return math.Max(0, l.Spec.Tokens-gen)
}

// Admit records a request admitted on m at now and returns its lease.
func (f *Fleet) Admit(now time.Time, m *Member, spec LeaseSpec) *Lease {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := &Lease{Spec: spec, Admitted: now, member: m, anchorAt: now.Add(spec.TTFT), tpot: spec.TPOT.Seconds()}
	if spec.TPOT > 0 {
		m.tpot = spec.TPOT.Seconds()
	}
	l.slot = len(m.leases)
	m.leases = append(m.leases, l)
	return l
}

// Progress corrects the lease's dead reckoning with the output tokens
// actually streamed so far. It does nothing after Release.
func (f *Fleet) Progress(now time.Time, l *Lease, tokens int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.slot < 0 {
		return
	}
	l.anchorAt, l.anchorTokens = now, float64(tokens)
	if float64(tokens) >= l.Spec.Tokens {
		// Longer than predicted: assume it is near its end rather than
		// done, so the instance is not seen as empty.
		l.Spec.Tokens = float64(tokens) + 1
	}
}

// Retune sets the decode time per token of m's requests from now on to
// tpot (the latency model's prediction at the instance's present load):
// each lease whose TPOT̂ differs by more than 10 % is re-anchored at the
// tokens reckoned so far, so the past is not re-counted. Requests that
// have not reached their first token keep their anchor.
func (f *Fleet) Retune(now time.Time, m *Member, tpot time.Duration) {
	if tpot <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m.tpot = tpot.Seconds()
	for _, l := range m.leases {
		old := l.tpot
		if old > 0 && math.Abs(m.tpot-old) <= 0.1*old {
			continue
		}
		if now.After(l.anchorAt) {
			l.anchorTokens = l.Spec.Tokens - l.remaining(now, f.cfg.DefaultTPOT)
			l.anchorAt = now
		}
		l.tpot = m.tpot
	}
}

// Release ends the lease with the request's outcome: it frees the slot and
// updates health. Upstream failures count towards ejection; success resets
// the failure count. It reports whether this call ended the lease (later
// calls do nothing and return false).
func (f *Fleet) Release(now time.Time, l *Lease, o routing.Outcome) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.slot < 0 {
		return false
	}
	m := l.member
	last := len(m.leases) - 1
	moved := m.leases[last]
	m.leases[l.slot] = moved
	moved.slot = l.slot
	m.leases[last] = nil
	m.leases = m.leases[:last]
	l.slot = -1
	switch {
	case o.Err == nil:
		m.served++
		m.fails = 0
	case o.Upstream:
		m.failedTotal++
		f.failLocked(now, m)
	}
	return true
}

// SeedServed sets how many requests m has served, as a replay copies a
// live instance's count so that an instance the live router has already
// explored is not explored again (see Snapshot.Exploring).
func (f *Fleet) SeedServed(m *Member, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m.served = max(n, 0)
}

// InFlight returns the number of unreleased leases on m.
func (f *Fleet) InFlight(m *Member) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(m.leases)
}

func (f *Fleet) failLocked(now time.Time, m *Member) {
	m.fails++
	m.goodProbes = 0
	if m.healthy && m.fails >= f.cfg.EjectAfter {
		m.healthy = false
		m.ejectedAt = now
	}
}

// ReportProbe records the result of a /health probe. A failed probe counts
// like a failed request; enough good probes re-admit an ejected instance.
func (f *Fleet) ReportProbe(now time.Time, m *Member, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !ok {
		f.failLocked(now, m)
		return
	}
	if m.healthy {
		m.fails = 0
		return
	}
	m.goodProbes++
	if m.goodProbes >= f.cfg.ReadmitAfter {
		m.healthy, m.fails, m.goodProbes = true, 0, 0
	}
}

// ReportScrape records a /metrics reading taken at now; err marks a failed
// scrape (the previous reading ages into staleness).
func (f *Fleet) ReportScrape(now time.Time, m *Member, s Scrape, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		m.scrapeOK = false
		return
	}
	m.scrape, m.scraped, m.scrapeAt, m.scrapeOK = s, true, now, true
}

// Healthy reports whether m is admitted (not ejected).
func (f *Fleet) Healthy(m *Member) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return m.healthy
}

// Members returns the listed members (a copy of the slice).
func (f *Fleet) Members() []*Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Member(nil), f.members...)
}
