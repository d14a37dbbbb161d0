package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/routebalance/routebalance/routing"
)

// lateBindCluster is two replicas a and b of model m with one slot each,
// and a third instance of another model (or the same model at another
// price) that the tests may list as c.
func lateBindCluster(extra ...routing.Instance) *routing.Cluster {
	ins := []routing.Instance{
		{ID: "a", Model: "m", GPU: "g", MaxConcurrency: 1, PriceInPerMTok: 1, PriceOutPerMTok: 2},
		{ID: "b", Model: "m", GPU: "g", MaxConcurrency: 1, PriceInPerMTok: 1, PriceOutPerMTok: 2},
	}
	return &routing.Cluster{ID: "c", Version: 1, Policy: routing.PolicyConfig{Name: PolicyShortestQueue}, Instances: append(ins, extra...)}
}

// notified counts Notify calls per ticket.
type notified map[*Ticket]int

func (n notified) submit(core *Core, now time.Time, r *routing.Request) *Ticket {
	tk := &Ticket{Req: r, Notify: func(tk *Ticket) { n[tk]++ }}
	core.Assign(context.Background(), now, []*Ticket{tk})
	return tk
}

// holders fills a and b and queues one more request; it returns the
// holder of each replica and the queued ticket.
func holders(t *testing.T, core *Core, n notified, queued *routing.Request) (onA, onB, q *Ticket) {
	t.Helper()
	x := n.submit(core, t0, &routing.Request{ID: "x", Model: "m"})
	y := n.submit(core, t0, &routing.Request{ID: "y", Model: "m"})
	if x.state != ticketAdmitted || y.state != ticketAdmitted || x.Decision.Instance.ID == y.Decision.Instance.ID {
		t.Fatalf("holders: %v on %s, %v on %s; want both admitted on different replicas", x.state, x.Decision.Instance.ID, y.state, y.Decision.Instance.ID)
	}
	onA, onB = x, y
	if x.Decision.Instance.ID == "b" {
		onA, onB = y, x
	}
	q = n.submit(core, t0, queued)
	if q.state != ticketQueued {
		t.Fatalf("third request: state %v, want queued", q.state)
	}
	return onA, onB, q
}

// TestLateBindingMovesAQueuedTicket: a request queued on a full replica is
// admitted on the other replica as soon as that one frees a slot with an
// empty queue — with late binding; with early binding it waits for its own.
func TestLateBindingMovesAQueuedTicket(t *testing.T) {
	for _, binding := range []string{BindingLate, BindingEarly} {
		t.Run(binding, func(t *testing.T) {
			core := newCore(t, Config{Binding: binding}, Deps{}, lateBindCluster())
			n := notified{}
			onA, onB, q := holders(t, core, n, &routing.Request{ID: "q", Model: "m", PromptTokens: 40})
			home, other := onA, onB // release the holder of the replica q is not queued on
			if q.member == onB.member {
				home, other = onB, onA
			}
			from := q.Decision.Instance.ID
			now := t0.Add(time.Second)
			core.Release(now, other, routing.Outcome{OutputTokens: 5})
			if binding == BindingEarly {
				if q.state != ticketQueued || n[q] != 0 {
					t.Fatalf("early binding: state %v, notified %d; want still queued", q.state, n[q])
				}
				core.Release(now, home, routing.Outcome{OutputTokens: 5})
				if q.state != ticketAdmitted || q.Decision.Instance.ID != from {
					t.Fatalf("early binding: state %v on %s, want admitted on %s", q.state, q.Decision.Instance.ID, from)
				}
			} else {
				to := other.Decision.Instance.ID
				if q.state != ticketAdmitted || q.Decision.Instance.ID != to || q.member != other.member {
					t.Fatalf("late binding: state %v on %s, want admitted on %s (queued on %s)", q.state, q.Decision.Instance.ID, to, from)
				}
				if q.Decision.QueueWait != time.Second {
					t.Errorf("queue wait %v, want 1s", q.Decision.QueueWait)
				}
				if q.spec.Load.Running != 1 || q.spec.Load.PromptTokens != 40 {
					t.Errorf("lease load %+v, want running 1 (alone on %s) with 40 prompt tokens", q.spec.Load, to)
				}
				if q.Decision.PredictedTTFT <= 0 || q.Decision.PredictedE2E < q.Decision.PredictedTTFT {
					t.Errorf("predictions TTFT %v E2E %v not recomputed", q.Decision.PredictedTTFT, q.Decision.PredictedE2E)
				}
				core.Release(now, home, routing.Outcome{OutputTokens: 5})
			}
			if n[q] != 1 {
				t.Errorf("queued ticket notified %d times, want 1", n[q])
			}
			// Nothing lost or counted twice: after the last release every
			// counter is back to zero.
			core.Release(now, q, routing.Outcome{OutputTokens: 5})
			for _, s := range core.State(now) {
				if s.InFlight != 0 || s.Queue != 0 {
					t.Errorf("%s: in-flight %d queue %d after all releases, want 0 0", s.ID, s.InFlight, s.Queue)
				}
			}
		})
	}
}

// TestLateBindingLeavesAlone: requests that must not move stay where they
// were queued when another instance frees a slot.
func TestLateBindingLeavesAlone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster *routing.Cluster
		queued  routing.Request
		// free names the instance whose slot frees: "other" (the replica q
		// is not queued on) or an instance ID.
		free    string
		disable bool // disable the freeing instance first
	}{
		{name: "workflow stage keeps its sticky instance", cluster: lateBindCluster(), queued: routing.Request{ID: "q", Model: "m", Workflow: "wf"}, free: "other"},
		{name: "freed instance is disabled", cluster: lateBindCluster(), queued: routing.Request{ID: "q", Model: "m"}, free: "other", disable: true},
		{name: "other model", cluster: lateBindCluster(routing.Instance{ID: "c", Model: "n", GPU: "g", MaxConcurrency: 1, PriceInPerMTok: 1, PriceOutPerMTok: 2}), queued: routing.Request{ID: "q", Model: "m"}, free: "c"},
		{name: "same model at another price", cluster: lateBindCluster(routing.Instance{ID: "c", Model: "m", GPU: "g", MaxConcurrency: 1, PriceInPerMTok: 1, PriceOutPerMTok: 3}), queued: routing.Request{ID: "q", Model: "m"}, free: "c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core := newCore(t, Config{Binding: BindingLate}, Deps{}, tc.cluster)
			n := notified{}
			var cHolder *Ticket
			if len(tc.cluster.Instances) > 2 {
				// Fill c first (shortest-queue would otherwise queue on it).
				cHolder = n.submit(core, t0, &routing.Request{ID: "c0", Exclude: []string{"a", "b"}})
				if cHolder.state != ticketAdmitted || cHolder.Decision.Instance.ID != "c" {
					t.Fatalf("c holder: %v on %s", cHolder.state, cHolder.Decision.Instance.ID)
				}
				tc.queued.Exclude = []string{"c"} // keep q on the m replicas
			}
			onA, onB, q := holders(t, core, n, &tc.queued)
			free := cHolder
			if tc.free == "other" {
				free = onB
				if q.member == onB.member {
					free = onA
				}
			}
			if tc.disable {
				next := *tc.cluster
				next.Version = 2
				next.Instances = append([]routing.Instance(nil), tc.cluster.Instances...)
				for i := range next.Instances {
					if next.Instances[i].ID == free.Decision.Instance.ID {
						next.Instances[i].Disabled = true
					}
				}
				if _, err := core.Update(&next); err != nil {
					t.Fatal(err)
				}
			}
			from := q.Decision.Instance.ID
			core.Release(t0.Add(time.Second), free, routing.Outcome{OutputTokens: 5})
			if q.state != ticketQueued || n[q] != 0 || q.Decision.Instance.ID != from {
				t.Fatalf("state %v on %s (notified %d), want still queued on %s", q.state, q.Decision.Instance.ID, n[q], from)
			}
		})
	}
}

// TestLateBindingRespectsExclude: a request that excludes the freed
// replica stays queued on its own (the freed one stays idle) and is
// admitted there, once, when its slot frees.
func TestLateBindingRespectsExclude(t *testing.T) {
	core := newCore(t, Config{Binding: BindingLate}, Deps{}, lateBindCluster())
	n := notified{}
	onA, onB, q := holders(t, core, n, &routing.Request{ID: "q", Model: "m", Exclude: []string{"b"}})
	if q.Decision.Instance.ID != "a" {
		t.Fatalf("q queued on %s, want a", q.Decision.Instance.ID)
	}
	core.Release(t0.Add(time.Second), onB, routing.Outcome{OutputTokens: 5})
	if q.state != ticketQueued {
		t.Errorf("q (excludes b): state %v on %s, want queued on a", q.state, q.Decision.Instance.ID)
	}
	if got := core.Fleet().InFlight(onB.member); got != 0 {
		t.Errorf("b has %d in flight, want 0", got)
	}
	core.Release(t0.Add(2*time.Second), onA, routing.Outcome{OutputTokens: 5})
	if q.state != ticketAdmitted || q.Decision.Instance.ID != "a" || n[q] != 1 {
		t.Errorf("q: state %v on %s, notified %d; want admitted on a, one Notify", q.state, q.Decision.Instance.ID, n[q])
	}
}

// TestLateBindingAfterCancel: a waiter that gave up is never taken by a
// freed slot, and the next waiter is.
func TestLateBindingAfterCancel(t *testing.T) {
	core := newCore(t, Config{Binding: BindingLate}, Deps{}, lateBindCluster())
	n := notified{}
	onA, onB, q := holders(t, core, n, &routing.Request{ID: "q", Model: "m"})
	if core.Cancel(t0, q, context.Canceled) {
		t.Fatal("Cancel of a queued ticket reported it admitted")
	}
	free := onB
	if q.member == onB.member {
		free = onA
	}
	core.Release(t0.Add(time.Second), free, routing.Outcome{OutputTokens: 5})
	if q.state != ticketCancelled || n[q] != 0 {
		t.Fatalf("cancelled ticket: state %v, notified %d; want cancelled, never notified", q.state, n[q])
	}
	for _, s := range core.State(t0) {
		if s.Queue != 0 {
			t.Errorf("%s: queue %d, want 0", s.ID, s.Queue)
		}
	}
}

// TestLateBindingTakesTheBestWaiter: of the requests queued on the other
// replicas, the freed one takes the first in admission order (here the
// shortest predicted output), not the first that arrived.
func TestLateBindingTakesTheBestWaiter(t *testing.T) {
	c := lateBindCluster(routing.Instance{ID: "c", Model: "m", GPU: "g", MaxConcurrency: 1, PriceInPerMTok: 1, PriceOutPerMTok: 2})
	est := &tableEstimator{length: map[string]map[string]float64{"long": {"m": 900}, "short": {"m": 20}}}
	core := newCore(t, Config{Binding: BindingLate}, Deps{Estimator: est}, c)
	n := notified{}
	var hold []*Ticket
	for _, id := range []string{"x", "y", "z"} {
		hold = append(hold, n.submit(core, t0, &routing.Request{ID: id, Model: "m", Prompt: "short"}))
	}
	long := n.submit(core, t0, &routing.Request{ID: "long", Model: "m", Prompt: "long"})
	short := n.submit(core, t0, &routing.Request{ID: "short", Model: "m", Prompt: "short"})
	if long.state != ticketQueued || short.state != ticketQueued || long.member == short.member {
		t.Fatalf("long %v on %s, short %v on %s: want both queued on different replicas", long.state, long.Decision.Instance.ID, short.state, short.Decision.Instance.ID)
	}
	var free *Ticket
	for _, h := range hold {
		if h.member != long.member && h.member != short.member {
			free = h
		}
	}
	core.Release(t0.Add(time.Second), free, routing.Outcome{OutputTokens: 5})
	if short.state != ticketAdmitted || short.member != free.member {
		t.Errorf("short: state %v on %s, want admitted on %s", short.state, short.Decision.Instance.ID, free.Decision.Instance.ID)
	}
	if long.state != ticketQueued {
		t.Errorf("long: state %v, want still queued", long.state)
	}
	if short.spec.Tokens != 20 {
		t.Errorf("moved ticket carries L̂ %v, want its own 20", short.spec.Tokens)
	}
	if est.calls != 5 {
		t.Errorf("estimator called %d times, want 5 (once per batch; the move asks nothing)", est.calls)
	}
}
