package quality

import (
	"log/slog"
	"sync"
	"time"
)

// Breaker states (BreakerStats.State and the metric's value).
const (
	BreakerClosed   = 0 // calls go through
	BreakerOpen     = 1 // calls are refused until the cool-down ends
	BreakerHalfOpen = 2 // one probe call is let through
)

var breakerNames = [...]string{"closed", "open", "half-open"}

// BreakerConfig tunes a Breaker. The zero value means the defaults.
type BreakerConfig struct {
	// Failures is the number of consecutive failed calls that open the
	// breaker (default 3).
	Failures int
	// Cooldown is how long it stays open before one probe call is let
	// through (default 10 s).
	Cooldown time.Duration
}

func (c BreakerConfig) withDefaults() BreakerConfig {
	if c.Failures <= 0 {
		c.Failures = 3
	}
	if c.Cooldown <= 0 {
		c.Cooldown = 10 * time.Second
	}
	return c
}

// Breaker is a circuit breaker: closed, it lets every call through and
// counts consecutive failures; after Failures of them it opens and refuses
// calls for Cooldown; then it is half-open and lets one probe through — a
// success closes it, a failure opens it again. Every state change is
// logged once (never per call). Safe for concurrent use; Allow and Done
// allocate nothing.
type Breaker struct {
	cfg  BreakerConfig
	now  func() time.Time
	log  *slog.Logger
	what string

	mu       sync.Mutex
	state    int
	fails    int
	openedAt time.Time
	probing  bool
	opens    int64
}

// NewBreaker returns a closed breaker; what names the guarded service in
// its log lines. now is the clock (nil: time.Now), log may be nil.
func NewBreaker(cfg BreakerConfig, what string, now func() time.Time, log *slog.Logger) *Breaker {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Breaker{cfg: cfg.withDefaults(), now: now, log: log, what: what}
}

// Allow reports whether a call may be made now. Every true must be
// followed by Done (or Abandon).
func (b *Breaker) Allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return true
	case BreakerOpen:
		if b.now().Sub(b.openedAt) < b.cfg.Cooldown {
			return false
		}
		b.set(BreakerHalfOpen, nil)
	}
	if b.probing {
		return false
	}
	b.probing = true
	return true
}

// Done records the outcome of an allowed call.
func (b *Breaker) Done(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerOpen {
		// A call let through before the breaker opened, answering late:
		// the failures since have decided, and its success must not close
		// the breaker on a service that is down (no probe is out while
		// open).
		return
	}
	b.probing = false
	if err == nil {
		b.fails = 0
		if b.state != BreakerClosed {
			b.set(BreakerClosed, nil)
		}
		return
	}
	b.fails++
	if b.state == BreakerHalfOpen || (b.state == BreakerClosed && b.fails >= b.cfg.Failures) {
		b.openedAt = b.now()
		b.opens++
		b.set(BreakerOpen, err)
	}
}

// Abandon ends an allowed call without a verdict (its caller gave up:
// the service is not to blame).
func (b *Breaker) Abandon() {
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// set changes the state and logs it; b.mu is held.
func (b *Breaker) set(to int, cause error) {
	from := b.state
	b.state = to
	attrs := []any{slog.String("from", breakerNames[from]), slog.String("to", breakerNames[to])}
	switch to {
	case BreakerOpen:
		attrs = append(attrs, slog.Int("consecutive_failures", b.fails), slog.Duration("cooldown", b.cfg.Cooldown), slog.Any("err", cause))
		b.log.Warn(b.what+" circuit breaker open: using the in-process fallback", attrs...)
	case BreakerHalfOpen:
		b.log.Info(b.what+" circuit breaker half-open: probing", attrs...)
	default:
		b.log.Info(b.what+" circuit breaker closed", attrs...)
	}
}

// State returns the current state (BreakerClosed, BreakerOpen or
// BreakerHalfOpen) and how many times the breaker has opened.
func (b *Breaker) State() (state int, opens int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.opens
}
