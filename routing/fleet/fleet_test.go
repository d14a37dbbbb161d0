package fleet

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/routing"
)

func TestParseMetrics(t *testing.T) {
	for _, tc := range []struct {
		file    string
		want    Scrape
		wantErr error
	}{
		{file: "vllm-v1.metrics", want: Scrape{Running: 12, Waiting: 3, KVUsage: 0.4375}},
		{file: "vllm-v0.metrics", want: Scrape{Running: 4, Waiting: 0, KVUsage: 0.0625}},
		{file: "not-vllm.metrics", wantErr: ErrNoVLLMMetrics},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open("testdata/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := ParseMetrics(f)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scrape (-want +got):\n%s", diff)
			}
		})
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestDeadReckoning: pending tokens shrink with elapsed time ÷ TPOT after
// the predicted first token, Progress re-anchors them, Release removes
// them.
func TestDeadReckoning(t *testing.T) {
	f := New(Config{}, []routing.Instance{{ID: "a", Model: "m"}})
	m := f.Lookup("a")
	l := f.Admit(t0, m, LeaseSpec{Tokens: 100, TTFT: time.Second, TPOT: 10 * time.Millisecond})
	pending := func(at time.Time) float64 { return f.Snapshot(at, nil)[0].Pending }
	for _, tc := range []struct {
		at   time.Duration
		want float64
	}{
		{0, 100},                      // before the first token
		{time.Second, 100},            // first token predicted now
		{1500 * time.Millisecond, 50}, // 0.5 s ÷ 10 ms = 50 tokens done
		{5 * time.Second, 0},          // past the prediction: never negative
	} {
		if got := pending(t0.Add(tc.at)); got != tc.want {
			t.Errorf("pending at %v = %v, want %v", tc.at, got, tc.want)
		}
	}
	// The proxy says only 20 tokens were streamed by t0+2s.
	f.Progress(t0.Add(2*time.Second), l, 20)
	if got := pending(t0.Add(2*time.Second + 100*time.Millisecond)); got != 70 {
		t.Errorf("pending after progress = %v, want 70", got)
	}
	if !f.Release(t0.Add(3*time.Second), l, routing.Outcome{OutputTokens: 90}) {
		t.Error("first Release returned false")
	}
	if f.Release(t0.Add(3*time.Second), l, routing.Outcome{}) {
		t.Error("second Release returned true")
	}
	s := f.Snapshot(t0.Add(3*time.Second), nil)[0]
	if s.Pending != 0 || s.InFlight != 0 || s.Served != 1 {
		t.Errorf("after release: pending %v in-flight %d served %d, want 0 0 1", s.Pending, s.InFlight, s.Served)
	}
}

// TestHealthAndStaleness: consecutive upstream failures eject, a good
// probe re-admits, client errors do not count, and a scrape older than
// StaleAfter is not trusted.
func TestHealthAndStaleness(t *testing.T) {
	f := New(Config{EjectAfter: 2, StaleAfter: time.Second}, []routing.Instance{{ID: "a"}})
	m := f.Lookup("a")
	fail := func(upstream bool) {
		l := f.Admit(t0, m, LeaseSpec{Tokens: 1})
		f.Release(t0, l, routing.Outcome{Err: errors.New("x"), Upstream: upstream})
	}
	fail(false)
	fail(false)
	fail(true)
	if !f.Healthy(m) {
		t.Fatal("ejected after one upstream failure (EjectAfter 2)")
	}
	fail(true)
	if f.Healthy(m) {
		t.Fatal("not ejected after two upstream failures")
	}
	f.ReportProbe(t0, m, false)
	if f.Healthy(m) {
		t.Fatal("re-admitted after a failed probe")
	}
	f.ReportProbe(t0, m, true)
	if !f.Healthy(m) {
		t.Fatal("not re-admitted after a good probe")
	}

	f.ReportScrape(t0, m, Scrape{Running: 7, Waiting: 2, KVUsage: 0.5}, nil)
	fresh := f.Snapshot(t0.Add(500*time.Millisecond), nil)[0]
	if fresh.Stale || fresh.Running != 7 || fresh.Waiting != 2 || fresh.KVUsage != 0.5 {
		t.Errorf("fresh scrape not used: %+v", fresh)
	}
	old := f.Snapshot(t0.Add(1500*time.Millisecond), nil)[0]
	if !old.Stale || old.Running != 0 || old.Waiting != 0 || old.KVUsage != 0 {
		t.Errorf("stale scrape trusted: %+v", old)
	}
}

// TestRetune: a new TPOT̂ applies from now on without re-counting the past;
// a change within 10 % is ignored.
func TestRetune(t *testing.T) {
	f := New(Config{}, []routing.Instance{{ID: "a"}})
	m := f.Lookup("a")
	f.Admit(t0, m, LeaseSpec{Tokens: 100, TPOT: 10 * time.Millisecond})
	pending := func(at time.Duration) float64 { return f.Snapshot(t0.Add(at), nil)[0].Pending }
	f.Retune(t0.Add(500*time.Millisecond), m, 10500*time.Microsecond) // +5 %: ignored
	if got := pending(time.Second); got != 0 {
		t.Errorf("pending after a 5 %% retune = %v, want 0 (100 tokens at 10 ms)", got)
	}
	f.Retune(t0.Add(500*time.Millisecond), m, 20*time.Millisecond) // 50 done, then half speed
	if got := pending(time.Second); got != 25 {
		t.Errorf("pending after retune = %v, want 25", got)
	}
	if got := f.Snapshot(t0, nil)[0].TPOT; got != 0.02 {
		t.Errorf("snapshot TPOT = %v, want 0.02", got)
	}
}

func TestSeedServedEndsExploration(t *testing.T) {
	f := New(Config{ExploreRequests: 3}, []routing.Instance{{ID: "a"}, {ID: "b"}})
	f.SeedServed(f.Lookup("a"), 3)
	f.SeedServed(f.Lookup("b"), -4)
	snaps := f.Snapshot(t0, nil)
	if snaps[0].Exploring || snaps[0].Served != 3 {
		t.Errorf("seeded with 3: exploring %v served %d", snaps[0].Exploring, snaps[0].Served)
	}
	if !snaps[1].Exploring || snaps[1].Served != 0 {
		t.Errorf("seeded with -4: exploring %v served %d", snaps[1].Exploring, snaps[1].Served)
	}
}

// TestSnapshotOf: one member's snapshot equals its row of Snapshot, and a
// member removed by a newer listing has none.
func TestSnapshotOf(t *testing.T) {
	now := t0
	f := New(Config{}, []routing.Instance{{ID: "a", Model: "m"}, {ID: "b", Model: "m"}})
	b := f.Lookup("b")
	f.Admit(now, b, LeaseSpec{RequestID: "r", Tokens: 40, TPOT: 10 * time.Millisecond})
	all := f.Snapshot(now.Add(time.Second), nil)
	got, ok := f.SnapshotOf(now.Add(time.Second), b)
	if !ok || got.Index != 1 || got.InFlight != 1 || got.Pending != all[1].Pending || got.Member != b {
		t.Errorf("SnapshotOf(b) = %+v, %v; want row 1 of Snapshot %+v", got, ok, all[1])
	}
	f.Rebuild([]routing.Instance{{ID: "a", Model: "m"}})
	if _, ok := f.SnapshotOf(now, b); ok {
		t.Error("SnapshotOf a removed member reported it listed")
	}
}
