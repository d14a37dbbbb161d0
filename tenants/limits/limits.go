// Package limits enforces requests-per-minute, tokens-per-minute and
// concurrency limits per API key and per tenant, process-wide.
//
// Algorithm: one token bucket per (scope, limit). A bucket of capacity C
// (the per-minute limit) refills continuously at C per Window and starts
// full, so a client may burst up to C and then proceeds at the steady rate.
// A token bucket rather than a sliding-window log because its state is two
// numbers per bucket (no per-request timestamps, no allocation), it is exact
// under a mutex, it gives the x-ratelimit-remaining/reset values directly
// (remaining = floor(level), reset = time to refill to C), and it can go
// into debt, which is what a tokens-per-minute charge corrected after the
// fact needs. See README.md.
package limits

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/routebalance/routebalance/routing"
)

// Limits are one scope's limits; 0 means unlimited.
type Limits struct {
	RPM            int64
	TPM            int64
	MaxConcurrency int64
}

// Config holds the limiter's settings.
type Config struct {
	// Window is the period the per-minute limits refer to (default 1 min).
	Window time.Duration
	// ConcurrencyRetryAfter is the Retry-After sent when a concurrency cap
	// is hit; when a slot frees is unknowable (default 1s).
	ConcurrencyRetryAfter time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Window: time.Minute, ConcurrencyRetryAfter: time.Second}
}

// Validate reports a negative setting.
func (c Config) Validate() error {
	if c.Window < 0 || c.ConcurrencyRetryAfter < 0 {
		return errors.New("limits: window and retry-after must be >= 0")
	}
	return nil
}

// Scope says whose limit refused a request.
type Scope string

// Scopes.
const (
	ScopeKey    Scope = "key"
	ScopeTenant Scope = "tenant"
)

// Kind says which limit refused a request.
type Kind string

// Kinds.
const (
	KindRequests    Kind = "requests"
	KindTokens      Kind = "tokens"
	KindConcurrency Kind = "concurrency"
)

// Refusal describes a refused admission.
type Refusal struct {
	Scope Scope
	Kind  Kind
	Limit int64
	// TooLarge means the request alone costs more tokens than the limit
	// allows per window: waiting does not help.
	TooLarge bool
	// RetryAfter is when the refused limit admits the request again.
	RetryAfter time.Duration
	// Unavailable means the limits could not be checked at all (a shared
	// limiter's store is unreachable and it fails closed): the request was
	// refused without a verdict on its limits. The api answers 503.
	Unavailable bool
}

// Message is the client-facing explanation.
func (r Refusal) Message() string {
	switch {
	case r.Unavailable:
		return "rate limits cannot be checked right now (the shared limiter is unreachable); retry shortly"
	case r.TooLarge:
		return fmt.Sprintf("request too large: it needs more tokens than the %s's limit of %d tokens per minute; send a shorter prompt or a smaller max_tokens", r.Scope, r.Limit)
	case r.Kind == KindConcurrency:
		return fmt.Sprintf("rate limit reached: the %s's concurrency limit of %d requests in flight is in use; retry when one finishes", r.Scope, r.Limit)
	case r.Kind == KindRequests:
		return fmt.Sprintf("rate limit reached: the %s's limit of %d requests per minute is used up", r.Scope, r.Limit)
	}
	return fmt.Sprintf("rate limit reached: the %s's limit of %d tokens per minute is used up", r.Scope, r.Limit)
}

// Status is what the x-ratelimit-* headers report: for requests and for
// tokens, the tighter (least remaining) of the key's and the tenant's
// limits after this request. Has* is false when neither scope sets it.
type Status struct {
	HasRequests       bool
	LimitRequests     int64
	RemainingRequests int64
	ResetRequests     time.Duration
	HasTokens         bool
	LimitTokens       int64
	RemainingTokens   int64
	ResetTokens       time.Duration
}

// Limiter holds the buckets of every key and tenant it has seen. It is safe
// for concurrent use; admission takes two short mutexes and allocates only
// the first time a key or tenant is seen.
type Limiter struct {
	cfg   Config
	clock routing.Clock

	mu        sync.RWMutex // guards the maps; held (read) through an admission so Sweep cannot drop a live entry
	keys      map[string]*entry
	tenants   map[string]*entry
	lastSweep time.Time
}

// New returns a limiter; zero Config fields take the defaults and a nil
// clock is the wall clock.
func New(cfg Config, clock routing.Clock) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := DefaultConfig()
	if cfg.Window == 0 {
		cfg.Window = d.Window
	}
	if cfg.ConcurrencyRetryAfter == 0 {
		cfg.ConcurrencyRetryAfter = d.ConcurrencyRetryAfter
	}
	if clock == nil {
		clock = routing.WallClock{}
	}
	return &Limiter{cfg: cfg, clock: clock, keys: map[string]*entry{}, tenants: map[string]*entry{}, lastSweep: clock.Now()}, nil
}

// entry is one scope's state.
type entry struct {
	mu       sync.Mutex
	lim      Limits
	req, tok bucket
	inflight int64
	used     time.Time
}

// bucket is a token bucket; level may go negative (debt).
type bucket struct {
	level float64
	at    time.Time
}

// refill brings b to now for capacity c per window w.
func (b *bucket) refill(now time.Time, c int64, w time.Duration) {
	if c <= 0 {
		return
	}
	if el := now.Sub(b.at); el > 0 {
		b.level = math.Min(float64(c), b.level+float64(c)*float64(el)/float64(w))
	}
	b.at = now
}

// resize keeps the amount used when the capacity changes from old to c.
func (b *bucket) resize(now time.Time, old, c int64) {
	switch {
	case c <= 0:
		b.level = 0
	case old <= 0:
		b.level = float64(c)
	default:
		b.level = math.Min(float64(c), float64(c)-(float64(old)-b.level))
	}
	b.at = now
}

// wait is how long until b holds n.
func (b *bucket) wait(n float64, c int64, w time.Duration) time.Duration {
	if b.level >= n || c <= 0 {
		return 0
	}
	return time.Duration(math.Ceil((n - b.level) / float64(c) * float64(w)))
}

func (e *entry) sync(now time.Time, lim Limits, w time.Duration) {
	if lim.RPM != e.lim.RPM {
		e.req.refill(now, e.lim.RPM, w)
		e.req.resize(now, e.lim.RPM, lim.RPM)
	}
	if lim.TPM != e.lim.TPM {
		e.tok.refill(now, e.lim.TPM, w)
		e.tok.resize(now, e.lim.TPM, lim.TPM)
	}
	e.lim = lim
	e.req.refill(now, lim.RPM, w)
	e.tok.refill(now, lim.TPM, w)
	e.used = now
}

// check reports why e cannot admit a request costing cost tokens.
func (e *entry) check(scope Scope, cost int64, l *Limiter) (Refusal, bool) {
	w := l.cfg.Window
	if e.lim.MaxConcurrency > 0 && e.inflight >= e.lim.MaxConcurrency {
		return Refusal{Scope: scope, Kind: KindConcurrency, Limit: e.lim.MaxConcurrency, RetryAfter: l.cfg.ConcurrencyRetryAfter}, false
	}
	if e.lim.RPM > 0 && e.req.level < 1 {
		return Refusal{Scope: scope, Kind: KindRequests, Limit: e.lim.RPM, RetryAfter: e.req.wait(1, e.lim.RPM, w)}, false
	}
	if e.lim.TPM > 0 {
		if cost > e.lim.TPM {
			return Refusal{Scope: scope, Kind: KindTokens, Limit: e.lim.TPM, TooLarge: true, RetryAfter: w}, false
		}
		if e.tok.level < float64(cost) {
			return Refusal{Scope: scope, Kind: KindTokens, Limit: e.lim.TPM, RetryAfter: e.tok.wait(float64(cost), e.lim.TPM, w)}, false
		}
	}
	return Refusal{}, true
}

func (e *entry) charge(cost int64) {
	e.inflight++
	if e.lim.RPM > 0 {
		e.req.level--
	}
	if e.lim.TPM > 0 {
		e.tok.level -= float64(cost)
	}
}

// status folds e's state into st, keeping the tighter limit.
func (e *entry) status(st *Status, w time.Duration) {
	if c := e.lim.RPM; c > 0 {
		rem := int64(math.Max(0, math.Floor(e.req.level)))
		if !st.HasRequests || rem < st.RemainingRequests {
			st.HasRequests, st.LimitRequests, st.RemainingRequests = true, c, rem
			st.ResetRequests = e.req.wait(float64(c), c, w)
		}
	}
	if c := e.lim.TPM; c > 0 {
		rem := int64(math.Max(0, math.Floor(e.tok.level)))
		if !st.HasTokens || rem < st.RemainingTokens {
			st.HasTokens, st.LimitTokens, st.RemainingTokens = true, c, rem
			st.ResetTokens = e.tok.wait(float64(c), c, w)
		}
	}
}

// Ticket is an admitted request's hold on its concurrency slots and its
// token charge. Release it exactly once (further calls do nothing).
type Ticket struct {
	l           *Limiter
	key, tenant *entry
	charged     int64
	actual      int64
	known       bool
	done        bool
	shared      Lease // set by SharedTicket: the admission is held elsewhere
}

// Lease is an admission held by a limiter outside this process's buckets
// (the cluster-wide limiter of tenants/limits/redislimit). Ticket.Release
// calls Release exactly once, from the goroutine that ends the request.
type Lease interface {
	// Release frees the lease's concurrency slots and, when known, corrects
	// the tokens-per-minute charge to tokens (prompt + output used).
	Release(tokens int64, known bool)
}

// SharedTicket returns a Ticket whose Observe and Release go to lease, so
// the callers of a process-local and of a shared limiter hold the same
// Ticket type.
func SharedTicket(lease Lease) Ticket { return Ticket{shared: lease} }

// Observe records the tokens the request actually used (prompt + output);
// Release corrects the tokens-per-minute charge to it. Without Observe the
// admission estimate stays charged.
func (t *Ticket) Observe(tokens int64) {
	t.actual, t.known = tokens, true
}

// Release frees the concurrency slots and corrects the token charge. It is
// safe to call on a zero Ticket and more than once.
func (t *Ticket) Release() {
	if t == nil || t.done {
		return
	}
	if t.shared != nil {
		t.done = true
		t.shared.Release(t.actual, t.known)
		return
	}
	if t.l == nil {
		return
	}
	t.done = true
	now := t.l.clock.Now()
	for _, e := range [2]*entry{t.tenant, t.key} {
		e.mu.Lock()
		e.inflight--
		if t.known && e.lim.TPM > 0 {
			e.tok.refill(now, e.lim.TPM, t.l.cfg.Window)
			e.tok.level = math.Min(float64(e.lim.TPM), e.tok.level+float64(t.charged-t.actual))
		}
		e.used = now
		e.mu.Unlock()
	}
}

// Admit admits one request of a key (keyID, its limits kl) of a tenant
// (tenantID, tl) that is estimated to cost tokens (prompt + max_tokens).
// When ok, the request holds a concurrency slot in both scopes and its
// tokens and one request are charged to both; the caller must Release the
// ticket. When not ok, nothing is charged and the refusal says why. The
// status is for the response headers either way.
func (l *Limiter) Admit(tenantID string, tl Limits, keyID string, kl Limits, tokens int64) (t Ticket, st Status, r Refusal, ok bool) {
	now := l.clock.Now()
	if tokens < 0 {
		tokens = 0
	}
	l.maybeSweep(now)
	l.mu.RLock()
	defer l.mu.RUnlock()
	te, ke := l.entries(now, tenantID, keyID)
	// Lock order: tenant, then key (a key belongs to one tenant).
	te.mu.Lock()
	defer te.mu.Unlock()
	ke.mu.Lock()
	defer ke.mu.Unlock()
	w := l.cfg.Window
	te.sync(now, tl, w)
	ke.sync(now, kl, w)
	if r, ok = ke.check(ScopeKey, tokens, l); ok {
		r, ok = te.check(ScopeTenant, tokens, l)
	}
	if ok {
		ke.charge(tokens)
		te.charge(tokens)
		t = Ticket{l: l, key: ke, tenant: te, charged: tokens}
	}
	ke.status(&st, w)
	te.status(&st, w)
	return t, st, r, ok
}

// entries finds or makes the two entries; called with l.mu read-locked,
// which it may drop and retake. New entries are stamped used now, so a
// Sweep that slips in while the lock is dropped leaves them alone; the loop
// re-reads in any case.
func (l *Limiter) entries(now time.Time, tenantID, keyID string) (te, ke *entry) {
	for {
		te, ke = l.tenants[tenantID], l.keys[keyID]
		if te != nil && ke != nil {
			return te, ke
		}
		l.mu.RUnlock()
		l.mu.Lock()
		if l.tenants[tenantID] == nil {
			l.tenants[tenantID] = &entry{used: now}
		}
		if l.keys[keyID] == nil {
			l.keys[keyID] = &entry{used: now}
		}
		l.mu.Unlock()
		l.mu.RLock()
	}
}

// maybeSweep drops, at most once per window, entries that have been idle for
// two windows with nothing in flight: their buckets are full again, so
// forgetting them changes nothing. Memory stays bounded by the keys used in
// the last two windows.
func (l *Limiter) maybeSweep(now time.Time) {
	l.mu.RLock()
	due := now.Sub(l.lastSweep) >= l.cfg.Window
	l.mu.RUnlock()
	if !due {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) < l.cfg.Window {
		return
	}
	l.lastSweep = now
	for _, m := range [2]map[string]*entry{l.keys, l.tenants} {
		for id, e := range m {
			e.mu.Lock()
			idle := e.inflight == 0 && now.Sub(e.used) >= 2*l.cfg.Window
			e.mu.Unlock()
			if idle {
				delete(m, id)
			}
		}
	}
}

// Len reports how many keys and tenants the limiter tracks.
func (l *Limiter) Len() (keys, tenants int) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.keys), len(l.tenants)
}
