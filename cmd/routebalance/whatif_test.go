package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/pgstore"
	"github.com/routebalance/routebalance/billing/sqlitestore"
	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/sim"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// TestLedgerTrafficFeedsPreview: the what-if preview's traffic reader
// returns the cluster's served requests from the real ledger (newest
// first, this cluster only, "ok" only, with their recorded sizes and
// latencies), and the Previewer replays them at the observed rate.
func TestLedgerTrafficFeedsPreview(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.Engine) {
		var st requestLog
		var ins interface {
			Insert(context.Context, []billing.UsageEvent) ([]string, error)
		}
		if db.Pool != nil {
			s := pgstore.New(db.Pool)
			st, ins = s, s
		} else {
			s := sqlitestore.New(db.SQLite)
			st, ins = s, s
		}
		// 21 served requests over 10 s on c1 (2 req/s), 9 on c2, one error on c1.
		start := time.Date(2026, 3, 4, 11, 0, 0, 0, time.UTC)
		var evs []billing.UsageEvent
		for i := 0; i < 31; i++ {
			c, at, status := "c1", start.Add(time.Duration(i)*500*time.Millisecond), "ok"
			switch {
			case i == 30:
				at, status = start.Add(5*time.Second), "error"
			case i >= 21:
				c, at = "c2", start.Add(time.Duration(i)*time.Second)
			}
			evs = append(evs, billing.UsageEvent{RequestID: fmt.Sprintf("o-%d", i), TenantID: "t1", ClusterID: c, Model: "small-1b",
				Status: status, HTTPStatus: 200, PromptTokens: 100, OutputTokens: 50, E2E: 800 * time.Millisecond, TTFT: 90 * time.Millisecond,
				Cost: 20_000, PredictedQuality: 0.5, StartedAt: at, FinishedAt: at.Add(800 * time.Millisecond)})
		}
		if _, err := ins.Insert(context.Background(), evs); err != nil {
			t.Fatal(err)
		}
		tr := ledgerTraffic{st}
		rows, err := tr.ServedRequests(context.Background(), "t1", "c1", start.Add(-time.Hour), start.Add(time.Hour), 300)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 21 || rows[0].ID != "o-20" || rows[20].ID != "o-0" {
			t.Fatalf("got %d rows (first %+v), want o-20 … o-0", len(rows), rows[0])
		}
		want := sim.ObservedRequest{ID: "o-20", StartedAt: start.Add(10 * time.Second), FinishedAt: start.Add(10800 * time.Millisecond),
			PromptTokens: 100, OutputTokens: 50, TTFTMs: 90, E2EMs: 800, CostUSD: 0.00002, PredictedQuality: 0.5}
		got := rows[0]
		got.StartedAt, got.FinishedAt = got.StartedAt.UTC(), got.FinishedAt.UTC()
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("row (-want +got):\n%s", d)
		}
		if rows, err := tr.ServedRequests(context.Background(), "t2", "c1", start.Add(-time.Hour), start.Add(time.Hour), 300); err != nil || len(rows) != 0 {
			t.Errorf("another tenant: %d rows, %v", len(rows), err)
		}

		p, err := sim.NewPreviewer(sim.PreviewConfig{}, sim.PreviewDeps{Traffic: tr, Clock: fixedNow(start.Add(time.Hour)),
			Sample: []workload.Item{{ID: "s", Prompt: "sample"}}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Preview(context.Background(), routing.WhatIfQuery{TenantID: "t1", Weights: routing.Weights{Quality: 1},
			Cluster: routing.Cluster{ID: "c1", Instances: []routing.Instance{{ID: "i1", Model: "small-1b", GPU: "L4", MaxConcurrency: 16}}}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Source != "observed" || res.Observed == nil || res.Observed.Requests != 21 || res.Observed.RateRPS != 2 || res.RateRPS != 2 {
			t.Errorf("preview: source %q observed %+v rate %v", res.Source, res.Observed, res.RateRPS)
		}
	})
}

type fixedNow time.Time

func (f fixedNow) Now() time.Time { return time.Time(f) }
