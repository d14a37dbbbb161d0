package billingtest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestShiftsStraddleTheRealDate(t *testing.T) {
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name         string
		real         time.Time
		past, future string
	}{
		{"a day after base", time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), "2025-11-30", "2028-11-30"},
		{"a day before base", time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), "2024-11-30", "2027-11-30"},
		{"years later", time.Date(2031, 6, 1, 0, 0, 0, 0, time.UTC), "2029-11-30", "2032-11-30"},
		{"years earlier", time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), "2018-11-30", "2021-11-30"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := shiftsAt(base, tt.real)
			got := []string{s[0].Base.Format(time.DateOnly), s[1].Base.Format(time.DateOnly), s[2].Base.Format(time.DateOnly)}
			if diff := cmp.Diff([]string{"2026-11-30", tt.past, tt.future}, got); diff != "" {
				t.Errorf("shift dates (-want +got):\n%s", diff)
			}
			if !s[1].Base.Before(tt.real.AddDate(-1, 0, 0).Add(time.Second)) || !s[2].Base.After(tt.real.AddDate(1, 0, 0).Add(-time.Second)) {
				t.Errorf("shifts %v, %v do not straddle %v by a year", s[1].Base, s[2].Base, tt.real)
			}
			if s[1].Base.Hour() != 10 || s[2].Base.Day() != 30 {
				t.Errorf("shifts lost base's time of day or day: %v %v", s[1].Base, s[2].Base)
			}
		})
	}
}
