package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/quality"
	"github.com/routebalance/routebalance/routing/quality/sqlstore"
	tenantsql "github.com/routebalance/routebalance/tenants/sqlstore"
)

func open(t *testing.T, e dbtest.Engine) (*sqlstore.Store, *sql.DB) {
	t.Helper()
	if e.Pool != nil {
		s := sqlstore.NewPostgres(e.Pool)
		t.Cleanup(func() { s.Close() })
		db := stdlib.OpenDBFromPool(e.Pool)
		t.Cleanup(func() { db.Close() })
		return s, db
	}
	return sqlstore.NewSQLite(e.SQLite), e.SQLite
}

func exec(t *testing.T, db *sql.DB, pg bool, q string, args ...any) {
	t.Helper()
	if pg {
		for i := 1; strings.Contains(q, "?"); i++ {
			q = strings.Replace(q, "?", fmt.Sprintf("$%d", i), 1)
		}
	}
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func start(t *testing.T, p quality.Persister) *quality.Store {
	t.Helper()
	s, err := quality.New(quality.Config{}, quality.Deps{Persist: p})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func upload(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i%2 == 0 {
			fmt.Fprintf(&b, `{"id":"r%d","prompt":"solve %d x + 1 = %d for x","scores":{"big":1,"small":0}}`+"\n", i, i, 3*i)
		} else {
			fmt.Fprintf(&b, `{"id":"r%d","prompt":"a poem about the sea number %d","scores":{"big":1,"small":1},"output_tokens":{"small":80}}`+"\n", i, i)
		}
	}
	return b.String()
}

// seedCluster inserts tenant t1 and its cluster c1.
func seedCluster(t *testing.T, db *sql.DB, pg bool) {
	t.Helper()
	exec(t, db, pg, `INSERT INTO tenants (id, name, created_at) VALUES (?, ?, '2026-01-01T00:00:00Z')`, "t1", "acme")
	exec(t, db, pg, `INSERT INTO clusters (id, tenant_id, name, policy, created_at, updated_at) VALUES ('c1', 't1', 'c1', '{}', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')`)
}

func ready(t *testing.T, s *quality.Store, id string) quality.Status {
	t.Helper()
	testwait.Until(t, "index of "+id+" built", func() bool { return s.Status(id).State == quality.StateReady })
	return s.Status(id)
}

// TestUploadSurvivesRestart uploads through one Store, starts another on
// the same database and checks it rebuilds the same index, that DELETE
// removes the row, and that deleting the cluster drops its data.
func TestUploadSurvivesRestart(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, e dbtest.Engine) {
		p, db := open(t, e)
		pg := e.Pool != nil
		exec(t, db, pg, `INSERT INTO tenants (id, name, created_at) VALUES (?, ?, '2026-01-01T00:00:00Z')`, "t1", "acme")
		for _, c := range []string{"c1", "c2"} {
			exec(t, db, pg, `INSERT INTO clusters (id, tenant_id, name, policy, created_at, updated_at) VALUES (?, 't1', ?, '{}', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')`, c, c)
		}
		ctx := context.Background()
		first := start(t, p)
		for _, c := range []string{"c1", "c2"} {
			if _, err := first.Upload(ctx, "t1", c, []string{"big", "small"}, strings.NewReader(upload(300))); err != nil {
				t.Fatal(err)
			}
		}
		want := ready(t, first, "c1")
		prompt := []string{"a poem about the sea number 9999"}
		est := func(s *quality.Store) routing.PromptEstimate {
			out := make([]routing.PromptEstimate, 1)
			if err := s.ForCluster("c1").Estimate(ctx, prompt, []string{"big", "small"}, []float64{0.5, 0.5}, out); err != nil {
				t.Fatal(err)
			}
			return out[0]
		}
		wantEst := est(first)

		second := start(t, p)
		if n, err := second.Restore(ctx); err != nil || n != 2 {
			t.Fatalf("restore: %d, %v; want 2 uploads", n, err)
		}
		got := ready(t, second, "c1")
		opts := cmp.FilterPath(func(p cmp.Path) bool {
			s := p.String()
			return s == "BuiltAt" || s == "BuildSeconds" || s == "History"
		}, cmp.Ignore())
		if d := cmp.Diff(want, got, opts); d != "" {
			t.Errorf("status after restart (-before +after):\n%s", d)
		}
		if gotEst := est(second); cmp.Diff(wantEst.Quality, gotEst.Quality) != "" || gotEst.Source[1] != routing.SourceCluster {
			t.Errorf("estimate after restart %v %v, before %v", gotEst.Quality, gotEst.Source, wantEst.Quality)
		}

		if err := second.Delete(ctx, "c1"); err != nil {
			t.Fatal(err)
		}
		exec(t, db, pg, `DELETE FROM clusters WHERE id = 'c2'`)
		all, err := p.All(ctx)
		if err != nil || len(all) != 0 {
			t.Errorf("after deleting c1's data and cluster c2: %d rows, %v; want none", len(all), err)
		}
	})
}

// TestJudgeSettingsStored saves, replaces and reads judge settings on both
// engines; they go with their cluster.
func TestJudgeSettingsStored(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, e dbtest.Engine) {
		p, db := open(t, e)
		pg := e.Pool != nil
		seedCluster(t, db, pg)
		ctx := context.Background()
		for _, s := range []quality.JudgeSettings{{Enabled: true, Model: "a", SampleRate: 0.5, MonthlyBudgetUSD: 1}, {Enabled: true, Model: "b", SampleRate: 0.2, MonthlyBudgetUSD: 3}} {
			if err := p.SaveJudge(ctx, "t1", "c1", s); err != nil {
				t.Fatal(err)
			}
		}
		got, err := p.Judges(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(map[string]quality.JudgeSettings{"c1": {Enabled: true, Model: "b", SampleRate: 0.2, MonthlyBudgetUSD: 3}}, got); d != "" {
			t.Errorf("judges (-want +got):\n%s", d)
		}
		exec(t, db, pg, `DELETE FROM clusters WHERE id = 'c1'`)
		if got, err := p.Judges(ctx); err != nil || len(got) != 0 {
			t.Errorf("after the cluster went: %v, %v", got, err)
		}
	})
}

// TestUploadReachesOtherReplicas: two Stores on one Postgres, the second
// following the tenant change feed (tenants/sqlstore Watch, as serve
// wires it): an upload on the first is rebuilt on the second without a
// restart, a re-upload replaces it there, a delete drops it there.
func TestUploadReachesOtherReplicas(t *testing.T) {
	pool := dbtest.Postgres(t)
	e := dbtest.Engine{Pool: pool}
	p, db := open(t, e)
	seedCluster(t, db, true)
	ctx, cancel := context.WithCancel(context.Background())
	a, b := start(t, p), start(t, p)
	feed := tenantsql.NewPostgres(pool)
	live := make(chan struct{})
	var once sync.Once
	done := make(chan struct{}, 2)
	go func() { b.Follow(ctx); done <- struct{}{} }()
	go func() {
		feed.Watch(ctx, b.Changed, func() { b.Changed(""); once.Do(func() { close(live) }) })
		done <- struct{}{}
	}()
	t.Cleanup(func() { cancel(); <-done; <-done })
	<-live

	if _, err := a.Upload(ctx, "t1", "c1", []string{"big", "small"}, strings.NewReader(upload(60))); err != nil {
		t.Fatal(err)
	}
	if got := ready(t, b, "c1"); got.Records != 60 {
		t.Errorf("the other replica's status: %+v, want the 60-record upload", got)
	}
	if _, err := a.Upload(ctx, "t1", "c1", []string{"big", "small"}, strings.NewReader(upload(90))); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the re-upload on the other replica", func() bool {
		st := b.Status("c1")
		return st.State == quality.StateReady && st.Records == 90
	})
	if err := a.Delete(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the delete on the other replica", func() bool { return b.Status("c1").State == quality.StateNone })
}

// scoreCaller stands in for the judge model (the rubric's answer is all a
// judge test needs; the real dispatch path is tested in cmd/routebalance):
// it always replies "4" at a fixed cost.
type scoreCaller struct{ cost float64 }

func (c scoreCaller) CallJudge(context.Context, quality.JudgeCall) (quality.JudgeReply, error) {
	return quality.JudgeReply{Text: "4", CostUSD: c.cost}, nil
}

type nopLearner struct{}

func (nopLearner) ObserveClusterQuality(string, string, string, float64) {}

// TestJudgeSpendSurvivesRestart: the month's judge spend and labels are
// stored as the judge calls; a restarted judge starts from them (and so
// stops at the budget it had already spent), a new month from zero.
func TestJudgeSpendSurvivesRestart(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, e dbtest.Engine) {
		p, db := open(t, e)
		pg := e.Pool != nil
		seedCluster(t, db, pg)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var now atomic.Int64 // the judges' clock, read by their goroutines
		now.Store(time.Date(2026, 5, 20, 12, 0, 0, 0, time.UTC).UnixNano())
		clock := func() time.Time { return time.Unix(0, now.Load()) }
		newJudge := func() *quality.Judge {
			j := quality.NewJudge(quality.JudgeConfig{}, quality.JudgeDeps{Caller: scoreCaller{cost: 0.25}, Learner: nopLearner{}, Store: p, Now: clock})
			go j.Run(ctx)
			return j
		}
		set := quality.JudgeSettings{Enabled: true, Model: "m", SampleRate: 1, MonthlyBudgetUSD: 1}
		first := newJudge()
		if err := first.Configure(ctx, "t1", "c1", set); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			first.Offer(quality.Sample{TenantID: "t1", ClusterID: "c1", RequestID: fmt.Sprint("r", i), Model: "m", Prompt: "p", Answer: "a"})
		}
		testwait.Until(t, "3 samples judged", func() bool { _, st := first.Settings("c1"); return st.Judged == 3 })

		second := newJudge()
		if _, err := second.Restore(ctx); err != nil {
			t.Fatal(err)
		}
		_, st := second.Settings("c1")
		if st.SpentUSD != 0.75 || st.CostPerLabelUSD != 0.25 || st.Month != "2026-05" {
			t.Errorf("restored judge: spent %v, cost per label %v, month %s; want 0.75, 0.25, 2026-05", st.SpentUSD, st.CostPerLabelUSD, st.Month)
		}
		// One more call reaches the budget (0.75 + 0.25); the next sample is
		// over it and dropped — the restart did not reset the month.
		second.Offer(quality.Sample{TenantID: "t1", ClusterID: "c1", RequestID: "r3", Model: "m", Prompt: "p", Answer: "a"})
		testwait.Until(t, "the 4th sample judged", func() bool { _, st := second.Settings("c1"); return st.Judged == 1 })
		if second.Wants("c1", "r4") {
			t.Error("a judge at its monthly budget (restored spend + 1 call) still wants samples")
		}
		now.Store(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).UnixNano())
		third := newJudge()
		if _, err := third.Restore(ctx); err != nil {
			t.Fatal(err)
		}
		if _, st := third.Settings("c1"); st.SpentUSD != 0 || st.Month != "2026-06" {
			t.Errorf("next month: spent %v in %s, want 0 in 2026-06", st.SpentUSD, st.Month)
		}
	})
}

// TestJudgeSettingsReachOtherReplicas: a judge following the tenant
// change feed applies settings another replica stored, and the month's
// spend that replica's calls added.
func TestJudgeSettingsReachOtherReplicas(t *testing.T) {
	pool := dbtest.Postgres(t)
	p, db := open(t, dbtest.Engine{Pool: pool})
	seedCluster(t, db, true)
	ctx, cancel := context.WithCancel(context.Background())
	clock := func() time.Time { return time.Date(2026, 5, 20, 12, 0, 0, 0, time.UTC) }
	mk := func() *quality.Judge {
		return quality.NewJudge(quality.JudgeConfig{}, quality.JudgeDeps{Caller: scoreCaller{cost: 0.1}, Learner: nopLearner{}, Store: p, Now: clock})
	}
	a, b := mk(), mk()
	live := make(chan struct{})
	var once sync.Once
	done := make(chan struct{}, 3)
	for _, j := range []*quality.Judge{a, b} {
		go func() { j.Run(ctx); done <- struct{}{} }()
	}
	go func() {
		tenantsql.NewPostgres(pool).Watch(ctx, b.Changed, func() { b.Changed(""); once.Do(func() { close(live) }) })
		done <- struct{}{}
	}()
	t.Cleanup(func() { cancel(); <-done; <-done; <-done })
	<-live

	set := quality.JudgeSettings{Enabled: true, Model: "m", SampleRate: 1, MonthlyBudgetUSD: 5}
	if err := a.Configure(ctx, "t1", "c1", set); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the settings on the other replica", func() bool { got, _ := b.Settings("c1"); return got == set })
	a.Offer(quality.Sample{TenantID: "t1", ClusterID: "c1", RequestID: "r1", Model: "m", Prompt: "p", Answer: "a"})
	testwait.Until(t, "a's call judged", func() bool { _, st := a.Settings("c1"); return st.Judged == 1 })
	set.SampleRate = 0.5 // a change of settings also brings the month's spend along
	if err := a.Configure(ctx, "t1", "c1", set); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the new rate and a's spend on the other replica", func() bool {
		got, st := b.Settings("c1")
		return got == set && st.SpentUSD == 0.1
	})
	exec(t, db, true, `DELETE FROM clusters WHERE id = 'c1'`)
	a.Changed("t1") // the cluster's deletion notifies through the tenants store in serve; here by hand
	testwait.Until(t, "the deleted cluster's judge gone on the replica that reloads", func() bool { got, _ := a.Settings("c1"); return got == (quality.JudgeSettings{}) })
}
