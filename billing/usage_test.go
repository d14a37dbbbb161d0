package billing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/internal/billingtest"
	"github.com/routebalance/routebalance/billing/pgstore"
	"github.com/routebalance/routebalance/billing/sqlitestore"
)

type usageStore interface {
	billing.Ledger
	Usage(ctx context.Context, q billing.UsageQuery) (billing.UsageReport, error)
}

func TestUsageAggregation(t *testing.T) {
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	ev := func(id, tenant, model, inst, key string, at time.Duration, k float64) billing.UsageEvent {
		return billing.UsageEvent{
			RequestID: id, TenantID: tenant, KeyID: key, InstanceID: inst, Model: model,
			PromptTokens: int(10 * k), OutputTokens: int(5 * k), Cost: billing.Nano(100_000_000 * k), Billed: billing.Nano(200_000_000 * k),
			TTFT: time.Duration(10*k) * time.Millisecond, E2E: time.Duration(100*k) * time.Millisecond,
			PredictedQuality: 1 - 0.2*k, Status: "ok", StartedAt: base.Add(at - time.Second), FinishedAt: base.Add(at),
		}
	}
	evs := []billing.UsageEvent{
		ev("r1", "t1", "A", "i1", "k1", 15*time.Minute, 1),
		ev("r2", "t1", "A", "i2", "k1", 45*time.Minute, 2),
		ev("r3", "t1", "B", "i1", "k2", 65*time.Minute, 3),
		ev("r4", "t2", "A", "i1", "k9", 15*time.Minute, 1), // other tenant
		ev("r5", "t1", "A", "i1", "k1", 5*time.Hour, 1),    // outside the range
	}
	a := billing.UsageRow{Requests: 2, PromptTokens: 30, OutputTokens: 15, Tokens: 45, Cost: 300000000, Billed: 600000000, CostUSD: 0.3, BilledUSD: 0.6,
		MeanTTFTMs: 15, P95TTFTMs: 19.5, MeanE2EMs: 150, P95E2EMs: 195, MeanPredictedQuality: 0.7}
	b := billing.UsageRow{Requests: 1, PromptTokens: 30, OutputTokens: 15, Tokens: 45, Cost: 300000000, Billed: 600000000, CostUSD: 0.3, BilledUSD: 0.6,
		MeanTTFTMs: 30, P95TTFTMs: 30, MeanE2EMs: 300, P95E2EMs: 300, MeanPredictedQuality: 0.4}
	total := billing.UsageRow{Requests: 3, PromptTokens: 60, OutputTokens: 30, Tokens: 90, Cost: 600000000, Billed: 1200000000, CostUSD: 0.6, BilledUSD: 1.2,
		MeanTTFTMs: 20, P95TTFTMs: 29, MeanE2EMs: 200, P95E2EMs: 290, MeanPredictedQuality: 0.6}
	named := func(r billing.UsageRow, g string) billing.UsageRow { r.Group = g; return r }
	i1 := billing.UsageRow{Requests: 2, PromptTokens: 40, OutputTokens: 20, Tokens: 60, Cost: 400000000, Billed: 800000000, CostUSD: 0.4, BilledUSD: 0.8,
		MeanTTFTMs: 20, P95TTFTMs: 29, MeanE2EMs: 200, P95E2EMs: 290, MeanPredictedQuality: 0.6}
	i2 := billing.UsageRow{Requests: 1, PromptTokens: 20, OutputTokens: 10, Tokens: 30, Cost: 200000000, Billed: 400000000, CostUSD: 0.2, BilledUSD: 0.4,
		MeanTTFTMs: 20, P95TTFTMs: 20, MeanE2EMs: 200, P95E2EMs: 200, MeanPredictedQuality: 0.6}

	tests := []struct {
		groupBy string
		want    []billing.UsageRow
	}{
		{"", []billing.UsageRow{total}},
		{billing.GroupModel, []billing.UsageRow{named(a, "A"), named(b, "B")}},
		{billing.GroupHour, []billing.UsageRow{named(a, "2026-11-30T10:00:00Z"), named(b, "2026-11-30T11:00:00Z")}},
		{billing.GroupDay, []billing.UsageRow{named(total, "2026-11-30")}},
		{billing.GroupKey, []billing.UsageRow{named(a, "k1"), named(b, "k2")}},
		{billing.GroupInstance, []billing.UsageRow{named(i1, "i1"), named(i2, "i2")}},
	}
	stores := map[string]usageStore{
		"postgres": pgstore.New(billingtest.PG(t)),
		"sqlite":   sqlitestore.New(billingtest.SQLite(t)),
	}
	approx := cmpopts.EquateApprox(0, 1e-9)
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if _, err := s.Insert(ctx, evs); err != nil {
				t.Fatal(err)
			}
			for _, tt := range tests {
				rep, err := s.Usage(ctx, billing.UsageQuery{TenantID: "t1", From: base, To: base.Add(2 * time.Hour), GroupBy: tt.groupBy})
				if err != nil {
					t.Fatalf("group_by %q: %v", tt.groupBy, err)
				}
				if diff := cmp.Diff(tt.want, rep.Rows, approx); diff != "" {
					t.Errorf("group_by %q rows (-want +got):\n%s", tt.groupBy, diff)
				}
				if diff := cmp.Diff(total, rep.Total, approx); diff != "" {
					t.Errorf("group_by %q total (-want +got):\n%s", tt.groupBy, diff)
				}
			}
			_, err := s.Usage(ctx, billing.UsageQuery{TenantID: "t1", From: base, To: base, GroupBy: "week"})
			if !errors.Is(err, billing.ErrInvalid) {
				t.Errorf("bad query: err = %v, want ErrInvalid", err)
			}
		})
	}
}
