package estimate

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/qdrant/go-client/qdrant"
	"github.com/routebalance/routebalance/internal/qdranttest"
	"github.com/routebalance/routebalance/routing"
)

func TestQdrantAdapterMapping(t *testing.T) {
	fake := qdranttest.Start(t)
	url := fake.URL()
	ctx := context.Background()
	recs := testRecords()
	k := buildTest(t, Config{Estimator: "knn"}, BuildOptions{})
	q, err := DialQdrant(ctx, QdrantConfig{URL: url, Collection: "test-index", BatchSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var progress []int
	if err := q.Load(ctx, k.Vectors(), k.Dim(), recs, func(d int) { progress = append(progress, d) }); err != nil {
		t.Fatal(err)
	}
	// Loading again replaces the collection instead of failing.
	if err := q.Load(ctx, k.Vectors(), k.Dim(), recs, nil); err != nil {
		t.Fatal(err)
	}
	fake.Mu.Lock()
	coll := fake.Colls["test-index"]
	gotPayload := coll.Pts[0].GetPayload()
	nPts, dist, upserts := len(coll.Pts), coll.Dist, fake.Upserts
	fake.Mu.Unlock()
	if nPts != len(recs) || dist != qdrant.Distance_Cosine || upserts != 2*5 {
		t.Errorf("collection: %d points, distance %v, %d upserts; want %d, Cosine, 10", nPts, dist, upserts, len(recs))
	}
	if diff := cmp.Diff([]int{16, 32, 48, 64, 80}, progress); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if got := gotPayload["id"].GetStringValue(); got != recs[0].ID {
		t.Errorf("payload id = %q, want %q", got, recs[0].ID)
	}
	if got := gotPayload["quality"].GetStructValue().GetFields()["solver"].GetDoubleValue(); got != 1 {
		t.Errorf("payload quality.solver = %v, want 1", got)
	}
	if got := gotPayload["output_tokens"].GetStructValue().GetFields()["chatter"].GetDoubleValue(); got != 180 {
		t.Errorf("payload output_tokens.chatter = %v, want 180", got)
	}

	// A KNN searching Qdrant agrees with the exact local search, and a
	// batch is one QueryBatch call.
	dir := t.TempDir()
	if err := k.Save(dir, &QdrantSpec{URL: url, Collection: "test-index"}); err != nil {
		t.Fatal(err)
	}
	kq, err := Open(dir, Config{Estimator: "knn", Qdrant: &QdrantConfig{URL: url, Collection: "test-index"}})
	if err != nil {
		t.Fatal(err)
	}
	prompts := []string{"Compute the sum of 5 and 6", "Which capital city hosted festival 3?", "unrelated words"}
	models := []string{"solver", "chatter"}
	a, b := make([]routing.PromptEstimate, 3), make([]routing.PromptEstimate, 3)
	if err := k.Estimate(ctx, prompts, models, nil, a); err != nil {
		t.Fatal(err)
	}
	fake.Mu.Lock()
	before := fake.QueryBatches
	fake.Mu.Unlock()
	if err := kq.Estimate(ctx, prompts, models, nil, b); err != nil {
		t.Fatal(err)
	}
	fake.Mu.Lock()
	calls := fake.QueryBatches - before
	fake.Mu.Unlock()
	if calls != 1 {
		t.Errorf("QueryBatch calls for one Estimate = %d, want 1", calls)
	}
	approx := cmp.Comparer(func(x, y float64) bool { return math.Abs(x-y) < 1e-4 })
	if diff := cmp.Diff(a, b, approx); diff != "" {
		t.Errorf("Qdrant-backed estimates differ from exact (-exact +qdrant):\n%s", diff)
	}
}

func TestQdrantDownIsAnError(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	q, err := DialQdrant(context.Background(), QdrantConfig{URL: "http://" + addr, Collection: "x", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	q.Attach(3, 4)
	if err := q.Search(context.Background(), make([]float32, 4), 2, make([]Neighbor, 2)); err == nil {
		t.Error("Search against a closed port: got nil error")
	}
	if err := (QdrantConfig{URL: "ftp://x", Collection: "c"}).Validate(); err == nil {
		t.Error("Validate(ftp URL) = nil, want an error")
	}
}

// TestQdrantRealServer runs the adapter against a real Qdrant when
// QDRANT_URL (gRPC, e.g. http://127.0.0.1:6334) is set.
func TestQdrantRealServer(t *testing.T) {
	url := os.Getenv("QDRANT_URL")
	if url == "" {
		t.Skip("QDRANT_URL not set: no Qdrant server on this machine; set QDRANT_URL=http://host:6334 to run against a real one")
	}
	ctx := context.Background()
	k := buildTest(t, Config{}, BuildOptions{})
	coll := fmt.Sprintf("routebalance-test-%d", time.Now().UnixNano())
	q, err := DialQdrant(ctx, QdrantConfig{URL: url, Collection: coll})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = q.client.DeleteCollection(ctx, coll)
		q.Close()
	}()
	if err := q.Load(ctx, k.Vectors(), k.Dim(), testRecords(), nil); err != nil {
		t.Fatal(err)
	}
	query := k.Vectors()[:k.Dim()]
	out := make([]Neighbor, 3)
	if err := q.Search(ctx, query, 3, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Row != 0 || math.Abs(float64(out[0].Sim)-1) > 1e-4 {
		t.Errorf("nearest to row 0 = %+v, want row 0 with similarity 1", out[0])
	}
}

// FuzzPointRow: a hit's row is read from Qdrant's answer; whatever the
// payload, it is a row in [0, n) or an error, never a panic.
func FuzzPointRow(f *testing.F) {
	f.Add(uint8(0), int64(3), "", 10)
	f.Add(uint8(1), int64(-1), "x", 10)
	f.Add(uint8(2), int64(0), "7", 1)
	f.Add(uint8(3), int64(1<<40), "", 5)
	f.Fuzz(func(t *testing.T, kind uint8, iv int64, sv string, n int) {
		pl := map[string]*qdrant.Value{}
		switch kind % 5 {
		case 0:
			pl["row"] = qdrant.NewValueInt(iv)
		case 1:
			pl["row"] = qdrant.NewValueString(sv)
		case 2:
			pl["row"] = qdrant.NewValueDouble(float64(iv))
		case 3:
			pl["other"] = qdrant.NewValueInt(iv)
		case 4:
			pl["row"] = qdrant.NewValueNull()
		}
		row, err := PointRow(pl, n)
		if err == nil && (row < 0 || int(row) >= n || kind%5 != 0 || int64(row) != iv) {
			t.Fatalf("PointRow(%v, %d) = %d, nil", pl, n, row)
		}
	})
}
