package engine

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParseCluster: a cluster file either fails to parse or is a valid
// cluster that survives being written back out and parsed again.
func FuzzParseCluster(f *testing.F) {
	if b, err := os.ReadFile("reference-13.json"); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		`{"name":"c","tiers":[{"model":"m","gpu":"a100-80g","tensor_parallel":1,"instances":1,"tpot_ms_light":10,"tpot_load_factor":2,"max_num_seqs":8}]}`,
		`{"name":"c","tiers":[]}`, `{"name":"c","tiers":[{"instances":-1}]}`, `{"name":"c","tiers":[{"instances":1e9}]}`,
		`{"name":"c","tiers":[{"model":"m","instances":1,"tpot_ms_light":1e308,"tpot_load_factor":1e308}]}`,
		`{"unknown":1}`, `{"name":"c"} trailing`, `null`, `[]`, ``, `{"name":"c","tiers":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCluster(b)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseCluster accepted a cluster that does not validate: %v", err)
		}
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("marshal a parsed cluster: %v", err)
		}
		again, err := ParseCluster(out)
		if err != nil {
			t.Fatalf("a parsed cluster written back does not parse: %v\n%s", err, out)
		}
		if diff := cmp.Diff(c, again); diff != "" {
			t.Fatalf("round trip changed the cluster (-first +again):\n%s", diff)
		}
	})
}
