package tenants

import (
	"errors"
	"sync"
	"time"
)

// ErrTooManyAttempts means an email had too many failed logins in the
// current window; logins for it are refused, right password or not, until
// the window ends. The api answers it 429.
var ErrTooManyAttempts = errors.New("too many failed login attempts; try again later")

// loginLimiter counts failed logins per normalised email in fixed windows.
// Unknown emails are counted like known ones, so the limiter reveals
// nothing about which accounts exist. Memory is bounded by maxKeys.
type loginLimiter struct {
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

func newLoginLimiter(max int, window time.Duration) *loginLimiter {
	return &loginLimiter{max: max, window: window, maxKeys: 100_000, m: map[string]loginWindow{}}
}

// blocked reports whether email has used up its failures in the window.
func (l *loginLimiter) blocked(email string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.m[email]
	if !ok {
		return false
	}
	if now.Sub(w.start) >= l.window {
		delete(l.m, email)
		return false
	}
	return w.failures >= l.max
}

// fail records a failed login.
func (l *loginLimiter) fail(email string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.m[email]
	if !ok || now.Sub(w.start) >= l.window {
		if len(l.m) >= l.maxKeys {
			l.sweep(now)
		}
		w = loginWindow{start: now}
	}
	w.failures++
	l.m[email] = w
}

// reset forgets an email's failures after a successful login.
func (l *loginLimiter) reset(email string) {
	l.mu.Lock()
	delete(l.m, email)
	l.mu.Unlock()
}

// sweep drops ended windows; if the table is still full it drops the
// oldest half, so an attacker spraying emails cannot grow it without bound.
func (l *loginLimiter) sweep(now time.Time) {
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
	// Drop windows that started before the median start.
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
