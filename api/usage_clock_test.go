package api

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/routebalance/routebalance/billing"
)

// TestUsageDefaultRangeFollowsTheClock checks that GET /api/v1/usage
// without from/to reports the injected clock's month up to its now, on
// dates before and after the real one.
func TestUsageDefaultRangeFollowsTheClock(t *testing.T) {
	for _, shift := range []int{-1, 0, 1} {
		now := time.Date(2026+shift, 11, 30, 12, 0, 0, 0, time.UTC)
		t.Run(now.Format(time.DateOnly), func(t *testing.T) {
			store := billingSQLite(t)
			ev := func(id string, at time.Time) billing.UsageEvent {
				return billing.UsageEvent{RequestID: id, TenantID: "t1", Model: "m", Billed: billing.NanoPerUSD, StartedAt: at, FinishedAt: at}
			}
			evs := []billing.UsageEvent{
				ev("last-month", now.AddDate(0, -1, 0)),
				ev("month-start", billing.PeriodStart(now)),
				ev("this-morning", now.Add(-2*time.Hour)),
				ev("after-now", now.Add(time.Hour)),
			}
			if _, err := store.Insert(context.Background(), evs); err != nil {
				t.Fatal(err)
			}
			srv := New(Config{}, Deps{Usage: store, BillingTenant: headerTenant,
				Inference: InferenceDeps{Clock: &frozenClock{t: now}}})
			var rep billing.UsageReport
			if status := doJSON(t, srv.App(), http.MethodGet, "/api/v1/usage", "t1", &rep); status != 200 {
				t.Fatalf("status %d", status)
			}
			if rep.Total.Requests != 2 {
				t.Errorf("default range counted %d requests, want 2 (from the month's start to the clock's now)", rep.Total.Requests)
			}
		})
	}
}
