package schedule

import (
	"context"
	"errors"
	"testing"

	"github.com/routebalance/routebalance/routing"
)

// TestModelDisabledIsItsOwnError: a request whose every matching instance
// (of its model, or of its kind for auto) is disabled by the cluster's
// owner fails with routing.ErrModelDisabled, which still is an
// ErrNoHealthyInstance for callers that ask only that; one enabled
// instance, even excluded, makes it a plain ErrNoHealthyInstance. The api
// answers the first 403 and telemetry counts it as model_disabled.
func TestModelDisabledIsItsOwnError(t *testing.T) {
	r, _ := startRouter(t, Config{}, Deps{})
	c := testCluster(PolicyShortestQueue, 4)
	c.Instances[0].Disabled, c.Instances[1].Disabled = true, true // both of model m
	c.Instances[2].Model, c.Instances[2].Kind = "e", routing.KindEmbedding
	c.Instances[3].Model = "other"
	ctx := context.Background()
	isDisabled := func(err error) bool {
		return errors.Is(err, routing.ErrModelDisabled) && errors.Is(err, routing.ErrNoHealthyInstance)
	}
	if _, err := r.Route(ctx, c, &routing.Request{ID: "m", Model: "m"}); !isDisabled(err) {
		t.Errorf("every instance of m disabled: err = %v, want ErrModelDisabled (wrapping ErrNoHealthyInstance)", err)
	}
	if _, err := r.Route(ctx, c, &routing.Request{ID: "x", Model: "other", Exclude: []string{"i3"}}); !errors.Is(err, routing.ErrNoHealthyInstance) || errors.Is(err, routing.ErrModelDisabled) {
		t.Errorf("the enabled instance excluded: err = %v, want ErrNoHealthyInstance, not ErrModelDisabled", err)
	}
	a := route(t, r, c, &routing.Request{ID: "auto", Model: "auto"})
	if a.Instance.ID != "i3" {
		t.Errorf("auto routed to %s, want i3 (the one enabled chat instance)", a.Instance.ID)
	}
	a.Release(routing.Outcome{})

	// Every chat instance disabled: auto is refused as disabled although
	// an embedding instance is enabled (the scheduler never crosses kinds),
	// and an embedding request still routes.
	c2 := *c
	c2.Version++
	c2.Instances = append([]routing.Instance(nil), c.Instances...)
	c2.Instances[3].Disabled = true
	if _, err := r.Route(ctx, &c2, &routing.Request{ID: "auto2", Model: "auto"}); !isDisabled(err) {
		t.Errorf("auto with every chat instance disabled: err = %v, want ErrModelDisabled", err)
	}
	a = route(t, r, &c2, &routing.Request{ID: "emb", Model: "auto", Kind: routing.KindEmbedding})
	if a.Instance.ID != "i2" {
		t.Errorf("embedding routed to %s, want i2", a.Instance.ID)
	}
	a.Release(routing.Outcome{})
}
