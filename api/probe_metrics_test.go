package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/routebalance/routebalance/routing/dispatch/dispatchtest"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/telemetry"
	"github.com/routebalance/routebalance/tenants"
)

// TestProbeDisabledModelIsCountedAsDisabled: a request for a model whose
// every instance is disabled was answered 403 model_disabled but counted
// in routebalance_route_rejections_total as reason="no_healthy_instance"
// (the alert for down engines fired for an owner's choice). Both read the
// scheduler's routing.ErrModelDisabled now: the label is model_disabled,
// over a real listener, the real scheduler and a scrape of /metrics.
func TestProbeDisabledModelIsCountedAsDisabled(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	off := inst("off", up.URL, "big")
	off.Disabled = true
	p := principal("t1", []tenants.Instance{off, inst("on", up.URL, "m")})
	keys := &keyTable{keys: map[string]*tenants.Principal{testKey: p}}
	real := startRouter(t)
	labelKey := []byte("probe-label-key-for-this-test!!!")
	tel, err := telemetry.New(telemetry.Config{LabelKey: labelKey}, telemetry.Deps{State: real.State})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := New(Config{}, Deps{Log: log, Metrics: tel.Handler(), MetricsToken: "scrape-token",
		Inference: InferenceDeps{Keys: keys, Router: &dispatchtest.Router{Inner: tel.Router(real)}, Meter: &meterLog{}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.App().Listener(ln) }()
	t.Cleanup(func() { _ = s.App().ShutdownWithTimeout(5 * time.Second) })
	e := &infEnv{url: "http://" + ln.Addr().String()}

	res, raw := e.post(t, "/v1/chat/completions", testKey, `{"model":"big","messages":[{"role":"user","content":"hi"}]}`, nil)
	if env := decodeEnvelope(t, raw); res.StatusCode != http.StatusForbidden || str(env.Error.Code) != errCodeModelDisabled {
		t.Fatalf("disabled model: %d %s, want 403 model_disabled", res.StatusCode, raw)
	}
	c := e.client()
	_, err = c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "big", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusForbidden || apiErr.Code != errCodeModelDisabled {
		t.Fatalf("SDK, disabled model: %v, want 403 model_disabled", err)
	}
	if res, raw := e.post(t, "/v1/chat/completions", testKey, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil); res.StatusCode != http.StatusOK {
		t.Fatalf("enabled model: %d %s", res.StatusCode, raw)
	}

	fams := scrape(t, e.url+"/metrics", "scrape-token")
	cl := telemetry.Label(labelKey, "cluster", p.Cluster.ID)
	m := series(fams, "routebalance_route_rejections_total", map[string]string{"cluster": cl, "reason": "model_disabled"})
	if m == nil || counter(m) != 2 {
		t.Errorf("route_rejections_total{reason=model_disabled} = %v, want 2 (the two 403s)", m)
	}
	for _, reason := range []string{"no_healthy_instance", "other", "unknown_model"} {
		if m := series(fams, "routebalance_route_rejections_total", map[string]string{"cluster": cl, "reason": reason}); m != nil && counter(m) != 0 {
			t.Errorf("route_rejections_total{reason=%s} = %v, want none: the 403s are model_disabled", reason, counter(m))
		}
	}
	if f := fams["routebalance_route_rejections_total"]; f == nil || !strings.Contains(f.GetHelp(), "model_disabled") {
		t.Errorf("route_rejections_total's help does not list model_disabled: %v", f.GetHelp())
	}
}
