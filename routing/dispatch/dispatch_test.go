package dispatch_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/sqlitestore"
	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/dispatch"
	"github.com/routebalance/routebalance/routing/dispatch/dispatchtest"
	"github.com/routebalance/routebalance/routing/proxy"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/routing/respcache"
	"github.com/routebalance/routebalance/routing/schedule"
	"github.com/routebalance/routebalance/tenants/limits"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startRouter runs the scheduler's Router until the test ends.
func startRouter(t *testing.T) *schedule.Router {
	t.Helper()
	r, err := schedule.NewRouter(schedule.Config{}, schedule.Deps{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

// client is a dispatch.Client that records what it is told and collects
// the body.
type client struct {
	limited    []limits.Status
	decided    []string
	failedOver []string
	begun      int
	body       bytes.Buffer
}

func (c *client) Limited(st limits.Status)      { c.limited = append(c.limited, st) }
func (c *client) Decided(a *routing.Assignment) { c.decided = append(c.decided, a.Instance.ID) }
func (c *client) FailedOver(id string)          { c.failedOver = append(c.failedOver, id) }
func (c *client) Begin(*routing.Assignment, int) proxy.Writer {
	c.begun++
	return c
}
func (c *client) Write(p []byte) (int, error) { return c.body.Write(p) }
func (c *client) Flush() error                { return nil }

type meterLog struct{ evs []billing.UsageEvent }

func (m *meterLog) Record(ev billing.UsageEvent) { m.evs = append(m.evs, ev) }

// env is a dispatcher over the real scheduler and the real proxy.
type env struct {
	d      *dispatch.Dispatcher
	router *dispatchtest.Router
	meter  *meterLog
}

type envOpts struct {
	cfg     dispatch.Config
	meter   dispatch.Meter
	spend   dispatch.SpendGuard
	limiter dispatch.Limiter
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	px, err := proxy.New(proxy.Config{}, proxy.Deps{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	e := &env{router: &dispatchtest.Router{Inner: startRouter(t)}, meter: &meterLog{}}
	deps := dispatch.Deps{Router: e.router, Upstream: px, Meter: e.meter, Spend: o.spend, Limiter: o.limiter, Log: quiet(),
		Status: func(err error) int {
			if err == nil {
				return 200
			}
			return 599 // the api's table is tested in api; here only its use
		}}
	if o.meter != nil {
		deps.Meter = o.meter
	}
	if e.d, err = dispatch.New(o.cfg, deps); err != nil {
		t.Fatal(err)
	}
	return e
}

func inst(id, url string) routing.Instance {
	return routing.Instance{ID: id, BaseURL: url, Model: "m", GPU: "A100", PriceInPerMTok: 1, PriceOutPerMTok: 2, QualityPrior: 0.5}
}

var seq int

// call builds a chat call on a cluster of instances.
func call(cl *routing.Cluster, stream bool, c dispatch.Client) dispatch.Call {
	seq++
	id := fmt.Sprint("req-", seq)
	body, err := proxy.BodyOf(map[string]json.RawMessage{
		"model": json.RawMessage(`"m"`), "stream": json.RawMessage(fmt.Sprint(stream)),
		"messages": json.RawMessage(`[{"role":"user","content":"hi"}]`),
	})
	if err != nil {
		panic(err) // a fixed literal
	}
	return dispatch.Call{
		Request: &routing.Request{ID: id, Prompt: "hi", PromptTokens: 8, Model: "m",
			Weights: routing.Weights{Quality: 0.4, Cost: 0.3, Latency: 0.3}, Arrival: time.Now()},
		Cluster: cl,
		Forward: proxy.Call{Endpoint: proxy.Chat, Stream: stream, PromptTokens: 8, RequestID: id, Body: body},
		Spend:   billing.Limits{TenantID: "t1", KeyID: "k1"},
		Client:  c,
	}
}

func cluster(policy string, ins ...routing.Instance) *routing.Cluster {
	return &routing.Cluster{ID: "cl-" + ins[0].ID, TenantID: "t1", Version: 1, Policy: routing.PolicyConfig{Name: policy}, Instances: ins}
}

// TestFailOverOnRefusedConnection: round-robin over [dead, live] sends
// one of the first two calls (or both) to the dead instance first; such a
// call fails over to the live one with the dead one excluded, and both
// are served.
func TestFailOverOnRefusedConnection(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 2})
	dead := vllmtest.RefusedURL(t)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			e := newEnv(t, envOpts{})
			cl := cluster("round-robin", inst("dead", dead), inst("live", up.URL))
			failovers := 0
			for i := 0; i < 2; i++ {
				c := &client{}
				res, err := e.d.Dispatch(context.Background(), call(cl, stream, c))
				if err != nil || res.Decision.Instance.ID != "live" || res.Relay.Status != proxy.ResultOK || !strings.Contains(c.body.String(), "w1") {
					t.Fatalf("call %d: err %v result %+v body %s", i, err, res, c.body.String())
				}
				if len(c.failedOver) > 0 {
					failovers++
					ex := e.router.LastRequest().Exclude
					if diff := cmp.Diff([]string{"dead"}, c.failedOver); diff != "" || res.Attempts != 2 {
						t.Errorf("failed over (-want +got):\n%s attempts %d", diff, res.Attempts)
					}
					if diff := cmp.Diff([]string{"dead"}, ex); diff != "" {
						t.Errorf("retry excluded (-want +got):\n%s", diff)
					}
					if diff := cmp.Diff([]string{"dead", "live"}, c.decided); diff != "" {
						t.Errorf("decided (-want +got):\n%s", diff)
					}
				}
				if c.begun != 1 {
					t.Errorf("Begin called %d times", c.begun)
				}
			}
			if failovers == 0 {
				t.Error("no call failed over")
			}
			g, r, outs := e.router.Counts()
			if g != 2+failovers || r != g {
				t.Fatalf("granted %d released %d, want %d each", g, r, 2+failovers)
			}
			unreachable := 0
			for _, o := range outs {
				if errors.Is(o.Err, proxy.ErrUnreachable) && o.Upstream {
					unreachable++
				} else if o.Err != nil {
					t.Errorf("outcome %+v", o)
				}
			}
			if unreachable != failovers {
				t.Errorf("%d unreachable outcomes, want %d", unreachable, failovers)
			}
			if n := len(e.meter.evs); n != 2 || e.meter.evs[0].InstanceID != "live" || e.meter.evs[1].InstanceID != "live" {
				t.Errorf("usage events %+v, want one per call, on live", e.meter.evs)
			}
		})
	}
}

// TestFailOverIsBounded: over instances that all refuse, a call is
// routed to at most MaxAttempts of them (default 2: one fail-over), each
// excluded from the next attempt, and ends unreachable, metered once on
// the last; with only one instance the fail-over finds nothing to route
// to and nothing reached an instance.
func TestFailOverIsBounded(t *testing.T) {
	refused := []routing.Instance{inst("a", vllmtest.RefusedURL(t)), inst("b", vllmtest.RefusedURL(t)), inst("c", vllmtest.RefusedURL(t))}
	for _, tc := range []struct {
		name        string
		maxAttempts int
		instances   []routing.Instance
		want        int // routed and released
		routes      int // Route calls (the last finds no instance left)
		wantEvents  int
	}{
		{"default", 0, refused, 2, 2, 1},
		{"no fail-over", 1, refused, 1, 1, 1},
		{"three attempts", 3, refused, 3, 3, 1},
		{"more attempts than instances", 5, refused, 3, 4, 0},
		{"only instance", 0, refused[:1], 1, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{cfg: dispatch.Config{MaxAttempts: tc.maxAttempts}})
			c := &client{}
			res, err := e.d.Dispatch(context.Background(), call(cluster("", tc.instances...), false, c))
			var de *dispatch.Error
			if !errors.As(err, &de) || de.Step != dispatch.StepOpen || !errors.Is(err, proxy.ErrUnreachable) {
				t.Fatalf("err %v, want an unreachable open error", err)
			}
			if g, r, _ := e.router.Counts(); g != tc.want || r != tc.want || res.Attempts != tc.want || len(c.decided) != tc.want {
				t.Errorf("granted %d released %d attempts %d decided %v, want %d", g, r, res.Attempts, c.decided, tc.want)
			}
			reqs := e.router.Requests()
			for i, r := range reqs {
				if len(r.Exclude) != i {
					t.Errorf("Route call %d excluded %v, want the %d instances tried", i, r.Exclude, i)
				}
			}
			if len(reqs) != tc.routes {
				t.Errorf("%d Route calls, want %d", len(reqs), tc.routes)
			}
			if len(e.meter.evs) != tc.wantEvents || (tc.wantEvents == 1 && (e.meter.evs[0].Status != "error" || e.meter.evs[0].HTTPStatus != 599)) {
				t.Errorf("usage events %+v, want %d with status error and the Status mapping's code", e.meter.evs, tc.wantEvents)
			}
			if c.begun != 0 {
				t.Error("Begin called for a call that reached no instance")
			}
		})
	}
}

// TestBudgetStopsStream: the request's budget (the smaller of BudgetUSD
// and SLO.MaxCostUSD) is forwarded to the proxy, which cuts the stream
// once the spend reaches it; the event says "budget" with the tokens sent.
func TestBudgetStopsStream(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 100})
	in := inst("i1", up.URL)
	in.PriceInPerMTok, in.PriceOutPerMTok = 0, 1000 // $0.001 per output token
	for _, tc := range []struct {
		name        string
		budget, slo float64
	}{
		{"request budget", 0.004, 0},
		{"SLO cap below the budget", 0.01, 0.004},
		{"budget below the SLO cap", 0.004, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			c := &client{}
			cl := call(cluster("", in), true, c)
			cl.Request.BudgetUSD, cl.Request.SLO.MaxCostUSD = tc.budget, tc.slo
			res, err := e.d.Dispatch(context.Background(), cl)
			if err != nil || res.Relay.Status != proxy.ResultBudget {
				t.Fatalf("err %v status %q", err, res.Relay.Status)
			}
			tokens, finishes := 0, []string{}
			sc := bufio.NewScanner(strings.NewReader(c.body.String()))
			for sc.Scan() {
				line := strings.TrimPrefix(sc.Text(), "data: ")
				if line == "" || line == "[DONE]" {
					continue
				}
				var ch struct {
					Choices []struct {
						Delta        struct{ Content string } `json:"delta"`
						FinishReason *string                  `json:"finish_reason"`
					} `json:"choices"`
				}
				if err := json.Unmarshal([]byte(line), &ch); err != nil {
					t.Fatalf("chunk %q: %v", line, err)
				}
				for _, ch := range ch.Choices {
					if ch.Delta.Content != "" {
						tokens++
					}
					if ch.FinishReason != nil {
						finishes = append(finishes, *ch.FinishReason)
					}
				}
			}
			if tokens != 4 || !cmp.Equal([]string{"length"}, finishes) || !strings.HasSuffix(c.body.String(), "data: [DONE]\n\n") {
				t.Errorf("tokens %d finishes %v", tokens, finishes)
			}
			if len(e.meter.evs) != 1 || e.meter.evs[0].Status != "budget" || e.meter.evs[0].OutputTokens != 4 || e.meter.evs[0].HTTPStatus != 200 {
				t.Errorf("usage events %+v", e.meter.evs)
			}
		})
	}
}

// TestAdmission: a spend refusal and a rate-limit refusal end the call
// before the router; the limiter's status reaches the client either way
// and an admitted call's concurrency slot is freed when it ends.
func TestAdmission(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	cl := cluster("", inst("i1", up.URL))

	guard := billing.NewGuard(nil, time.Hour)
	guard.SetStanding(billing.Account{TenantID: "late", SubscriptionStatus: "unpaid", PastDueSince: time.Now().Add(-2 * time.Hour)})
	lim, err := limits.New(limits.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{spend: guard, limiter: lim})

	late := call(cl, false, &client{})
	late.Spend.TenantID = "late"
	_, err = e.d.Dispatch(context.Background(), late)
	var de *dispatch.Error
	if !errors.As(err, &de) || de.Step != dispatch.StepSpend || !errors.Is(err, billing.ErrPaymentRequired) {
		t.Errorf("suspended tenant: err %v, want a spend refusal", err)
	}

	for i, want := range []dispatch.Step{"", "", dispatch.StepLimit} { // the key may have one in flight at a time, 2 a minute
		c := &client{}
		k := call(cl, false, c)
		k.KeyLimits = limits.Limits{RPM: 2, MaxConcurrency: 1}
		_, err := e.d.Dispatch(context.Background(), k)
		var de *dispatch.Error
		switch {
		case want == "" && err != nil:
			t.Errorf("call %d: %v", i, err)
		case want != "" && (!errors.As(err, &de) || de.Step != want || de.Refusal == nil || de.Refusal.Kind != limits.KindRequests):
			t.Errorf("call %d: err %v, want a requests refusal", i, err)
		}
		if len(c.limited) != 1 || !c.limited[0].HasRequests || c.limited[0].LimitRequests != 2 {
			t.Errorf("call %d: limiter status %+v", i, c.limited)
		}
	}
	if g, _, _ := e.router.Counts(); g != 2 {
		t.Errorf("%d calls routed, want the 2 admitted", g)
	}
}

// TestPanicWhileRelaying: a panic while a stream is relayed (here in a
// Progress hook) ends the relay as an error; the assignment is released
// once and the tokens sent before it are metered.
func TestPanicWhileRelaying(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 5})
	e := newEnv(t, envOpts{})
	e.router.OnToken = func(n int) {
		if n == 2 {
			panic("estimator bug")
		}
	}
	c := &client{}
	res, err := e.d.Dispatch(context.Background(), call(cluster("", inst("i1", up.URL)), true, c))
	if err != nil || res.Relay.Status != proxy.ResultError || !strings.Contains(c.body.String(), "w1") || strings.Contains(c.body.String(), "w3") {
		t.Errorf("err %v status %q body %s", err, res.Relay.Status, c.body.String())
	}
	g, r, outs := e.router.Counts()
	if g != 1 || r != 1 || outs[0].Err == nil || !strings.Contains(outs[0].Err.Error(), "panic") {
		t.Errorf("granted %d released %d outcomes %+v", g, r, outs)
	}
	if len(e.meter.evs) != 1 || e.meter.evs[0].Status != "error" || e.meter.evs[0].OutputTokens != 2 {
		t.Errorf("usage events %+v, want one error with the 2 tokens sent", e.meter.evs)
	}
}

// TestMeteredInSQLite runs calls that end every way through the real meter
// over a real SQLite ledger and reads back one row per call.
func TestMeteredInSQLite(t *testing.T) {
	db := dbtest.SQLite(t)
	cfg := billing.DefaultConfig()
	cfg.SpillDir = t.TempDir()
	m, err := billing.NewMeter(cfg, sqlitestore.New(db), billing.NewGuard(nil, time.Hour), quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- m.Run(ctx) }()

	e := newEnv(t, envOpts{meter: m})
	ok := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 3})
	failing := vllmtest.New(t, vllmtest.Config{Model: "m", Status: 500})
	dying := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 6, DieAfter: 2})
	type row struct {
		Instance, Status string
		HTTP, Output     int
	}
	var want []row
	for _, tc := range []struct {
		url    string
		stream bool
		want   row
	}{
		{ok.URL, false, row{"ok", "ok", 200, 3}},
		{ok.URL, true, row{"ok", "ok", 200, 3}},
		{failing.URL, false, row{"failing", "error", 599, 0}},
		{dying.URL, true, row{"dying", "error", 200, 2}},
	} {
		_, _ = e.d.Dispatch(context.Background(), call(cluster("", inst(tc.want.Instance, tc.url)), tc.stream, &client{}))
		want = append(want, tc.want)
	}
	cancel()
	if err := <-stopped; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	rows, err := db.Query(`SELECT instance_id, status, http_status, output_tokens FROM billing_usage ORDER BY started_ms, request_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.Instance, &r.Status, &r.HTTP, &r.Output); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ledger rows (-want +got):\n%s", diff)
	}
}

// TestFallbackAcrossModels: an instance answering 5xx or 429 before its
// first byte is fallen back from like an unreachable one. A request for
// "auto" whose first model fails falls back to another model (every
// instance of the failed model excluded); a pinned model is retried on
// another replica of the same model; a 4xx other than 429 is not retried.
// One usage event per call, on the instance that served it, and every
// failed attempt is released as the instance's fault (toward ejection).
func TestFallbackAcrossModels(t *testing.T) {
	down := vllmtest.New(t, vllmtest.Config{Model: "gemma", Status: 503})
	busy := vllmtest.New(t, vllmtest.Config{Model: "gemma", Status: 429})
	gemmaOK := vllmtest.New(t, vllmtest.Config{Model: "gemma", Tokens: 2})
	llama := vllmtest.New(t, vllmtest.Config{Model: "llama", Tokens: 2})
	bad := vllmtest.New(t, vllmtest.Config{Model: "gemma", Status: 400})
	mk := func(id, model, url string, prior float64) routing.Instance {
		return routing.Instance{ID: id, BaseURL: url, Model: model, GPU: "A100", PriceInPerMTok: 1, PriceOutPerMTok: 2, QualityPrior: prior}
	}
	for _, tc := range []struct {
		name          string
		model         string
		instances     []routing.Instance
		wantServed    string   // "" = the call fails with the 400
		wantEx        []string // excluded on every fallback
		everyFallsOff bool     // every call's first choice fails
	}{
		{"auto falls back to another model", "auto",
			[]routing.Instance{mk("g1", "gemma", down.URL, 0.9), mk("g2", "gemma", busy.URL, 0.9), mk("l1", "llama", llama.URL, 0.2)},
			"l1", []string{"g1", "g2"}, true},
		{"pinned model retries a replica", "gemma",
			[]routing.Instance{mk("g1", "gemma", down.URL, 0.9), mk("g3", "gemma", gemmaOK.URL, 0.9), mk("l1", "llama", llama.URL, 0.2)},
			"g3", []string{"g1"}, false},
		{"auto with one model retries a replica", "auto",
			[]routing.Instance{mk("g2", "gemma", busy.URL, 0.9), mk("g3", "gemma", gemmaOK.URL, 0.9)},
			"g3", []string{"g2"}, false},
		{"a 400 is the client's: no retry", "gemma",
			[]routing.Instance{mk("g4", "gemma", bad.URL, 0.9)},
			"", nil, false},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.name, stream), func(t *testing.T) {
				e := newEnv(t, envOpts{})
				policy := "quality-only"
				if !tc.everyFallsOff {
					policy = "round-robin" // spreads the calls over both replicas
				}
				cl := &routing.Cluster{ID: "cl", TenantID: "t1", Version: 1, Policy: routing.PolicyConfig{Name: policy}, Instances: tc.instances}
				fallbacks := 0
				const calls = 4
				for i := 0; i < calls; i++ {
					c := &client{}
					cc := call(cl, stream, c)
					cc.Request.Model = tc.model
					res, err := e.d.Dispatch(context.Background(), cc)
					if tc.wantServed == "" {
						var se *proxy.StatusError
						if !errors.As(err, &se) || se.Status != 400 || res.Attempts != 1 || len(c.failedOver) != 0 {
							t.Fatalf("err %v attempts %d failed over %v, want one 400 attempt", err, res.Attempts, c.failedOver)
						}
						continue
					}
					if err != nil || res.Decision.Instance.ID != tc.wantServed || res.Relay.Status != proxy.ResultOK {
						t.Fatalf("call %d: err %v served %+v attempts %d", i, err, res.Decision, res.Attempts)
					}
					if len(c.failedOver) != res.Attempts-1 {
						t.Errorf("failed over %v for %d attempts", c.failedOver, res.Attempts)
					}
					if res.Attempts == 1 {
						continue
					}
					fallbacks++
					ex := e.router.LastRequest().Exclude
					if diff := cmp.Diff(tc.wantEx, ex, cmpSorted); diff != "" {
						t.Errorf("call %d: the fallback excluded (-want +got):\n%s", i, diff)
					}
				}
				if tc.everyFallsOff && fallbacks != calls {
					t.Errorf("%d of %d calls fell back, want all (their first model always fails)", fallbacks, calls)
				}
				if tc.wantServed != "" && fallbacks == 0 {
					t.Error("no call fell back")
				}
				if len(e.meter.evs) != calls {
					t.Fatalf("%d usage events for %d calls", len(e.meter.evs), calls)
				}
				for _, ev := range e.meter.evs {
					want := "ok"
					if tc.wantServed == "" {
						want = "error"
					}
					if ev.Status != want || (tc.wantServed != "" && ev.InstanceID != tc.wantServed) {
						t.Errorf("usage event %+v, want status %s on %q", ev, want, tc.wantServed)
					}
				}
				g, r, outs := e.router.Counts()
				if g != r || g != calls+fallbacks {
					t.Errorf("granted %d released %d, want %d", g, r, calls+fallbacks)
				}
				faults := 0
				for _, o := range outs {
					if o.Err != nil && o.Upstream {
						faults++
					}
				}
				if want := fallbacks; tc.wantServed == "" {
					if faults != 0 {
						t.Errorf("a 400 was released as the instance's fault %d times", faults)
					}
				} else if faults != want {
					t.Errorf("%d instance-fault outcomes, want %d", faults, want)
				}
			})
		}
	}
}

// cmpSorted compares string slices as sets.
var cmpSorted = cmp.Transformer("sorted", func(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return out
})

// newCache is an in-process response cache for the tests.
func newCache(t *testing.T) *respcache.LRU {
	t.Helper()
	c, err := respcache.NewLRU(respcache.Config{TTL: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestResponseCache: a call with a cache key goes upstream once ("miss")
// and is stored; the same key is then answered from the cache ("hit"):
// the same body, Begin with no assignment, no Route call, metered as
// "cached" with no instance and no cost. A failed answer is not stored,
// and a call without a key never touches the cache.
func TestResponseCache(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 3})
	failing := vllmtest.New(t, vllmtest.Config{Model: "m", Status: 500})
	cache := newCache(t)
	e := newEnv(t, envOpts{})
	d, err := dispatch.New(dispatch.Config{}, dispatch.Deps{Router: e.router, Upstream: mustProxy(t), Meter: e.meter, Cache: cache, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	cl := cluster("", inst("i1", up.URL))
	run := func(cl *routing.Cluster, key string) (*client, dispatch.Result, error) {
		c := &client{}
		cc := call(cl, false, c)
		cc.CacheKey = key
		res, err := d.Dispatch(context.Background(), cc)
		return c, res, err
	}
	c1, r1, err := run(cl, "k1")
	if err != nil || r1.Cache != "miss" || c1.begun != 1 {
		t.Fatalf("first call: %v cache %q begun %d", err, r1.Cache, c1.begun)
	}
	c2, r2, err := run(cl, "k1")
	if err != nil || r2.Cache != "hit" || r2.CachedModel != "m" || r2.Decision != nil || r2.UpstreamStatus != 200 {
		t.Fatalf("second call: %v %+v", err, r2)
	}
	if c2.body.String() != c1.body.String() || len(c2.decided) != 0 {
		t.Errorf("cached body %q (decided %v), want %q with no decision", c2.body.String(), c2.decided, c1.body.String())
	}
	if g, _, _ := e.router.Counts(); g != 1 {
		t.Errorf("%d instances granted for two calls of one key, want 1", g)
	}
	if len(e.meter.evs) != 2 {
		t.Fatalf("usage events %+v", e.meter.evs)
	}
	hit := e.meter.evs[1]
	if hit.Status != "cached" || hit.InstanceID != "" || hit.CostUSD != 0 || hit.Model != "m" || hit.OutputTokens != e.meter.evs[0].OutputTokens {
		t.Errorf("cached event %+v, want status cached, no instance, no cost, the first answer's tokens", hit)
	}
	// Another key goes upstream; no key at all never asks the cache.
	if _, r, _ := run(cl, "k2"); r.Cache != "miss" {
		t.Errorf("new key: cache %q", r.Cache)
	}
	if _, r, _ := run(cl, ""); r.Cache != "" {
		t.Errorf("no key: cache %q, want untouched", r.Cache)
	}
	// A failed answer is not stored: the next call of its key goes upstream again.
	bad := cluster("", inst("bad", failing.URL))
	if _, r, err := run(bad, "k3"); err == nil || r.Cache != "miss" {
		t.Fatalf("failing upstream: %v %q", err, r.Cache)
	}
	if _, ok, _ := cache.Get(context.Background(), "k3"); ok {
		t.Error("a failed answer was cached")
	}
}

func mustProxy(t *testing.T) *proxy.Proxy {
	t.Helper()
	px, err := proxy.New(proxy.Config{}, proxy.Deps{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	return px
}
