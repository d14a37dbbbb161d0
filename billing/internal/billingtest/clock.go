package billingtest

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// Clock is a settable fake clock, safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock stopped at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Shift is one date a clock-dependent test runs at.
type Shift struct {
	// Name is the subtest name: the shift's date and what it is.
	Name string
	// Base is the test's fixed time moved to this shift.
	Base time.Time
}

// Shifts returns the dates the clock-shift guard runs a test at: base
// itself, then base moved by whole years to at least one year before and
// at least one year after the real date. Month, day and time of day stay
// base's, so the test's own arithmetic is the same in every shift; only
// the relation to the real clock differs. A time taken from time.Now() or
// a database's now() where the injected clock should decide then fails in
// one of the two, whatever today's date is.
func Shifts(base time.Time) []Shift {
	return shiftsAt(base, time.Now())
}

func shiftsAt(base, real time.Time) []Shift {
	past, future := base, base
	for past.After(real.AddDate(-1, 0, 0)) {
		past = past.AddDate(-1, 0, 0)
	}
	for past.AddDate(1, 0, 0).Before(real.AddDate(-1, 0, 0)) {
		past = past.AddDate(1, 0, 0)
	}
	for future.Before(real.AddDate(1, 0, 0)) {
		future = future.AddDate(1, 0, 0)
	}
	for future.AddDate(-1, 0, 0).After(real.AddDate(1, 0, 0)) {
		future = future.AddDate(-1, 0, 0)
	}
	return []Shift{
		{Name: "fixed-" + base.Format(time.DateOnly), Base: base},
		{Name: fmt.Sprintf("year-before-now-%s", past.Format(time.DateOnly)), Base: past},
		{Name: fmt.Sprintf("year-after-now-%s", future.Format(time.DateOnly)), Base: future},
	}
}

// RunShifted runs fn as one subtest per shift of base (see Shifts).
func RunShifted(t *testing.T, base time.Time, fn func(t *testing.T, base time.Time)) {
	t.Helper()
	for _, s := range Shifts(base) {
		t.Run(s.Name, func(t *testing.T) { fn(t, s.Base) })
	}
}
