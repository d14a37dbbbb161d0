package schedule

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/routebalance/routebalance/routing"
)

// TestKindFilter: chat requests never reach an embedding instance (even
// when it is the least loaded), embedding requests only embedding ones,
// under every policy; a model of the other kind is an unknown model.
func TestKindFilter(t *testing.T) {
	for _, policy := range []string{PolicyShortestQueue, PolicyRoundRobin, ""} {
		t.Run(policy, func(t *testing.T) {
			r, _ := startRouter(t, Config{}, Deps{})
			c := testCluster(policy, 1) // i0: chat model "m"
			c.Instances = append(c.Instances,
				routing.Instance{ID: "e0", Model: "emb", GPU: "a10", Kind: routing.KindEmbedding},
				routing.Instance{ID: "e1", Model: "emb", GPU: "a10", Kind: routing.KindEmbedding})
			var held []*routing.Assignment
			for k := range 4 { // i0 gets busier with each chat request held
				a := route(t, r, c, &routing.Request{ID: fmt.Sprint("c", k), Model: "auto"})
				if a.Instance.ID != "i0" {
					t.Errorf("chat %d routed to %s, want i0", k, a.Instance.ID)
				}
				held = append(held, a)
			}
			used := map[string]bool{}
			for k := range 4 {
				a := route(t, r, c, &routing.Request{ID: fmt.Sprint("e", k), Model: []string{"auto", "emb"}[k%2], Kind: routing.KindEmbedding})
				if a.Instance.Kind != routing.KindEmbedding {
					t.Errorf("embedding %d routed to %s", k, a.Instance.ID)
				}
				used[a.Instance.ID] = true
				held = append(held, a)
			}
			if !used["e0"] || !used["e1"] {
				t.Errorf("embeddings used %v, want both embedding instances", used)
			}
			for _, a := range held {
				a.Release(routing.Outcome{})
			}
			ctx := context.Background()
			if _, err := r.Route(ctx, c, &routing.Request{ID: "x", Model: "emb"}); !errors.Is(err, routing.ErrUnknownModel) {
				t.Errorf("chat on an embedding model: err = %v, want ErrUnknownModel", err)
			}
			if _, err := r.Route(ctx, c, &routing.Request{ID: "y", Model: "m", Kind: routing.KindEmbedding}); !errors.Is(err, routing.ErrUnknownModel) {
				t.Errorf("embedding on a chat model: err = %v, want ErrUnknownModel", err)
			}
		})
	}
}
