package tenants

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// ErrTooManyAttempts means too many failed logins in the current window,
// for this email from this client address or for this client address
// altogether; logins are refused, right password or not, until the
// window ends. The error returned is a *ThrottleError, which matches it
// with errors.Is and says when to retry. The api answers it 429 with
// Retry-After.
var ErrTooManyAttempts = errors.New("too many failed login attempts; try again later")

// ThrottleError is a refused login: Scope says which limit was hit
// ("email_ip" or "ip"), RetryAfter when the window ends.
type ThrottleError struct {
	Scope      string
	RetryAfter time.Duration
}

// Error implements error.
func (e *ThrottleError) Error() string {
	return fmt.Sprintf("%v (retry in %d s)", ErrTooManyAttempts, e.RetrySeconds())
}

// Is makes errors.Is(err, ErrTooManyAttempts) true.
func (e *ThrottleError) Is(target error) bool { return target == ErrTooManyAttempts }

// RetrySeconds is RetryAfter rounded up to whole seconds, at least 1 (the
// Retry-After header's unit).
func (e *ThrottleError) RetrySeconds() int {
	return max(1, int(math.Ceil(e.RetryAfter.Seconds())))
}

// loginLimiter throttles failed logins with two fixed-window counters:
//
//   - per (email, client IP): Config.LoginMaxFailures failures lock that
//     email out from that address only, so an attacker elsewhere cannot lock
//     the owner out;
//   - per client IP: Config.LoginMaxFailuresPerIP failures over any emails
//     lock the address out, so spraying one password over many emails is
//     throttled too.
//
// Unknown emails are counted like known ones, so the limiter reveals
// nothing about which accounts exist. A success resets the (email, IP)
// counter only: logging in to one's own account must not reset an address
// that sprays others. An empty client IP (no address known) skips the per-IP
// counter. Memory is bounded per counter.
type loginLimiter struct {
	pair *windowCounter
	ip   *windowCounter
}

func newLoginLimiter(perPair, perIP int, window time.Duration) *loginLimiter {
	return &loginLimiter{pair: newWindowCounter(perPair, window), ip: newWindowCounter(perIP, window)}
}

func pairKey(email, ip string) string { return email + "\x00" + ip }

// check returns a *ThrottleError when either limit is used up at now.
func (l *loginLimiter) check(email, ip string, now time.Time) error {
	if wait, blocked := l.pair.blocked(pairKey(email, ip), now); blocked {
		return &ThrottleError{Scope: "email_ip", RetryAfter: wait}
	}
	if ip == "" {
		return nil
	}
	if wait, blocked := l.ip.blocked(ip, now); blocked {
		return &ThrottleError{Scope: "ip", RetryAfter: wait}
	}
	return nil
}

// fail records a failed login.
func (l *loginLimiter) fail(email, ip string, now time.Time) {
	l.pair.fail(pairKey(email, ip), now)
	if ip != "" {
		l.ip.fail(ip, now)
	}
}

// succeed forgets the (email, IP) failures after a successful login.
func (l *loginLimiter) succeed(email, ip string) { l.pair.reset(pairKey(email, ip)) }

// windowCounter counts failures per key in fixed windows; memory is bounded
// by maxKeys.
type windowCounter struct {
	max     int
	window  time.Duration
	maxKeys int

	mu sync.Mutex
	m  map[string]loginWindow
}

type loginWindow struct {
	start    time.Time
	failures int
}

func newWindowCounter(max int, window time.Duration) *windowCounter {
	return &windowCounter{max: max, window: window, maxKeys: 100_000, m: map[string]loginWindow{}}
}

// blocked reports whether key has used up its failures in the window, and
// how long until the window ends.
func (l *windowCounter) blocked(key string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.m[key]
	if !ok {
		return 0, false
	}
	if now.Sub(w.start) >= l.window {
		delete(l.m, key)
		return 0, false
	}
	return w.start.Add(l.window).Sub(now), w.failures >= l.max
}

// fail records a failure.
func (l *windowCounter) fail(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.m[key]
	if !ok || now.Sub(w.start) >= l.window {
		if len(l.m) >= l.maxKeys {
			l.sweep(now)
		}
		w = loginWindow{start: now}
	}
	w.failures++
	l.m[key] = w
}

// reset forgets a key's failures.
func (l *windowCounter) reset(key string) {
	l.mu.Lock()
	delete(l.m, key)
	l.mu.Unlock()
}

// sweep drops ended windows; if the table is still full it drops the
// windows older than the average age, so an attacker spraying keys cannot
// grow it without bound.
func (l *windowCounter) sweep(now time.Time) {
	var oldest []time.Time
	for k, w := range l.m {
		if now.Sub(w.start) >= l.window {
			delete(l.m, k)
			continue
		}
		oldest = append(oldest, w.start)
	}
	if len(l.m) < l.maxKeys {
		return
	}
	var sum time.Duration
	for _, t := range oldest {
		sum += now.Sub(t)
	}
	avgAge := sum / time.Duration(len(oldest))
	for k, w := range l.m {
		if now.Sub(w.start) >= avgAge {
			delete(l.m, k)
		}
	}
}
