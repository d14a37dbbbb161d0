package quality

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/routebalance/routebalance/internal/qdranttest"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/estimate"
)

// fastRedial makes the gRPC client reconnect within ~100 ms of the server
// coming back (its default backoff reaches seconds).
var fastRedial = grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 10 * time.Second, // the machine may be loaded
	Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.5, MaxDelay: 100 * time.Millisecond}})

// testClock is a settable clock for the breaker.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *testClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *testClock) add(d time.Duration) { c.ns.Add(int64(d)) }

// logRecorder keeps the messages logged through it.
type logRecorder struct {
	mu   *sync.Mutex
	msgs *[]string
}

func newLogRecorder() logRecorder { return logRecorder{mu: &sync.Mutex{}, msgs: new([]string)} }

func (l logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l logRecorder) WithGroup(string) slog.Handler            { return l }
func (l logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	*l.msgs = append(*l.msgs, r.Message)
	l.mu.Unlock()
	return nil
}

// count is how many messages contain sub.
func (l logRecorder) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range *l.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

// uniqueWorld is world with every prompt distinct (below HeadRecords, so
// the cluster index is a KNN that searches its neighbours).
func uniqueWorld(n, salt int) []estimate.Record {
	out := make([]estimate.Record, n)
	for i := range out {
		r := estimate.Record{ID: fmt.Sprintf("u%d-%d", salt, i)}
		if i%2 == 0 {
			r.Prompt = fmt.Sprintf("solve the equation %d x + %d = %d and show the algebra", i+salt, 3*i+1, 7*i+salt)
			r.Scores = map[string]float64{"big": 1, "small": float64(i % 3 / 2)}
		} else {
			r.Prompt = fmt.Sprintf("write a short poem number %d about the %s river in autumn", i+salt, []string{"quiet", "red", "old", "small", "wide"}[i%5])
			r.Scores = map[string]float64{"big": float64(i % 4 / 3), "small": 1}
		}
		out[i] = r
	}
	return out
}

var qdrantProbes = []string{
	"solve the equation 7 x + 3 = 59 and show the algebra",
	"write a short poem about the old river in autumn",
	"solve 12 x = 4",
	"an unrelated question about trains",
}

// estimateAll estimates the probes through e; it fails the test on an
// error (no request may fail because Qdrant does).
func estimateAll(t *testing.T, e interface {
	Estimate(context.Context, []string, []string, []float64, []routing.PromptEstimate) error
}) []routing.PromptEstimate {
	t.Helper()
	out := make([]routing.PromptEstimate, len(qdrantProbes))
	if err := e.Estimate(context.Background(), qdrantProbes, []string{"big", "small"}, []float64{0.5, 0.5}, out); err != nil {
		t.Fatalf("estimate: %v", err)
	}
	for i := range out {
		out[i].Memo = 0 // a per-index handle, not part of the estimate
	}
	return out
}

var approxEq = cmp.Comparer(func(x, y float64) bool { return math.Abs(x-y) < 1e-4 })

func openTestQdrant(t *testing.T, url string, clock *testClock, log *slog.Logger) *QdrantStore {
	t.Helper()
	qs, err := OpenQdrant(context.Background(), QdrantConfig{
		Client:       estimate.QdrantConfig{URL: url, Timeout: 30 * time.Second, GRPCOptions: []grpc.DialOption{fastRedial}},
		QueryTimeout: 20 * time.Second, // generous: the machine is loaded; the timeout's own path is the error path
		Breaker:      BreakerConfig{Failures: 2, Cooldown: time.Minute},
	}, clock.now, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qs.Close() })
	return qs
}

func upload(t *testing.T, s *Store, tenant, cluster string, recs []estimate.Record) {
	t.Helper()
	p, err := s.Upload(context.Background(), tenant, cluster, []string{"big", "small"}, strings.NewReader(jsonl(recs)))
	if err != nil || p.ErrorCount != 0 {
		t.Fatalf("upload: %v, %d bad lines", err, p.ErrorCount)
	}
}

// TestQdrantServesClusterIndex: an upload's rows land in the shared
// collection with tenant/cluster/upload payloads; the cluster's estimates
// are searched in Qdrant (one QueryBatch per batch) and equal the
// in-process ones; another cluster's points never answer for it; Qdrant
// stopped, the breaker opens and the in-process index answers (same
// estimates, no error); Qdrant back, the half-open probe closes it. A
// re-upload replaces the points, a delete removes them.
func TestQdrantServesClusterIndex(t *testing.T) {
	fake := qdranttest.Start(t)
	clock := newTestClock()
	logs := newLogRecorder()
	qs := openTestQdrant(t, fake.URL(), clock, slog.New(logs))
	s := startStore(t, Config{}, Deps{Qdrant: qs})
	ref := startStore(t, Config{}, Deps{}) // the same uploads, in process only
	recs := uniqueWorld(150, 0)
	upload(t, s, "t1", "c1", recs)
	upload(t, ref, "t1", "c1", recs)
	upload(t, s, "t2", "c2", uniqueWorld(120, 1000)) // another tenant's cluster in the same collection
	st := waitReady(t, s, "c1")
	waitReady(t, ref, "c1")
	if st.Estimator != "knn" || st.Indexed != 150 || st.Qdrant != "stored" {
		t.Fatalf("status = %+v, want a knn index of 150 rows stored in Qdrant", st)
	}
	// Each build ends with a history snapshot (searches of its own): wait
	// for both so the counters below move for this test's estimates only.
	testwait.Until(t, "c1 and c2 stored and snapshotted", func() bool {
		return s.Status("c2").Qdrant == "stored" && len(s.Status("c1").History) > 0 && len(s.Status("c2").History) > 0
	})

	pts := fake.Points(DefaultQdrantCollection)
	perCluster := map[string]int{}
	for _, p := range pts {
		pl := p.GetPayload()
		perCluster[pl[fieldTenant].GetStringValue()+"/"+pl[fieldCluster].GetStringValue()]++
		if pl[fieldUpload].GetStringValue() == "" || pl["row"] == nil || pl["quality"] == nil {
			t.Fatalf("point payload %v lacks upload, row or quality", pl)
		}
	}
	if diff := cmp.Diff(map[string]int{"t1/c1": 150, "t2/c2": 120}, perCluster); diff != "" {
		t.Errorf("points per tenant/cluster (-want +got):\n%s", diff)
	}
	fake.Mu.Lock()
	indexed := fake.Colls[DefaultQdrantCollection].Indexed
	fake.Mu.Unlock()
	if diff := cmp.Diff(map[string]bool{fieldTenant: true, fieldCluster: false, fieldUpload: false}, indexed); diff != "" {
		t.Errorf("payload indexes, true = tenant field (-want +got):\n%s", diff)
	}

	want := estimateAll(t, ref.ForCluster("c1"))
	queries := func() int { fake.Mu.Lock(); defer fake.Mu.Unlock(); return fake.QueryBatches }
	before := queries()
	got := estimateAll(t, s.ForCluster("c1"))
	if n := queries() - before; n != 1 {
		t.Errorf("QueryBatch calls for one Estimate = %d, want 1", n)
	}
	if diff := cmp.Diff(want, got, approxEq); diff != "" {
		t.Errorf("estimates served from Qdrant differ from the in-process ones (-in-process +qdrant):\n%s", diff)
	}
	if qs.Stats().Searches < 1 || got[0].Source[0] != routing.SourceCluster {
		t.Errorf("stats %+v, source %v: want Qdrant searches and cluster estimates", qs.Stats(), got[0].Source)
	}

	// Qdrant stops: every estimate still succeeds, from the local index.
	fake.Stop()
	pre := qs.Stats()
	for i := 0; i < 4; i++ {
		if diff := cmp.Diff(want, estimateAll(t, s.ForCluster("c1")), approxEq); diff != "" {
			t.Fatalf("estimate %d with Qdrant down differs (-want +got):\n%s", i, diff)
		}
	}
	stats := qs.Stats()
	if stats.State != BreakerOpen || stats.Opens != 1 || stats.FallbackError-pre.FallbackError != 2 || stats.FallbackOpen-pre.FallbackOpen != 2 {
		t.Errorf("after 4 estimates with Qdrant down: %+v; want open once, 2 errors (the threshold) then 2 refused", stats)
	}
	if n := logs.count("circuit breaker open"); n != 1 {
		t.Errorf("breaker-open log lines = %d, want 1 (on the change, not per request)", n)
	}

	// Back: after the cool-down a probe goes through and closes it.
	fake.Restart()
	testwait.Until(t, "the breaker closes once Qdrant is back", func() bool {
		clock.add(time.Minute)
		if diff := cmp.Diff(want, estimateAll(t, s.ForCluster("c1")), approxEq); diff != "" {
			t.Fatalf("estimate while Qdrant comes back differs (-want +got):\n%s", diff)
		}
		return qs.Stats().State == BreakerClosed
	})
	if logs.count("circuit breaker closed") != 1 {
		t.Errorf("log lines for the breaker closing = %d, want 1", logs.count("circuit breaker closed"))
	}
	before = queries()
	estimateAll(t, s.ForCluster("c1"))
	if queries() == before {
		t.Error("after the breaker closed, the estimate did not search Qdrant")
	}

	// A re-upload replaces the cluster's points; a delete removes them.
	upload(t, s, "t1", "c1", uniqueWorld(100, 500))
	testwait.Until(t, "the re-upload stored and the old points gone", func() bool {
		return s.Status("c1").Qdrant == "stored" && countCluster(fake, "c1") == 100
	})
	if err := s.Delete(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
	if n, m := countCluster(fake, "c1"), countCluster(fake, "c2"); n != 0 || m != 120 {
		t.Errorf("after deleting c1: %d points of c1, %d of c2; want 0 and 120", n, m)
	}
}

func countCluster(fake *qdranttest.Server, cluster string) int {
	n := 0
	for _, p := range fake.Points(DefaultQdrantCollection) {
		if p.GetPayload()[fieldCluster].GetStringValue() == cluster {
			n++
		}
	}
	return n
}

// TestQdrantDownAtUpload: an index built while Qdrant is unreachable
// serves in process ("pending"); the write is retried and, Qdrant back,
// the index is stored and searched there. Points that vanish (another
// replica replaced the upload) make the index search in process again.
func TestQdrantDownAtUpload(t *testing.T) {
	fake := qdranttest.Start(t)
	fake.Stop()
	clock := newTestClock()
	qs := openTestQdrant(t, fake.URL(), clock, nil)
	s := startStore(t, Config{HistoryEvery: 10 * time.Millisecond}, Deps{Qdrant: qs})
	ref := startStore(t, Config{}, Deps{})
	recs := uniqueWorld(80, 7)
	upload(t, s, "t1", "c1", recs)
	upload(t, ref, "t1", "c1", recs)
	waitReady(t, ref, "c1")
	if st := waitReady(t, s, "c1"); st.Qdrant != "pending" || st.QdrantError == "" {
		t.Fatalf("status with Qdrant down = %+v, want qdrant pending with an error", st)
	}
	want := estimateAll(t, ref.ForCluster("c1"))
	if diff := cmp.Diff(want, estimateAll(t, s.ForCluster("c1")), approxEq); diff != "" {
		t.Errorf("pending estimate differs (-want +got):\n%s", diff)
	}
	if qs.Stats().FallbackMissing == 0 {
		t.Errorf("stats %+v: the pending index's searches should count as fallbacks (missing)", qs.Stats())
	}
	fake.Restart()
	testwait.Until(t, "the retried write stores the index", func() bool {
		clock.add(time.Minute) // past the cool-down of a breaker the failed write opened
		return s.Status("c1").Qdrant == "stored"
	})
	if n := countCluster(fake, "c1"); n != 80 {
		t.Errorf("points of c1 = %d, want 80", n)
	}
	searches := qs.Stats().Searches
	// (≥: the store's 10 ms history snapshots search too.)
	if diff := cmp.Diff(want, estimateAll(t, s.ForCluster("c1")), approxEq); diff != "" || qs.Stats().Searches <= searches {
		t.Errorf("stored estimate: searches %d → %d; diff (-want +got):\n%s", searches, qs.Stats().Searches, diff)
	}

	// Another replica's re-upload deleted these points.
	fake.Mu.Lock()
	clear(fake.Colls[DefaultQdrantCollection].Pts)
	fake.Mu.Unlock()
	missing := qs.Stats().FallbackMissing
	if diff := cmp.Diff(want, estimateAll(t, s.ForCluster("c1")), approxEq); diff != "" {
		t.Errorf("estimate after the points vanished differs (-want +got):\n%s", diff)
	}
	if st := qs.Stats(); st.FallbackMissing <= missing || st.State != BreakerClosed {
		t.Errorf("after the points vanished: %+v; want more missing fallbacks, the breaker closed", st)
	}
}

func TestBreaker(t *testing.T) {
	clock := newTestClock()
	b := NewBreaker(BreakerConfig{Failures: 3, Cooldown: 10 * time.Second}, "x", clock.now, nil)
	fail := fmt.Errorf("down")
	for i := 0; i < 2; i++ {
		if !b.Allow() {
			t.Fatal("closed breaker refused a call")
		}
		b.Done(fail)
	}
	b.Allow()
	b.Done(nil) // a success resets the count
	b.Allow()   // a slow call, let through while closed, answers after the breaker opened
	for i := 0; i < 3; i++ {
		b.Allow()
		b.Done(fail)
	}
	if st, opens := b.State(); st != BreakerOpen || opens != 1 {
		t.Fatalf("after 3 consecutive failures: state %d opens %d, want open once", st, opens)
	}
	b.Done(nil) // the slow call's late success
	if st, _ := b.State(); st != BreakerOpen {
		t.Fatalf("a late success of a call from before the opening closed the breaker (state %d)", st)
	}
	if b.Allow() {
		t.Error("open breaker allowed a call before the cool-down")
	}
	clock.add(10 * time.Second)
	if !b.Allow() {
		t.Fatal("no probe after the cool-down")
	}
	if b.Allow() {
		t.Error("a second call went through while the probe is out")
	}
	b.Done(fail) // the probe fails: open again for another cool-down
	if st, opens := b.State(); st != BreakerOpen || opens != 2 || b.Allow() {
		t.Fatalf("failed probe: state %d opens %d, want open again (2) and refusing", st, opens)
	}
	clock.add(10 * time.Second)
	b.Allow()
	b.Abandon() // the caller gave up: no verdict, the next call probes
	if !b.Allow() {
		t.Fatal("no probe after an abandoned one")
	}
	b.Done(nil)
	if st, _ := b.State(); st != BreakerClosed || !b.Allow() {
		t.Errorf("successful probe: state %d, want closed and allowing", st)
	}
}

// TestQdrantClusterRealServer runs the cluster path against a real Qdrant
// when QDRANT_URL (gRPC, e.g. http://127.0.0.1:6334) is set.
func TestQdrantClusterRealServer(t *testing.T) {
	url := os.Getenv("QDRANT_URL")
	if url == "" {
		t.Skip("QDRANT_URL not set: no Qdrant server on this machine; set QDRANT_URL=http://host:6334 to run against a real one")
	}
	coll := fmt.Sprintf("routebalance_test_%d", time.Now().UnixNano())
	qs, err := OpenQdrant(context.Background(), QdrantConfig{Client: estimate.QdrantConfig{URL: url, Collection: coll, APIKey: os.Getenv("QDRANT_API_KEY")}, QueryTimeout: 5 * time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer qs.Close()
	s := startStore(t, Config{}, Deps{Qdrant: qs})
	ref := startStore(t, Config{}, Deps{})
	recs := uniqueWorld(150, 3)
	upload(t, s, "t1", "c1", recs)
	upload(t, ref, "t1", "c1", recs)
	if st := waitReady(t, s, "c1"); st.Qdrant != "stored" {
		t.Fatalf("status %+v, want stored", st)
	}
	waitReady(t, ref, "c1")
	got, want := estimateAll(t, s.ForCluster("c1")), estimateAll(t, ref.ForCluster("c1"))
	// A real Qdrant breaks similarity ties its own way: compare loosely.
	loose := cmp.Comparer(func(x, y float64) bool { return math.Abs(x-y) < 0.05 })
	if diff := cmp.Diff(want, got, loose); diff != "" || qs.Stats().Searches == 0 {
		t.Errorf("searches %d; estimates (-in-process +qdrant):\n%s", qs.Stats().Searches, diff)
	}
	if err := s.Delete(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkQdrantClusterEstimate is one cluster estimate of 4 prompts over
// a 150-row KNN index: in process, through the in-process Qdrant over
// loopback gRPC (the adapter's and gRPC's cost, not a real server's
// search), and with the breaker open (the fallback's cost).
func BenchmarkQdrantClusterEstimate(b *testing.B) {
	fake := qdranttest.Start(b)
	clock := newTestClock()
	qs, err := OpenQdrant(context.Background(), QdrantConfig{Client: estimate.QdrantConfig{URL: fake.URL()}, QueryTimeout: time.Second,
		Breaker: BreakerConfig{Failures: 1, Cooldown: time.Hour}}, clock.now, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer qs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	local, _ := New(Config{}, Deps{})
	remote, _ := New(Config{}, Deps{Qdrant: qs})
	for _, s := range []*Store{local, remote} {
		go s.Run(ctx)
		if _, err := s.Upload(ctx, "t", "c", []string{"big", "small"}, strings.NewReader(jsonl(uniqueWorld(150, 0)))); err != nil {
			b.Fatal(err)
		}
	}
	for remote.Status("c").Qdrant != "stored" || local.Status("c").State != StateReady {
		time.Sleep(time.Millisecond)
	}
	out := make([]routing.PromptEstimate, len(qdrantProbes))
	run := func(b *testing.B, s *Store) {
		ce := s.ForCluster("c")
		for i := 0; i < b.N; i++ {
			if err := ce.Estimate(ctx, qdrantProbes, []string{"big", "small"}, []float64{0.5, 0.5}, out); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("local", func(b *testing.B) { run(b, local) })
	b.Run("qdrant", func(b *testing.B) { run(b, remote) })
	fake.Stop()
	b.Run("breaker-open", func(b *testing.B) { run(b, remote) })
	b.Logf("qdrant stats: %+v", qs.Stats())
}

// TestQdrantGlobalIndex: an operator-wide index whose directory records a
// Qdrant collection (index build --qdrant-url) searches it through the
// breaker after AttachGlobal, with the same estimates as its local
// vectors, and falls back to them when Qdrant stops.
func TestQdrantGlobalIndex(t *testing.T) {
	fake := qdranttest.Start(t)
	qs := openTestQdrant(t, fake.URL(), newTestClock(), nil)
	ctx := context.Background()
	recs := uniqueWorld(150, 11)
	emb, err := estimate.NewBuiltin(estimate.DefaultBuiltinConfig())
	if err != nil {
		t.Fatal(err)
	}
	built, err := estimate.Build(ctx, recs, estimate.Config{}, estimate.BuildOptions{Embedder: emb, NoHead: true})
	if err != nil {
		t.Fatal(err)
	}
	loader, err := estimate.DialQdrant(ctx, estimate.QdrantConfig{URL: fake.URL(), Collection: "global"})
	if err != nil {
		t.Fatal(err)
	}
	defer loader.Close()
	if err := loader.Load(ctx, built.Vectors(), built.Dim(), recs, nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := built.Save(dir, &estimate.QdrantSpec{URL: fake.URL(), Collection: "global"}); err != nil {
		t.Fatal(err)
	}
	local, err := estimate.Open(dir, estimate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	remote, err := estimate.Open(dir, estimate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := qs.AttachGlobal(ctx, remote, "global"); err != nil {
		t.Fatal(err)
	}
	want := estimateAll(t, local)
	if diff := cmp.Diff(want, estimateAll(t, remote), approxEq); diff != "" || qs.Stats().Searches != 1 {
		t.Errorf("searches %d; operator-wide estimates through Qdrant (-local +qdrant):\n%s", qs.Stats().Searches, diff)
	}
	fake.Stop()
	if diff := cmp.Diff(want, estimateAll(t, remote), approxEq); diff != "" || qs.Stats().FallbackError != 1 {
		t.Errorf("error fallbacks %d; estimates with Qdrant down (-local +fallback):\n%s", qs.Stats().FallbackError, diff)
	}
}
