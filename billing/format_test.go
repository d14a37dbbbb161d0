package billing

import (
	"math"
	"testing"
	"time"
)

func TestFormatUSD(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{
		{0, "$0.00"}, {12.345, "$12.35"}, {1, "$1.00"}, {0.5, "$0.50"}, {0.123456, "$0.123"},
		{0.0012, "$0.0012"}, {0.00123456, "$0.00123"}, {0.000021, "$0.000021"}, {0.999, "$0.999"},
		{-0.004, "-$0.004"}, {1234567.891, "$1234567.89"}, {math.NaN(), "$NaN"},
	} {
		if got := FormatUSD(c.in); got != c.want {
			t.Errorf("FormatUSD(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestBudgetErrorSignificantDigits(t *testing.T) {
	e := &BudgetError{Scope: ScopeKey, LimitUSD: 0.001, SpentUSD: 0.0012, Period: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	want := "key monthly budget of $0.001 reached ($0.0012 spent since 2026-12-01)"
	if got := e.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
