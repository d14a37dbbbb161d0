package billing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/internal/billingtest"
	"github.com/routebalance/routebalance/billing/pgstore"
	"github.com/routebalance/routebalance/billing/sqlitestore"
)

type requestStore interface {
	billing.Ledger
	Requests(ctx context.Context, q billing.RequestQuery) (billing.RequestPage, error)
}

// TestRequestLog pages a tenant's log newest first on both engines, with
// filters and the routing decision round-tripping through the ledger.
func TestRequestLog(t *testing.T) {
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	ev := func(id, tenant, model, key, status string, at time.Duration) billing.UsageEvent {
		return billing.UsageEvent{
			RequestID: id, TenantID: tenant, KeyID: key, ClusterID: "c1", InstanceID: "i-" + model, Model: model,
			Policy: "routebalance", PromptTokens: 12, OutputTokens: 30, Cost: 210_000, Billed: 420_000,
			PredictedQuality: 0.71, TTFT: 120 * time.Millisecond, E2E: 900 * time.Millisecond,
			Status: status, HTTPStatus: 200, StartedAt: base.Add(at), FinishedAt: base.Add(at + 900*time.Millisecond),
			PredictedE2E: 800 * time.Millisecond, Preset: "custom", Weights: billing.Weights{Quality: 0.6, Cost: 0.2, Latency: 0.2},
			Relaxed: []string{"ttft", "budget"}, Attempts: 2,
		}
	}
	evs := []billing.UsageEvent{
		ev("r1", "t1", "A", "k1", "ok", 1*time.Minute),
		ev("r2", "t1", "B", "k1", "error", 2*time.Minute),
		ev("r3", "t1", "A", "k2", "ok", 3*time.Minute),
		ev("r4", "t1", "A", "k1", "ok", 4*time.Minute),
		ev("r5b", "t1", "B", "k2", "cancelled", 5*time.Minute),
		ev("r5a", "t1", "B", "k2", "ok", 5*time.Minute), // same start: id breaks the tie
		ev("x1", "t2", "A", "k9", "ok", 2*time.Minute),  // another tenant
		ev("r0", "t1", "A", "k1", "ok", -time.Minute),   // before the range
	}
	legacy := ev("r6", "t1", "A", "k1", "ok", 6*time.Minute)
	legacy.Preset, legacy.Weights, legacy.Relaxed, legacy.Attempts, legacy.PredictedE2E = "", billing.Weights{}, nil, 0, 0
	evs = append(evs, legacy)

	stores := map[string]requestStore{
		"postgres": pgstore.New(billingtest.PG(t)),
		"sqlite":   sqlitestore.New(billingtest.SQLite(t)),
	}
	ids := func(p billing.RequestPage) []string {
		out := []string{}
		for _, r := range p.Rows {
			out = append(out, r.ID)
		}
		return out
	}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if _, err := s.Insert(ctx, evs); err != nil {
				t.Fatal(err)
			}
			q := billing.RequestQuery{TenantID: "t1", From: base, To: base.Add(time.Hour), Limit: 2}
			var got []string
			pages := 0
			for {
				p, err := s.Requests(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				pages++
				got = append(got, ids(p)...)
				if p.NextCursor == "" {
					break
				}
				q.Cursor = p.NextCursor
			}
			if d := cmp.Diff([]string{"r6", "r5b", "r5a", "r4", "r3", "r2", "r1"}, got); d != "" || pages != 4 {
				t.Errorf("all pages (%d) (-want +got):\n%s", pages, d)
			}

			for _, tt := range []struct {
				name string
				q    billing.RequestQuery
				want []string
			}{
				{"model", billing.RequestQuery{Model: "B"}, []string{"r5b", "r5a", "r2"}},
				{"key", billing.RequestQuery{KeyID: "k2"}, []string{"r5b", "r5a", "r3"}},
				{"status", billing.RequestQuery{Status: "ok", Model: "A"}, []string{"r6", "r4", "r3", "r1"}},
				{"range", billing.RequestQuery{From: base.Add(2 * time.Minute), To: base.Add(4 * time.Minute)}, []string{"r3", "r2"}},
				{"other tenant", billing.RequestQuery{TenantID: "t2"}, []string{"x1"}},
				{"cluster", billing.RequestQuery{ClusterID: "c1", Model: "B"}, []string{"r5b", "r5a", "r2"}},
				{"other cluster", billing.RequestQuery{ClusterID: "c2"}, []string{}},
			} {
				q := tt.q
				if q.TenantID == "" {
					q.TenantID = "t1"
				}
				if q.From.IsZero() {
					q.From, q.To = base, base.Add(time.Hour)
				}
				p, err := s.Requests(ctx, q)
				if err != nil {
					t.Fatalf("%s: %v", tt.name, err)
				}
				if d := cmp.Diff(tt.want, ids(p)); d != "" || p.NextCursor != "" {
					t.Errorf("%s (cursor %q) (-want +got):\n%s", tt.name, p.NextCursor, d)
				}
			}

			p, err := s.Requests(ctx, billing.RequestQuery{TenantID: "t1", From: base, To: base.Add(time.Hour), Model: "B", Status: "error"})
			if err != nil || len(p.Rows) != 1 {
				t.Fatalf("one row: %v %+v", err, p)
			}
			want := billing.RequestRow{
				ID: "r2", StartedAt: base.Add(2 * time.Minute), FinishedAt: base.Add(2*time.Minute + 900*time.Millisecond),
				KeyID: "k1", ClusterID: "c1", Model: "B", InstanceID: "i-B", Policy: "routebalance", Status: "error",
				HTTPStatus: 200, PromptTokens: 12, OutputTokens: 30, TTFTMs: 120, E2EMs: 900, Cost: 210_000, Billed: 420_000, CostUSD: 0.00021,
				BilledUSD: 0.00042, PredictedQuality: 0.71, PredictedE2EMs: 800, Preset: "custom",
				Weights: &billing.Weights{Quality: 0.6, Cost: 0.2, Latency: 0.2}, Relaxed: []string{"ttft", "budget"}, Attempts: 2,
			}
			if d := cmp.Diff(want, p.Rows[0]); d != "" {
				t.Errorf("row (-want +got):\n%s", d)
			}
			p, err = s.Requests(ctx, billing.RequestQuery{TenantID: "t1", From: base, To: base.Add(time.Hour), Limit: 1})
			if err != nil || p.Rows[0].ID != "r6" || p.Rows[0].Weights != nil || len(p.Rows[0].Relaxed) != 0 || p.Rows[0].Attempts != 1 {
				t.Errorf("row without a decision: %v %+v", err, p.Rows)
			}

			for _, bad := range []billing.RequestQuery{
				{TenantID: "t1", From: base, To: base},
				{TenantID: "t1", From: base, To: base.Add(time.Hour), Status: "weird"},
				{TenantID: "t1", From: base, To: base.Add(time.Hour), Limit: 501},
				{TenantID: "t1", From: base, To: base.Add(time.Hour), Cursor: "%%%"},
				{TenantID: "t1", From: base, To: base.Add(time.Hour), Cursor: "bm9waXBl"},
				{From: base, To: base.Add(time.Hour)},
			} {
				if _, err := s.Requests(ctx, bad); !errors.Is(err, billing.ErrInvalid) {
					t.Errorf("%+v: err = %v, want ErrInvalid", bad, err)
				}
			}
		})
	}
}

func TestCursorRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.UTC)
	c := billing.EncodeCursor(at, "req-1|x")
	gt, gid, err := billing.DecodeCursor(c)
	if err != nil || !gt.Equal(at) || gid != "req-1|x" {
		t.Errorf("DecodeCursor(%q) = %v %q %v", c, gt, gid, err)
	}
}

// FuzzDecodeCursor: a cursor comes from the client; decoding never panics
// and whatever decodes re-encodes to a cursor that decodes the same.
func FuzzDecodeCursor(f *testing.F) {
	f.Add(billing.EncodeCursor(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), "abc"))
	f.Add("")
	f.Add("%%%")
	f.Add("MjAyNi0wMS0wMlQwMzowNDowNVp8")
	f.Fuzz(func(t *testing.T, c string) {
		at, id, err := billing.DecodeCursor(c)
		if err != nil {
			if !errors.Is(err, billing.ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		at2, id2, err := billing.DecodeCursor(billing.EncodeCursor(at, id))
		if err != nil || !at2.Equal(at) || id2 != id {
			t.Fatalf("re-encode of %q: %v %q %v", c, at2, id2, err)
		}
	})
}
