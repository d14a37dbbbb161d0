package redisfail

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
		ok   bool
	}{{"open", Open, true}, {"closed", Closed, true}, {"", "", false}, {"Open", "", false}, {"half", "", false}} {
		got, err := Parse(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("Parse(%q) = %q, %v", tc.in, got, err)
		}
	}
	if Mode("").Validate() != nil || Closed.Validate() != nil || Mode("x").Validate() == nil {
		t.Error("Validate: \"\" and closed valid, x invalid")
	}
}

func TestBreaker(t *testing.T) {
	var b Breaker
	t0 := time.Unix(1000, 0)
	if b.Down(t0) {
		t.Fatal("a new breaker is down")
	}
	b.Trip(t0, time.Second)
	if !b.Down(t0.Add(999*time.Millisecond)) || b.Down(t0.Add(time.Second)) {
		t.Error("down for exactly the backoff")
	}
	if r := b.Remaining(t0.Add(250 * time.Millisecond)); r != 750*time.Millisecond {
		t.Errorf("remaining %v, want 750ms", r)
	}
}
