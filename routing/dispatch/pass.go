package dispatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/proxy"
	"github.com/routebalance/routebalance/tenants/limits"
)

// PassCall is one request handed to an instance of a named model without
// routing it: vLLM's /tokenize and /detokenize. Nothing is estimated,
// scheduled or metered; the rate limits count it as one request (no
// tokens) and hold its concurrency slot while it runs.
type PassCall struct {
	// Cluster is the tenant's cluster; Model the served model name whose
	// enabled instances may answer.
	Cluster *routing.Cluster
	Model   string
	// Forward is what the instance is sent (Endpoint, Body, RequestID);
	// never streamed, no clamp.
	Forward proxy.Call
	// TenantID and KeyID name who is rate-limited, with their limits.
	TenantID, KeyID         string
	TenantLimits, KeyLimits limits.Limits
	// Client receives Limited, FailedOver and Begin (with a nil
	// assignment: no instance was granted by a router); required.
	Client Client
}

// PassResult is how a pass ended.
type PassResult struct {
	// Instance is the instance that answered (zero when none did).
	Instance routing.Instance
	// Status is its 2xx status (0 when none answered).
	Status int
	// Attempts counts the instances tried.
	Attempts int
}

// Pass sends call to one enabled instance of call.Model, taking them in
// turn (a rotating start, so load spreads), and relays its whole answer to
// the Client. An instance that cannot be reached, or answers 5xx or 429,
// is passed over for the next, up to Config.MaxAttempts instances. Errors
// are *Error: StepLimit (rate limited), StepRoute with
// routing.ErrUnknownModel (no enabled instance serves the model), StepOpen
// (the last instance's failure: *proxy.StatusError, proxy.ErrUnreachable
// or ctx's error), StepRelay (the answer broke).
func (d *Dispatcher) Pass(ctx context.Context, call PassCall) (PassResult, error) {
	var res PassResult
	if l := d.deps.Limiter; l != nil {
		t, st, r, ok := l.Admit(call.TenantID, call.TenantLimits, call.KeyID, call.KeyLimits, 0)
		call.Client.Limited(st)
		if !ok {
			return res, &Error{Step: StepLimit, Err: errRateLimited, Refusal: &r}
		}
		defer t.Release()
	}
	var cands []*routing.Instance
	for i := range call.Cluster.Instances {
		if in := &call.Cluster.Instances[i]; !in.Disabled && in.Model == call.Model {
			cands = append(cands, in)
		}
	}
	if len(cands) == 0 {
		return res, &Error{Step: StepRoute, Err: fmt.Errorf("%w: %q", routing.ErrUnknownModel, call.Model)}
	}
	start := int(d.turn.Add(1) % uint64(len(cands)))
	fw := call.Forward
	fw.Stream, fw.MaxTokens, fw.BudgetUSD = false, 0, 0
	attempts := min(len(cands), d.cfg.MaxAttempts)
	var last *Error
	for k := 0; k < attempts; k++ {
		in := cands[(start+k)%len(cands)]
		res.Attempts = k + 1
		resp, err := d.deps.Upstream.Open(ctx, in, &fw)
		if err != nil {
			last = &Error{Step: StepOpen, Instance: in.ID, Err: err}
			var se *proxy.StatusError
			if k+1 < attempts && (errors.Is(err, proxy.ErrUnreachable) || (errors.As(err, &se) && se.InstanceFault())) && ctx.Err() == nil {
				call.Client.FailedOver(in.ID)
				continue
			}
			return res, last
		}
		res.Instance, res.Status = *in, resp.Status
		rel := resp.Relay(ctx, call.Client.Begin(nil, resp.Status), nil)
		if rel.Status != proxy.ResultOK {
			cause := rel.Outcome.Err
			if ctx.Err() != nil {
				cause = ctx.Err()
			}
			return res, &Error{Step: StepRelay, Instance: in.ID, Err: cause}
		}
		return res, nil
	}
	return res, last
}
