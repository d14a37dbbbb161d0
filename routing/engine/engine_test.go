package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testTier() Tier {
	return Tier{Model: "m", GPU: "g", TensorParallel: 1, Instances: 1,
		TPOTMsLight: 10, TPOTLoadFactor: 2, MaxNumSeqs: 4,
		TTFTOverheadMs: 5, PrefillMsPer1kPromptTokens: 100, Verbosity: 1}
}

func testLengths() OutputLengths {
	return OutputLengths{Sigma: 0.6, MedianTokensByTask: map[string]float64{"default": 50, "short": 5}}
}

func newTestEngine(t *testing.T, tier Tier) *Engine {
	t.Helper()
	e, err := NewEngine(EngineConfig{Tier: tier, Lengths: testLengths(), Seed: 7, Start: t0})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// drain drives e event by event until it is idle and returns every event.
func drain(e *Engine) []Event {
	var out []Event
	for {
		t, ok := e.NextEvent()
		if !ok {
			return out
		}
		out = e.Advance(t, out)
	}
}

func ms(v float64) time.Duration { return msDuration(v) }

func TestTierTPOTFormula(t *testing.T) {
	tier := testTier() // light 10 ms, factor 2, max 4
	tests := []struct {
		b    int
		want time.Duration
	}{
		{0, ms(12.5)}, {1, ms(12.5)}, {2, ms(15)}, {3, ms(17.5)}, {4, ms(20)}, {9, ms(20)},
	}
	for _, tt := range tests {
		if got := tier.TPOT(tt.b); got != tt.want {
			t.Errorf("TPOT(%d) = %v, want %v", tt.b, got, tt.want)
		}
	}
}

func TestDecodeStepGrowsWithBatch(t *testing.T) {
	for b := 1; b <= 4; b++ {
		t.Run(fmt.Sprint(b), func(t *testing.T) {
			e := newTestEngine(t, testTier())
			for i := 0; i < b; i++ {
				if _, err := e.Submit(t0, Request{ID: fmt.Sprint(i), PromptTokens: 100, OutputTokens: 10}); err != nil {
					t.Fatal(err)
				}
			}
			evs := drain(e)
			// Every gap between consecutive tokens of a sequence is one decode
			// step with b sequences decoding.
			last := map[string]time.Time{}
			for _, ev := range evs {
				if ev.Kind == EventToken {
					if gap := ev.At.Sub(last[ev.ID]); gap != testTier().TPOT(b) {
						t.Fatalf("seq %s token %d: gap %v, want tpot(%d) = %v", ev.ID, ev.Tokens, gap, b, testTier().TPOT(b))
					}
				}
				last[ev.ID] = ev.At
			}
			if got := e.Stats().ITL.Count; got != uint64(9*b) {
				t.Errorf("ITL observations = %d, want %d", got, 9*b)
			}
		})
	}
}

func TestSingleRequestTimeline(t *testing.T) {
	e := newTestEngine(t, testTier())
	tk, err := e.Submit(t0, Request{ID: "a", PromptTokens: 2000, OutputTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Ticket{PromptTokens: 2000, OutputTokens: 3, Finish: "stop"}, tk); diff != "" {
		t.Fatalf("ticket (-want +got):\n%s", diff)
	}
	ttft := ms(5) + ms(200) // overhead + prefill 2000 tokens at 100 ms/1k
	want := []Event{
		{Kind: EventFirstToken, ID: "a", At: t0.Add(ttft), Tokens: 1},
		{Kind: EventToken, ID: "a", At: t0.Add(ttft + ms(12.5)), Tokens: 2},
		{Kind: EventToken, ID: "a", At: t0.Add(ttft + ms(25)), Tokens: 3},
		{Kind: EventDone, ID: "a", At: t0.Add(ttft + ms(25)), Tokens: 3, Finish: "stop"},
	}
	if diff := cmp.Diff(want, drain(e)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	st := e.Stats()
	if st.PromptTokens != 2000 || st.GenerationTokens != 3 || st.SuccessStop != 1 || st.E2E.Count != 1 {
		t.Errorf("stats = %+v", st)
	}
	if got, want := st.TTFT.Sum, ttft.Seconds(); got != want {
		t.Errorf("TTFT sum = %v, want %v", got, want)
	}
	if e.Live() != 0 {
		t.Errorf("live = %d after completion", e.Live())
	}
}

func TestPrefillDelaysRunningDecode(t *testing.T) {
	e := newTestEngine(t, testTier())
	if _, err := e.Submit(t0, Request{ID: "a", PromptTokens: 100, OutputTokens: 100}); err != nil {
		t.Fatal(err)
	}
	// a: ready at 5 ms, prefill 10 ms → first token at 15 ms; steps of 12.5 ms.
	evs := e.Advance(t0.Add(ms(20)), nil)
	if len(evs) != 1 || evs[0].Kind != EventFirstToken || evs[0].At != t0.Add(ms(15)) {
		t.Fatalf("events = %+v", evs)
	}
	// b arrives at 20 ms, is schedulable at 25 ms; the step in progress
	// (15 → 27.5) ends first, then b is admitted at 27.5: that step costs
	// tpot(1) + prefill(1000) = 12.5 + 100 ms.
	if _, err := e.Submit(t0.Add(ms(20)), Request{ID: "b", PromptTokens: 1000, OutputTokens: 5}); err != nil {
		t.Fatal(err)
	}
	evs = e.Advance(t0.Add(ms(200)), nil)
	want := []Event{
		{Kind: EventToken, ID: "a", At: t0.Add(ms(27.5)), Tokens: 2},
		{Kind: EventToken, ID: "a", At: t0.Add(ms(140)), Tokens: 3},
		{Kind: EventFirstToken, ID: "b", At: t0.Add(ms(140)), Tokens: 1},
		{Kind: EventToken, ID: "a", At: t0.Add(ms(155)), Tokens: 4},
		{Kind: EventToken, ID: "b", At: t0.Add(ms(155)), Tokens: 2},
		{Kind: EventToken, ID: "a", At: t0.Add(ms(170)), Tokens: 5},
		{Kind: EventToken, ID: "b", At: t0.Add(ms(170)), Tokens: 3},
		{Kind: EventToken, ID: "a", At: t0.Add(ms(185)), Tokens: 6},
		{Kind: EventToken, ID: "b", At: t0.Add(ms(185)), Tokens: 4},
		{Kind: EventToken, ID: "a", At: t0.Add(ms(200)), Tokens: 7},
		{Kind: EventToken, ID: "b", At: t0.Add(ms(200)), Tokens: 5},
		{Kind: EventDone, ID: "b", At: t0.Add(ms(200)), Tokens: 5, Finish: "stop"},
	}
	if diff := cmp.Diff(want, evs); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestMaxNumSeqsQueuesFCFS(t *testing.T) {
	tier := testTier() // max_num_seqs 4
	e := newTestEngine(t, tier)
	for i := 0; i < 6; i++ {
		if _, err := e.Submit(t0, Request{ID: fmt.Sprint(i), PromptTokens: 10, OutputTokens: 3 + i}); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(State{Waiting: 6}, e.State()); diff != "" {
		t.Errorf("state before overhead (-want +got):\n%s", diff)
	}
	e.Advance(t0.Add(ms(5)), nil) // schedulable: four admitted, two wait
	st := e.State()
	if st.Running != 4 || st.Waiting != 2 {
		t.Fatalf("running %d waiting %d, want 4 and 2", st.Running, st.Waiting)
	}
	if st.KVTokens != 40 {
		t.Errorf("kv tokens = %d, want 40 (4 prompts of 10)", st.KVTokens)
	}
	evs := drain(e)
	first := map[string]time.Time{}
	done := map[string]time.Time{}
	for _, ev := range evs {
		switch ev.Kind {
		case EventFirstToken:
			first[ev.ID] = ev.At
		case EventDone:
			done[ev.ID] = ev.At
		}
	}
	// Seq 0 (3 tokens) frees the first slot; 4 is admitted at that instant,
	// and 5 when seq 1 (4 tokens) finishes.
	if !first["4"].After(done["0"]) || !first["5"].After(done["1"]) {
		t.Errorf("first tokens of waiting requests %v %v not after completions %v %v", first["4"], first["5"], done["0"], done["1"])
	}
	if first["4"].Sub(done["0"]) != tier.TPOT(3)+tier.Prefill(10) {
		t.Errorf("seq 4 admitted step = %v, want tpot(3)+prefill = %v", first["4"].Sub(done["0"]), tier.TPOT(3)+tier.Prefill(10))
	}
	if q := e.Stats().Queue; q.Count != 6 || q.Sum <= 0 {
		t.Errorf("queue histogram count %d sum %v, want 6 and > 0", q.Count, q.Sum)
	}
}

func TestLengthsDeterministicAndCapped(t *testing.T) {
	e1 := newTestEngine(t, testTier())
	e2 := newTestEngine(t, testTier())
	prompt := "What is the capital of France?"
	r := Request{ID: "x", Prompt: prompt}
	a, err := e1.Plan(&r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := e2.Plan(&r)
	if a != b {
		t.Fatalf("same prompt, same model, same seed: %+v vs %+v", a, b)
	}
	other := testTier()
	other.Model = "other"
	e3 := newTestEngine(t, other)
	diff := 0
	for i := 0; i < 20; i++ {
		r := Request{Prompt: fmt.Sprintf("%s %d", prompt, i)}
		x, _ := e1.Plan(&r)
		y, _ := e3.Plan(&r)
		if x.OutputTokens != y.OutputTokens {
			diff++
		}
	}
	if diff < 10 {
		t.Errorf("only %d of 20 prompts got different lengths from two models", diff)
	}
	natural := a.OutputTokens
	tests := []struct {
		name string
		req  Request
		want Ticket
	}{
		{"cap", Request{Prompt: prompt, MaxTokens: 2}, Ticket{PromptTokens: a.PromptTokens, OutputTokens: 2, Finish: "length"}},
		{"room", Request{Prompt: prompt, MaxTokens: natural + 100}, Ticket{PromptTokens: a.PromptTokens, OutputTokens: natural, Finish: "stop"}},
		{"ignore_eos", Request{Prompt: prompt, MaxTokens: natural + 100, IgnoreEOS: true}, Ticket{PromptTokens: a.PromptTokens, OutputTokens: natural + 100, Finish: "length"}},
		{"ignore_eos no cap", Request{Prompt: prompt, IgnoreEOS: true, PromptTokens: 192}, Ticket{PromptTokens: 192, OutputTokens: DefaultMaxModelLen - 192, Finish: "length"}},
		{"short task", Request{Prompt: prompt, Task: "short", OutputTokens: 0, PromptTokens: 9}, Ticket{PromptTokens: 9, OutputTokens: e1.lengths.Natural(prompt, "m", "short", 1, 7), Finish: "stop"}},
	}
	for _, tt := range tests {
		got, err := e1.Plan(&tt.req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
	if _, err := e1.Plan(&Request{PromptTokens: DefaultMaxModelLen}); !errors.Is(err, ErrPromptTooLong) {
		t.Errorf("prompt of max_model_len: err = %v, want ErrPromptTooLong", err)
	}
}

func TestLengthDistributionFollowsWorldModel(t *testing.T) {
	o := OutputLengths{Sigma: 0.6, MedianTokensByTask: map[string]float64{"default": 200}}
	n := 4000
	below := 0
	for i := 0; i < n; i++ {
		if o.Natural(fmt.Sprintf("prompt %d", i), "m", "", 1.5, 3) < 300 {
			below++
		}
	}
	// Median 200 × 1.5 = 300: about half below.
	if frac := float64(below) / float64(n); frac < 0.46 || frac > 0.54 {
		t.Errorf("fraction below the median = %.3f, want about 0.5", frac)
	}
}

func TestAbort(t *testing.T) {
	e := newTestEngine(t, testTier())
	for _, id := range []string{"a", "b"} {
		if _, err := e.Submit(t0, Request{ID: id, PromptTokens: 10, OutputTokens: 50}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Submit(t0, Request{ID: "a"}); !errors.Is(err, ErrDuplicateID) {
		t.Errorf("duplicate id: err = %v", err)
	}
	e.Advance(t0.Add(ms(40)), nil)
	if !e.Abort(t0.Add(ms(40)), "a") {
		t.Fatal("abort of a live request returned false")
	}
	if e.Abort(t0.Add(ms(40)), "a") {
		t.Error("second abort returned true")
	}
	for _, ev := range drain(e) {
		if ev.ID == "a" && ev.At.After(t0.Add(ms(40))) {
			t.Fatalf("event after abort: %+v", ev)
		}
	}
	st := e.Stats()
	if st.Aborted != 1 || st.SuccessStop != 1 {
		t.Errorf("aborted %d success %d, want 1 and 1", st.Aborted, st.SuccessStop)
	}
	if diff := cmp.Diff(State{}, e.State()); diff != "" {
		t.Errorf("idle state (-want +got):\n%s", diff)
	}
}

func TestLateAdvanceMatchesStepwise(t *testing.T) {
	run := func(step bool) []Event {
		e := newTestEngine(t, testTier())
		var out []Event
		for i := 0; i < 7; i++ {
			at := t0.Add(time.Duration(i) * ms(13))
			if step {
				for {
					nt, ok := e.NextEvent()
					if !ok || nt.After(at) {
						break
					}
					out = e.Advance(nt, out)
				}
			}
			if _, err := e.Submit(at, Request{ID: fmt.Sprint(i), Prompt: fmt.Sprint("p", i)}); err != nil {
				t.Fatal(err)
			}
		}
		if !step {
			return e.Advance(t0.Add(time.Hour), out)
		}
		return append(out, drain(e)...)
	}
	if diff := cmp.Diff(run(true), run(false)); diff != "" {
		t.Errorf("one late Advance differs from stepping (-step +late):\n%s", diff)
	}
}

func TestZeroLatency(t *testing.T) {
	e, err := NewEngine(EngineConfig{Tier: testTier(), Lengths: testLengths(), Start: t0, ZeroLatency: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Submit(t0, Request{ID: "a", PromptTokens: 10, OutputTokens: 4}); err != nil {
		t.Fatal(err)
	}
	evs := e.Advance(t0, nil)
	if len(evs) != 5 || evs[4].Kind != EventDone || evs[4].At != t0 {
		t.Errorf("zero latency events = %+v", evs)
	}
}
