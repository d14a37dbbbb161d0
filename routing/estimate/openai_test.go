package estimate

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/routebalance/routebalance/routing"
)

// embeddingServer is a loopback /v1/embeddings server that embeds with a
// Builtin embedder (scaled by 3, so the client's normalisation shows) and
// answers in reverse index order.
func embeddingServer(t *testing.T, calls *atomic.Int32, fail *atomic.Bool) *httptest.Server {
	t.Helper()
	cfg := DefaultBuiltinConfig()
	cfg.Dim = 32
	b, err := NewBuiltin(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" {
			http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
			return
		}
		calls.Add(1)
		if fail.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":{"message":"model loading","type":"server_error"}}`))
			return
		}
		var req struct {
			Input []string `json:"input"`
			Model string   `json:"model"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model == "" {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		vecs := make([]float32, len(req.Input)*32)
		_ = b.Embed(r.Context(), req.Input, vecs)
		type item struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		}
		resp := struct {
			Object string `json:"object"`
			Data   []item `json:"data"`
			Model  string `json:"model"`
		}{Object: "list", Model: req.Model}
		for i := len(req.Input) - 1; i >= 0; i-- {
			e := make([]float64, 32)
			for j := range e {
				e[j] = 3 * float64(vecs[i*32+j])
			}
			resp.Data = append(resp.Data, item{Object: "embedding", Index: i, Embedding: e})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(resp)
	}))
}

func TestOpenAIEmbedderBatchesAndNormalises(t *testing.T) {
	var calls atomic.Int32
	var fail atomic.Bool
	srv := embeddingServer(t, &calls, &fail)
	defer srv.Close()
	ctx := context.Background()
	o, err := NewOpenAI(OpenAIConfig{URL: srv.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := o.Probe(ctx); err != nil || d != 32 {
		t.Fatalf("Probe = %d, %v; want 32", d, err)
	}
	texts := []string{"one prompt", "another prompt about math", "", "fourth", "fifth and last"}
	got := make([]float32, len(texts)*32)
	before := calls.Load()
	if err := o.Embed(ctx, texts, got); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load() - before; n != 1 {
		t.Errorf("HTTP calls for one batch = %d, want 1", n)
	}
	cfg := DefaultBuiltinConfig()
	cfg.Dim = 32
	b, _ := NewBuiltin(cfg)
	want := make([]float32, len(texts)*32)
	in := append([]string(nil), texts...)
	in[2] = " "
	_ = b.Embed(ctx, in, want)
	if diff := cmp.Diff(want, got, cmp.Comparer(func(x, y float32) bool { return math.Abs(float64(x-y)) < 1e-6 })); diff != "" {
		t.Errorf("vectors (-want +got):\n%s", diff)
	}

	fail.Store(true)
	if err := o.Embed(ctx, texts, got); !errors.Is(err, ErrEmbedderUnavailable) {
		t.Errorf("Embed against a 503 = %v, want ErrEmbedderUnavailable", err)
	}
}

func TestOpenAIEmbedderDown(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + lis.Addr().String()
	lis.Close()
	o, err := NewOpenAI(OpenAIConfig{URL: url, Dim: 8, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = o.Embed(context.Background(), []string{"x"}, make([]float32, 8))
	if !errors.Is(err, ErrEmbedderUnavailable) {
		t.Fatalf("Embed against a closed port = %v, want ErrEmbedderUnavailable", err)
	}
	if _, err := NewOpenAI(OpenAIConfig{URL: "localhost:80"}); err == nil {
		t.Error("NewOpenAI without a scheme: got nil error")
	}
}

func TestIndexWithOpenAIEmbedderRoundTrip(t *testing.T) {
	var calls atomic.Int32
	var fail atomic.Bool
	srv := embeddingServer(t, &calls, &fail)
	defer srv.Close()
	ctx := context.Background()
	o, _ := NewOpenAI(OpenAIConfig{URL: srv.URL + "/v1", Model: "all-MiniLM-L6-v2"})
	if _, err := o.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	k := buildTest(t, Config{Shrink: -1}, BuildOptions{Embedder: o, BatchSize: 32})
	dir := t.TempDir()
	if err := k.Save(dir, nil); err != nil {
		t.Fatal(err)
	}
	k2, err := Open(dir, Config{Shrink: -1})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]routing.PromptEstimate, 1)
	before := calls.Load()
	if err := k2.Estimate(ctx, []string{"Compute the sum of 1000 and 17, then multiply the result by 3. Show your arithmetic."}, []string{"solver", "chatter"}, nil, out); err != nil {
		t.Fatal(err)
	}
	if calls.Load()-before != 1 {
		t.Errorf("embedder calls per Estimate = %d, want 1", calls.Load()-before)
	}
	if out[0].Quality[0] < 0.9 || out[0].Quality[1] > 0.1 {
		t.Errorf("math prompt via the openai embedder: solver %.3f chatter %.3f, want ~1 and ~0", out[0].Quality[0], out[0].Quality[1])
	}
	fail.Store(true)
	if err := k2.Estimate(ctx, []string{"x"}, []string{"solver"}, nil, out); !errors.Is(err, ErrEmbedderUnavailable) {
		t.Errorf("Estimate with the embedder down = %v, want ErrEmbedderUnavailable", err)
	}
}
