// Package redisfail is the one rule the Redis-backed shared state
// (tenants/limits/redislimit, billing/redisspend) follows when Redis
// cannot be reached: a fail mode — open (each replica goes on with its own
// view) or closed (what needs the shared state is refused) — and a
// breaker that, after a failed Redis call, skips Redis for a backoff, so
// the fail mode applies at no cost instead of a timeout per request.
package redisfail

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Mode is what a Redis-backed check does while Redis is unreachable.
type Mode string

// Modes.
const (
	// Open goes on with this replica's own view.
	Open Mode = "open"
	// Closed refuses what needs the shared state.
	Closed Mode = "closed"
)

// Parse parses "open" or "closed".
func Parse(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Open, Closed:
		return m, nil
	}
	return "", fmt.Errorf("fail mode must be open or closed, got %q", s)
}

// Validate reports a mode that is neither "" (the caller's default),
// open nor closed.
func (m Mode) Validate() error {
	if m == "" {
		return nil
	}
	_, err := Parse(string(m))
	return err
}

// The defaults of the Redis-backed packages' shared settings.
const (
	// DefaultTimeout bounds one Redis call.
	DefaultTimeout = 250 * time.Millisecond
	// DefaultBackoff is how long Redis is skipped after a failed call.
	DefaultBackoff = time.Second
	// DefaultMode is Open: an outage of Redis degrades to per-replica
	// enforcement rather than refusing traffic.
	DefaultMode = Open
)

// FillDefaults sets a zero timeout, a zero backoff and an empty mode to
// their defaults.
func FillDefaults(timeout, backoff *time.Duration, mode *Mode) {
	if *timeout == 0 {
		*timeout = DefaultTimeout
	}
	if *backoff == 0 {
		*backoff = DefaultBackoff
	}
	if *mode == "" {
		*mode = DefaultMode
	}
}

// Breaker remembers that Redis failed: Down is true for the backoff
// after the last Trip. The zero value is closed (Redis is tried). Safe
// for concurrent use; callers pass their own clock's time.
type Breaker struct {
	until atomic.Int64 // unix ns; Redis is not tried before it
}

// Down reports whether Redis should be skipped at now.
func (b *Breaker) Down(now time.Time) bool { return now.UnixNano() < b.until.Load() }

// Trip marks Redis failed at now: Down until now+backoff.
func (b *Breaker) Trip(now time.Time, backoff time.Duration) {
	b.until.Store(now.Add(backoff).UnixNano())
}

// Remaining is how long Redis is still skipped after now (≤ 0 when it is
// tried again).
func (b *Breaker) Remaining(now time.Time) time.Duration {
	return time.Duration(b.until.Load() - now.UnixNano())
}
