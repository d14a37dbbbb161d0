package dispatch_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/dispatch"
	"github.com/routebalance/routebalance/routing/proxy"
	"github.com/routebalance/routebalance/tenants/limits"
)

// tokenizer is a vLLM-like /tokenize on loopback: it answers status with
// a body naming itself and the body it got, and counts its calls.
func tokenizer(t *testing.T, name string, status int, calls *int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*calls++
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/tokenize" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"by":"`+name+`","got":`+string(b)+`}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestPassTakesInstancesInTurn: /tokenize goes to an enabled instance of
// the named model only, the instances in turn; one that cannot be reached
// or answers 503 is passed over for the next (FailedOver, attempts 2); a
// 4xx is the answer; nothing is routed or metered; the rate limits count
// each pass as one request.
func TestPassTakesInstancesInTurn(t *testing.T) {
	lim, err := limits.New(limits.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{limiter: lim})
	var aCalls, bCalls, otherCalls, sickCalls int
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	disabled := inst("off", tokenizer(t, "off", 200, new(int)))
	disabled.Disabled = true
	cl := &routing.Cluster{ID: "c", TenantID: "t", Instances: []routing.Instance{
		inst("a", tokenizer(t, "a", 200, &aCalls)),
		inst("dead", deadURL),
		inst("b", tokenizer(t, "b", 200, &bCalls)),
		inst("sick", tokenizer(t, "sick", 503, &sickCalls)),
		disabled,
		{ID: "o", BaseURL: tokenizer(t, "o", 200, &otherCalls), Model: "other"},
	}}
	body, err := proxy.NewBody([]byte(`{"model":"m","prompt":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	pass := func(c *client, kl limits.Limits) (dispatch.PassResult, error) {
		return e.d.Pass(context.Background(), dispatch.PassCall{Cluster: cl, Model: "m", TenantID: "t", KeyID: "k", KeyLimits: kl,
			Forward: proxy.Call{Endpoint: proxy.Tokenize, Body: body, MaxTokens: 50, Stream: true}, Client: c})
	}
	served := map[string]int{}
	for i := 0; i < 8; i++ {
		c := &client{}
		res, err := pass(c, limits.Limits{})
		if err != nil {
			t.Fatalf("pass %d: %v", i, err)
		}
		served[res.Instance.ID]++
		if res.Status != 200 || c.begun != 1 || len(c.limited) != 1 {
			t.Errorf("pass %d: status %d, begun %d, limited %d", i, res.Status, c.begun, len(c.limited))
		}
		if want := `{"by":"` + res.Instance.ID + `","got":{"model":"m","prompt":"hello"}}`; c.body.String() != want {
			t.Errorf("pass %d: body %s, want %s (model kept, no clamp, no stream options)", i, c.body.String(), want)
		}
		if res.Attempts != len(c.failedOver)+1 || (res.Attempts == 2) != (len(c.failedOver) == 1) {
			t.Errorf("pass %d: attempts %d, failed over %v", i, res.Attempts, c.failedOver)
		}
	}
	if served["a"] != 4 || served["b"] != 4 || otherCalls != 0 {
		t.Errorf("served %v, other model %d calls; want a and b in turn, 4 each", served, otherCalls)
	}
	if g, _, _ := e.router.Counts(); g != 0 || len(e.meter.evs) != 0 {
		t.Errorf("%d routed, %d metered; want none", g, len(e.meter.evs))
	}

	// A 4xx is the answer, not a reason to go on.
	bad := &routing.Cluster{ID: "c2", Instances: []routing.Instance{inst("x", tokenizer(t, "x", 400, new(int))), inst("y", tokenizer(t, "y", 200, new(int)))}}
	for i := 0; i < 2; i++ {
		c := &client{}
		res, err := e.d.Pass(context.Background(), dispatch.PassCall{Cluster: bad, Model: "m", Forward: proxy.Call{Endpoint: proxy.Tokenize, Body: body}, Client: c})
		var de *dispatch.Error
		var se *proxy.StatusError
		if res.Instance.ID == "x" || (err != nil && (!errors.As(err, &de) || de.Step != dispatch.StepOpen || !errors.As(err, &se) || se.Status != 400)) {
			t.Errorf("4xx: %+v %v", res, err)
		}
		if err != nil && len(c.failedOver) != 0 {
			t.Errorf("4xx failed over to %v", c.failedOver)
		}
	}

	// No enabled instance of the model: routing's unknown model.
	_, err = e.d.Pass(context.Background(), dispatch.PassCall{Cluster: cl, Model: "nope", Forward: proxy.Call{Endpoint: proxy.Tokenize, Body: body}, Client: &client{}})
	var de *dispatch.Error
	if !errors.As(err, &de) || de.Step != dispatch.StepRoute || !errors.Is(err, routing.ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}
	// Rate limited like any call: one request each.
	for i, wantErr := range []bool{false, false, true} {
		_, err := pass(&client{}, limits.Limits{RPM: 2})
		if gotErr := errors.As(err, &de) && de.Step == dispatch.StepLimit && de.Refusal != nil; gotErr != wantErr || (!wantErr && err != nil) {
			t.Errorf("limited pass %d: %v", i, err)
		}
	}
}
