package sim

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
)

// recRouter admits every job on instance 0 and records what it was given.
type recRouter struct {
	assigned, progressed, released []int
	scrapes                        int
}

func (r *recRouter) BatchLimit(time.Time) int { return 1 }
func (r *recRouter) Assign(_ context.Context, _ time.Time, batch []*Job, done []*Job) []*Job {
	for _, j := range batch {
		r.assigned = append(r.assigned, j.Index)
		j.Instance = 0
		done = append(done, j)
	}
	return done
}
func (r *recRouter) Progress(_ time.Time, j *Job, _ int) {
	r.progressed = append(r.progressed, j.Index)
}
func (r *recRouter) Release(_ time.Time, j *Job, _ routing.Outcome, done []*Job) []*Job {
	r.released = append(r.released, j.Index)
	return done
}
func (r *recRouter) Scrape(time.Time, int, engine.State) { r.scrapes++ }

func TestReplicaRouterDealsRoundRobinAndKeepsOwners(t *testing.T) {
	var reps []*recRouter
	rr, err := NewReplicaRouter(3, func() (Router, error) {
		r := &recRouter{}
		reps = append(reps, r)
		return r, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	now := epoch()
	jobs := make([]*Job, 7)
	for i := range jobs {
		jobs[i] = &Job{Index: i}
	}
	if got := rr.Assign(context.Background(), now, jobs, nil); len(got) != 7 {
		t.Fatalf("%d jobs decided, want 7", len(got))
	}
	for _, i := range []int{6, 1, 4} {
		rr.Progress(now, jobs[i], 3)
		rr.Release(now, jobs[i], routing.Outcome{}, nil)
	}
	rr.Scrape(now, 0, engine.State{})
	want := [][3][]int{
		{{0, 3, 6}, {6}, {6}},
		{{1, 4}, {1, 4}, {1, 4}},
		{{2, 5}, nil, nil},
	}
	for k, r := range reps {
		if diff := cmp.Diff(want[k], [3][]int{r.assigned, r.progressed, r.released}); diff != "" {
			t.Errorf("replica %d assigned/progressed/released (-want +got):\n%s", k, diff)
		}
		if r.scrapes != 1 {
			t.Errorf("replica %d got %d scrapes, want every scrape", k, r.scrapes)
		}
	}
	if _, err := NewReplicaRouter(0, nil); err == nil {
		t.Error("0 replicas accepted")
	}
}
