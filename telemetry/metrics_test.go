package telemetry

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/sqlitestore"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/schedule"
)

// fakeScheduler grants one fixed decision or fails with err.
type fakeScheduler struct {
	d        routing.Decision
	err      error
	released []routing.Outcome
}

func (f *fakeScheduler) Route(_ context.Context, _ *routing.Cluster, _ *routing.Request) (*routing.Assignment, error) {
	if f.err != nil {
		return nil, f.err
	}
	return routing.NewAssignment(f.d, func(o routing.Outcome) { f.released = append(f.released, o) }, nil), nil
}

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// family gathers m's registry and returns one family's metrics by a
// rendering of their labels, with pseudonymous cluster, instance and model
// values mapped back to the ids they stand for.
func family(t *testing.T, m *Metrics, name string) map[string]*dto.Metric {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Metric{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		raw := m.labels.reverse()
		for _, mt := range f.GetMetric() {
			k := ""
			for _, lp := range mt.GetLabel() {
				v := lp.GetValue()
				if r, ok := raw[lp.GetName()][v]; ok {
					v = r // the tests name series by the raw ids (labels_test checks the pseudonyms)
				}
				k += lp.GetName() + "=" + v + ","
			}
			out[k] = mt
		}
	}
	return out
}

// ratio is observed/predicted of two durations in milliseconds, computed
// as the histogram does.
func ratio(observedMs, predictedMs int64) float64 {
	return float64(time.Duration(observedMs)*time.Millisecond) / float64(time.Duration(predictedMs)*time.Millisecond)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestRouterObservesDecisionsAndOutcomes(t *testing.T) {
	m, err := New(Config{ProcessMetrics: false}, Deps{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	in := routing.Instance{ID: "i1", Model: "llama"}
	f := &fakeScheduler{d: routing.Decision{Instance: in, Policy: "routebalance", BatchSize: 4, DecisionTime: 300 * time.Microsecond,
		QueueWait: 20 * time.Millisecond, PredictedE2E: 2 * time.Second, PredictedTTFT: 100 * time.Millisecond}}
	r := m.Router(f)
	c := &routing.Cluster{ID: "c1"}
	outcomes := []routing.Outcome{
		{E2E: 3 * time.Second, TTFT: 50 * time.Millisecond},            // ratios 1.5 and 0.5
		{E2E: time.Second, Truncated: true},                            // no calibration sample
		{Err: errors.New("refused"), Upstream: true},                   // instance fault
		{Err: context.Canceled},                                        // client's fault
		{E2E: 2 * time.Second, TTFT: 100 * time.Millisecond, Err: nil}, // ratios 1 and 1
		{E2E: time.Second},                                             // non-streamed: no TTFT sample
	}
	for i, o := range outcomes {
		req := &routing.Request{}
		if i == 1 {
			req.Exclude = []string{"i0"}
		}
		a, err := r.Route(context.Background(), c, req)
		if err != nil {
			t.Fatal(err)
		}
		a.Release(o)
		a.Release(routing.Outcome{Err: errors.New("second release must not count")})
	}
	if len(f.released) != len(outcomes) {
		t.Fatalf("inner released %d times, want %d", len(f.released), len(outcomes))
	}
	for _, e := range []error{routing.ErrNoCapacity, routing.ErrNoHealthyInstance, routing.ErrModelDisabled, routing.ErrUnknownModel, routing.ErrClosed,
		context.DeadlineExceeded, errors.New("boom"), routing.ErrNoCapacity} {
		f.err = e
		if _, err := r.Route(context.Background(), c, &routing.Request{}); !errors.Is(err, e) {
			t.Fatalf("error %v not passed through: %v", e, err)
		}
	}

	type hist struct {
		N   uint64
		Sum float64
	}
	hists := func(name string) map[string]hist {
		out := map[string]hist{}
		for k, mt := range family(t, m, name) {
			out[k] = hist{mt.GetHistogram().GetSampleCount(), mt.GetHistogram().GetSampleSum()}
		}
		return out
	}
	counters := func(name string) map[string]float64 {
		out := map[string]float64{}
		for k, mt := range family(t, m, name) {
			out[k] = mt.GetCounter().GetValue()
		}
		return out
	}
	for _, tc := range []struct {
		name string
		got  any
		want any
	}{
		// observed = outcome + the 20 ms queue wait the prediction includes
		{"ratio", hists("routebalance_prediction_ratio"), map[string]hist{
			"cluster=c1,model=llama,quantity=e2e,":  {3, ratio(3020, 2000) + ratio(2020, 2000) + ratio(1020, 2000)},
			"cluster=c1,model=llama,quantity=ttft,": {2, ratio(70, 100) + ratio(120, 100)},
		}},
		{"batch", hists("routebalance_decision_batch_size"), map[string]hist{"cluster=c1,policy=routebalance,": {6, 24}}},
		{"queue", hists("routebalance_queue_wait_seconds"), map[string]hist{"cluster=c1,instance=i1,": {6, 0.12}}},
		{"upstream", counters("routebalance_upstream_errors_total"), map[string]float64{"cluster=c1,instance=i1,": 1}},
		{"failovers", counters("routebalance_failovers_total"), map[string]float64{"cluster=c1,": 1}},
		{"rejections", counters("routebalance_route_rejections_total"), map[string]float64{
			"cluster=c1,reason=no_capacity,": 2, "cluster=c1,reason=no_healthy_instance,": 1, "cluster=c1,reason=model_disabled,": 1, "cluster=c1,reason=unknown_model,": 1,
			"cluster=c1,reason=closed,": 1, "cluster=c1,reason=cancelled,": 1, "cluster=c1,reason=other,": 1,
		}},
	} {
		if diff := cmp.Diff(tc.want, tc.got, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	dec := family(t, m, "routebalance_decision_duration_seconds")["cluster=c1,policy=routebalance,"]
	if dec.GetHistogram().GetSampleCount() != 6 || dec.GetHistogram().GetSampleSum() < 6*300e-6-1e-12 || dec.GetHistogram().GetSampleSum() > 6*300e-6+1e-12 {
		t.Errorf("decision histogram %v", dec)
	}
}

func TestMeterPricesAndForwards(t *testing.T) {
	m, err := New(Config{ProcessMetrics: false}, Deps{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	var got []billing.UsageEvent
	mt := m.Meter(recorderFunc(func(ev billing.UsageEvent) { got = append(got, ev) }), billing.Pricing{Markup: 1.5, PerMTokUSD: 1})
	ev := billing.UsageEvent{RequestID: "r1", TenantID: "t1", KeyID: "k1", ClusterID: "c1", InstanceID: "i1", Model: "m", Policy: "",
		PromptTokens: 1000, OutputTokens: 3000, CostUSD: 0.002, Status: "ok", HTTPStatus: 200, E2E: 2 * time.Second, TTFT: 200 * time.Millisecond}
	mt.Record(ev)
	ev.RequestID, ev.Status, ev.HTTPStatus, ev.TTFT = "r2", "error", 502, 0
	mt.Record(ev)
	if len(got) != 2 || got[0].Billed != 0 || got[0].CostUSD != 0.002 {
		t.Fatalf("forwarded %+v (the inner meter prices, not the wrapper)", got)
	}
	req := family(t, m, "routebalance_requests_total")
	if req["cluster=c1,code=200,instance=i1,model=m,policy=default,status=ok,"].GetCounter().GetValue() != 1 ||
		req["cluster=c1,code=502,instance=i1,model=m,policy=default,status=error,"].GetCounter().GetValue() != 1 || len(req) != 2 {
		t.Errorf("requests %v", req)
	}
	billed := family(t, m, "routebalance_billed_usd_total")["cluster=c1,model=m,"].GetCounter().GetValue()
	want := 2 * (0.002*1.5 + 4000*1/1e6)
	if billed < want-1e-12 || billed > want+1e-12 {
		t.Errorf("billed %v, want %v", billed, want)
	}
	if n := family(t, m, "routebalance_time_to_first_token_seconds")["cluster=c1,instance=i1,model=m,"].GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("ttft observations %d, want 1 (the failed request had none)", n)
	}
	if tok := family(t, m, "routebalance_usage_tokens_total")["cluster=c1,instance=i1,kind=output,model=m,"].GetCounter().GetValue(); tok != 6000 {
		t.Errorf("output tokens %v", tok)
	}
}

type recorderFunc func(billing.UsageEvent)

func (f recorderFunc) Record(ev billing.UsageEvent) { f(ev) }

func TestStateCollector(t *testing.T) {
	states := map[string][]schedule.InstanceState{
		"c1": {{ID: "a", Model: "m", Healthy: true, InFlight: 3, MaxConcurrency: 8, Queue: 2, PendingTokens: 900, TPOTMs: 25, ScrapeAgeMs: 1500, KVUsage: 0.4}},
	}
	m, err := New(Config{ProcessMetrics: false}, Deps{Log: quiet(), State: func(id string) []schedule.InstanceState { return states[id] }})
	if err != nil {
		t.Fatal(err)
	}
	r := m.Router(&fakeScheduler{err: routing.ErrNoCapacity})
	for _, id := range []string{"c1", "gone"} {
		_, _ = r.Route(context.Background(), &routing.Cluster{ID: id}, &routing.Request{})
	}
	got := map[string]float64{}
	for _, name := range []string{"in_flight", "queue_length", "pending_tokens", "predicted_tpot_seconds", "scrape_age_seconds",
		"healthy", "stale", "max_concurrency", "kv_cache_usage_ratio"} {
		for k, mt := range family(t, m, "routebalance_instance_"+name) {
			got[name+"{"+k+"}"] = mt.GetGauge().GetValue()
		}
	}
	l := "{cluster=c1,instance=a,model=m,}"
	want := map[string]float64{"in_flight" + l: 3, "queue_length" + l: 2, "pending_tokens" + l: 900, "predicted_tpot_seconds" + l: 0.025,
		"scrape_age_seconds" + l: 1.5, "healthy" + l: 1, "stale" + l: 0, "max_concurrency" + l: 8, "kv_cache_usage_ratio" + l: 0.4}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("instance gauges (-want +got):\n%s", diff)
	}
	if ids := m.clusterIDs(); len(ids) != 1 || ids[0] != "c1" {
		t.Errorf("tracked clusters %v: a cluster the scheduler does not know must be forgotten", ids)
	}
}

// TestBillingCollector runs a real meter over a real SQLite ledger.
func TestBillingCollector(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store := sqlitestore.New(dbtest.SQLite(t))
	cfg := billing.DefaultConfig()
	cfg.SpillDir = filepath.Join(dir, "meter")
	meter, err := billing.NewMeter(cfg, store, billing.NewGuard(nil, time.Hour), quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{ProcessMetrics: false}, Deps{Log: quiet(), MeterStats: meter.Stats, Outbox: store, Clock: fixedClock{time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"r1", "r2", "r3"} {
		meter.Record(billing.UsageEvent{RequestID: id, TenantID: "t", ClusterID: "c", InstanceID: "i", Model: "m", Status: "ok", CostUSD: 0.001})
	}
	gaugeOf := func(name string) float64 {
		mt, ok := family(t, m, name)[""]
		if !ok {
			t.Fatalf("no %s", name)
		}
		if mt.GetGauge() != nil {
			return mt.GetGauge().GetValue()
		}
		return mt.GetCounter().GetValue()
	}
	if b, r := gaugeOf("routebalance_billing_meter_backlog"), gaugeOf("routebalance_billing_meter_recorded_total"); b != 3 || r != 3 {
		t.Fatalf("before the flush: backlog %v recorded %v, want 3 and 3", b, r)
	}
	if p := gaugeOf("routebalance_billing_outbox_pending"); p != 0 {
		t.Errorf("outbox pending %v on an empty outbox", p)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- meter.Run(rctx) }()
	deadline := time.Now().Add(testwait.Bound)
	for meter.Stats().Written < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if b, w := gaugeOf("routebalance_billing_meter_backlog"), gaugeOf("routebalance_billing_meter_written_total"); b != 0 || w != 3 {
		t.Errorf("after the flush: backlog %v written %v, want 0 and 3", b, w)
	}
}
