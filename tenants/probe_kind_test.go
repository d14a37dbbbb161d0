package tenants

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/routing"
)

func TestModelKinds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		data  string
		kinds map[string]routing.Kind
		all   routing.Kind
	}{
		{"vLLM says nothing", `[{"id":"qwen","object":"model","owned_by":"vllm","root":"qwen","max_model_len":4096,"permission":[]}]`,
			map[string]routing.Kind{}, ""},
		{"Infinity's capabilities", `[{"id":"bge","object":"model","owned_by":"infinity","backend":"torch","capabilities":["embed"]},{"id":"e5","capabilities":["embed","rerank"]}]`,
			map[string]routing.Kind{"bge": routing.KindEmbedding, "e5": routing.KindEmbedding}, routing.KindEmbedding},
		{"LM Studio's type", `[{"id":"llama","type":"llm"},{"id":"nomic","type":"embeddings"}]`,
			map[string]routing.Kind{"llama": routing.KindChat, "nomic": routing.KindEmbedding}, ""},
		{"one silent", `[{"id":"a","capabilities":["embed"]},{"id":"b"}]`, map[string]routing.Kind{"a": routing.KindEmbedding}, ""},
		{"both on one model", `[{"id":"a","capabilities":["embed","chat"]}]`, map[string]routing.Kind{}, ""},
		{"odd shapes ignored", `[{"id":"a","capabilities":{"embed":true}},{"id":"","type":"llm"},3]`, map[string]routing.Kind{}, ""},
		{"empty", `[]`, map[string]routing.Kind{}, ""},
	} {
		var list []json.RawMessage
		if err := json.Unmarshal([]byte(tc.data), &list); err != nil {
			t.Fatal(err)
		}
		kinds, all := modelKinds(list)
		if d := cmp.Diff(tc.kinds, kinds); d != "" || all != tc.all {
			t.Errorf("%s: kinds (-want +got):\n%s all %q, want %q", tc.name, d, all, tc.all)
		}
	}
}
