package api

import (
	"encoding/json"
	"testing"

	"github.com/routebalance/routebalance/migrations/dbtest"
)

func TestCatalog(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.Engine) {
		e := newEnv(t, db, true, nil)
		_, tok := signupTok(e, "cat@example.com")
		get := func() catalogAnswer {
			t.Helper()
			r := e.do("GET", "/api/v1/catalog", tok, nil)
			if r.status != 200 {
				t.Fatalf("catalog: %d %s", r.status, r.raw)
			}
			var a catalogAnswer
			if err := json.Unmarshal([]byte(r.raw), &a); err != nil {
				t.Fatal(err)
			}
			return a
		}
		a := get()
		gpus := map[string]bool{}
		for _, g := range a.GPUs {
			gpus[g.ID] = true
		}
		for _, want := range []string{"a100-80g", "v100-32g", "a30-24g", "h100-80g"} {
			if !gpus[want] {
				t.Errorf("gpu %s missing", want)
			}
		}
		if len(a.Models) != 4 || a.Models[0].Source != "reference" || a.Models[0].PriceInPerMTok != 0.9 {
			t.Errorf("reference suggestions: %+v", a.Models)
		}
		cid := mkCluster(t, e, tok, "prod")
		r := e.do("POST", "/api/v1/clusters/"+cid+"/instances", tok, map[string]any{
			"base_url": "http://127.0.0.1:9", "model": "gemma-2-9b-it", "gpu": "a30-24g", "price_in_per_mtok": 0.3, "price_out_per_mtok": 0.4,
		})
		if r.status != 201 {
			t.Fatalf("instance: %d %s", r.status, r.raw)
		}
		a = get()
		if len(a.Models) != 4 || a.Models[0] != (catalogModel{Model: "gemma-2-9b-it", GPU: "a30-24g", TensorParallel: 1, PriceInPerMTok: 0.3, PriceOutPerMTok: 0.4, Source: "yours"}) {
			t.Errorf("own instance first, replacing the reference tier: %+v", a.Models)
		}
		if r := e.do("GET", "/api/v1/catalog", "", nil); r.status != 401 {
			t.Errorf("no session: %d", r.status)
		}
	})
}
