package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
)

// stepClock advances by step on every reading, so durations are exact and
// positive without looking at the wall clock.
type stepClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

// recorder is a Writer that keeps what it got; it fails every call after
// failAfter successful writes when failAfter > 0.
type recorder struct {
	mu        sync.Mutex
	buf       strings.Builder
	writes    int
	flushes   int
	failAfter int
}

var errGone = errors.New("client gone")

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failAfter > 0 && r.writes >= r.failAfter {
		return 0, errGone
	}
	r.writes++
	return r.buf.Write(p)
}

func (r *recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushes++
	return nil
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

// events splits a relayed SSE body into its data payloads.
func events(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	for _, ev := range strings.Split(body, "\n\n") {
		if ev == "" {
			continue
		}
		if !strings.HasPrefix(ev, "data: ") {
			t.Fatalf("relayed event %q does not start with \"data: \"", ev)
		}
		out = append(out, strings.TrimPrefix(ev, "data: "))
	}
	return out
}

type progressLog struct {
	mu  sync.Mutex
	got []int
}

func (p *progressLog) Progress(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, n)
}

func newProxy(t *testing.T, cfg Config) *Proxy {
	t.Helper()
	p, err := New(cfg, Deps{Clock: &stepClock{now: time.Unix(1700000000, 0), step: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func rawBody(t *testing.T, s string) *Body {
	t.Helper()
	b, err := NewBody([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func instance(url string) *routing.Instance {
	return &routing.Instance{ID: "i1", BaseURL: url, Model: "test-model", PriceInPerMTok: 1, PriceOutPerMTok: 2, APIKey: "up-secret"}
}

func TestNonStreamChat(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{APIKey: "up-secret"})
	p := newProxy(t, Config{})
	call := &Call{
		Endpoint: Chat, MaxTokens: 5, PromptTokens: 3, RequestID: "req-1",
		Body: rawBody(t, `{"model":"auto","messages":[{"role":"user","content":"say three words"}],"max_tokens":100,"routebalance":{"preset":"cost"},"temperature":0}`),
	}
	ctx := context.Background()
	resp, err := p.Open(ctx, instance(up.URL+"/v1"), call)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	w := &recorder{}
	res := resp.Relay(ctx, w, nil)
	if res.Outcome.Err != nil || res.Status != ResultOK {
		t.Fatalf("Relay: status %q err %v", res.Status, res.Outcome.Err)
	}
	if !res.UsageReported || res.Outcome.PromptTokens != 3 || res.Outcome.OutputTokens != 5 {
		t.Errorf("usage: reported=%v prompt=%d out=%d, want true 3 5", res.UsageReported, res.Outcome.PromptTokens, res.Outcome.OutputTokens)
	}
	if res.Outcome.E2E <= 0 {
		t.Errorf("E2E = %v, want > 0", res.Outcome.E2E)
	}
	// A non-streamed answer has no first-token time: reporting its E2E
	// as TTFT made the router's TTFT calibration 8-30x off.
	if res.Outcome.TTFT != 0 {
		t.Errorf("TTFT = %v for a non-streamed answer, want 0 (not observed)", res.Outcome.TTFT)
	}
	if !res.Outcome.Truncated {
		t.Error("an answer cut by max_tokens is not marked truncated")
	}
	var got struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(w.String()), &got); err != nil {
		t.Fatalf("relayed body %q: %v", w.String(), err)
	}
	if got.Model != "test-model" || len(got.Choices) != 1 || got.Choices[0].Message.Content != "w0 w1 w2 w3 w4" {
		t.Errorf("relayed %+v", got)
	}
	reqs := up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream saw %d requests, want 1", len(reqs))
	}
	want := map[string]any{
		"model": "test-model", "max_tokens": float64(5), "temperature": float64(0),
		"messages": []any{map[string]any{"role": "user", "content": "say three words"}},
	}
	if diff := cmp.Diff(want, reqs[0].Body); diff != "" {
		t.Errorf("upstream body (-want +got):\n%s", diff)
	}
	if reqs[0].Authorization != "Bearer up-secret" {
		t.Errorf("upstream Authorization = %q", reqs[0].Authorization)
	}
}

func TestNonStreamCountsWithoutUsage(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{OmitUsage: true, Tokens: 4})
	p := newProxy(t, Config{})
	call := &Call{Endpoint: Completions, PromptTokens: 7, Body: rawBody(t, `{"model":"x","prompt":"hi"}`)}
	resp, err := p.Open(context.Background(), instance(up.URL), call)
	if err != nil {
		t.Fatal(err)
	}
	res := resp.Relay(context.Background(), &recorder{}, nil)
	// "w0 w1 w2 w3": routing.EstimateTokens gives (11/4 + 4×4/3)/2 = 4.04 → 4, the true count.
	if res.UsageReported || res.Outcome.PromptTokens != 7 || res.Outcome.OutputTokens != 4 {
		t.Errorf("got reported=%v prompt=%d out=%d, want false 7 4", res.UsageReported, res.Outcome.PromptTokens, res.Outcome.OutputTokens)
	}
}

func TestStreamChatHidesUsageTheClientDidNotAskFor(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Tokens: 4})
	p := newProxy(t, Config{})
	call := &Call{Endpoint: Chat, Stream: true, PromptTokens: 2,
		Body: rawBody(t, `{"model":"auto","stream":true,"messages":[{"role":"user","content":"two words"}]}`)}
	ctx := context.Background()
	resp, err := p.Open(ctx, instance(up.URL), call)
	if err != nil {
		t.Fatal(err)
	}
	w := &recorder{}
	prog := &progressLog{}
	res := resp.Relay(ctx, w, prog)
	if res.Status != ResultOK || res.Outcome.Err != nil {
		t.Fatalf("status %q err %v", res.Status, res.Outcome.Err)
	}
	evs := events(t, w.String())
	// role chunk, 4 tokens, finish chunk, [DONE]; the usage chunk is held back.
	if len(evs) != 7 || evs[6] != "[DONE]" {
		t.Fatalf("relayed %d events %q", len(evs), evs)
	}
	for _, e := range evs {
		if strings.Contains(e, `"usage"`) {
			t.Errorf("usage chunk relayed to a client that did not ask: %s", e)
		}
	}
	if w.flushes < len(evs) {
		t.Errorf("%d flushes for %d events, want one per event", w.flushes, len(evs))
	}
	if diff := cmp.Diff([]int{1, 2, 3, 4}, prog.got); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if !res.UsageReported || res.Outcome.OutputTokens != 4 || res.Outcome.PromptTokens != 2 {
		t.Errorf("usage reported=%v out=%d prompt=%d", res.UsageReported, res.Outcome.OutputTokens, res.Outcome.PromptTokens)
	}
	if res.Outcome.Truncated {
		t.Error("a stream that stopped by itself is marked truncated")
	}
	if res.Outcome.TTFT <= 0 || res.Outcome.TTFT >= res.Outcome.E2E {
		t.Errorf("TTFT %v, E2E %v: want 0 < TTFT < E2E", res.Outcome.TTFT, res.Outcome.E2E)
	}
	opts := up.Requests()[0].Body["stream_options"]
	if diff := cmp.Diff(map[string]any{"include_usage": true}, opts); diff != "" {
		t.Errorf("upstream stream_options (-want +got):\n%s", diff)
	}
}

func TestStreamsReuseUpstreamConnections(t *testing.T) {
	// The upstream ends its body a moment after [DONE], so the relay has
	// to read the end of the body for the connection to be reused.
	up := vllmtest.New(t, vllmtest.Config{Tokens: 3, LingerAfterDone: 20 * time.Millisecond})
	// A drain bound a loaded machine meets: 20 ms of linger plus being
	// scheduled can pass the default 100 ms, and then the connection is
	// (rightly) dropped.
	p := newProxy(t, Config{DrainTimeout: testwait.Bound})
	for i := 0; i < 3; i++ {
		call := &Call{Endpoint: Chat, Stream: true, Body: rawBody(t, `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)}
		resp, err := p.Open(context.Background(), instance(up.URL), call)
		if err != nil {
			t.Fatal(err)
		}
		if res := resp.Relay(context.Background(), &recorder{}, nil); res.Status != ResultOK {
			t.Fatalf("status %q", res.Status)
		}
	}
	if n := up.Conns(); n != 1 {
		t.Errorf("three sequential streams used %d connections, want 1 (keep-alive)", n)
	}
}

// An upstream that keeps its body open long after [DONE] loses the
// connection at DrainTimeout instead of holding the relay.
func TestStreamDrainGivesUpOnALingeringUpstream(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Tokens: 3, LingerAfterDone: 2 * time.Second})
	p := newProxy(t, Config{DrainTimeout: 5 * time.Millisecond})
	for i := 0; i < 2; i++ {
		call := &Call{Endpoint: Chat, Stream: true, Body: rawBody(t, `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)}
		resp, err := p.Open(context.Background(), instance(up.URL), call)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if res := resp.Relay(context.Background(), &recorder{}, nil); res.Status != ResultOK {
			t.Fatalf("status %q", res.Status)
		}
		if d := time.Since(start); d >= 2*time.Second {
			t.Fatalf("the relay waited %v, the whole linger, instead of giving up on the drain", d)
		}
	}
	if n := up.Conns(); n != 2 {
		t.Errorf("two streams whose upstream lingered used %d connections, want 2 (a cut connection is not reused)", n)
	}
}

func TestStreamCompletionRelaysUsageWhenAsked(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Tokens: 3})
	p := newProxy(t, Config{})
	call := &Call{Endpoint: Completions, Stream: true, IncludeUsage: true,
		Body: rawBody(t, `{"model":"m","stream":true,"prompt":"a b c d","stream_options":{"include_usage":true,"continuous_usage_stats":false}}`)}
	resp, err := p.Open(context.Background(), instance(up.URL), call)
	if err != nil {
		t.Fatal(err)
	}
	w := &recorder{}
	res := resp.Relay(context.Background(), w, nil)
	evs := events(t, w.String())
	if len(evs) != 6 || !strings.Contains(evs[4], `"usage":{"completion_tokens":3,"prompt_tokens":4,"total_tokens":7}`) || evs[5] != "[DONE]" {
		t.Fatalf("relayed %q", evs)
	}
	if res.Outcome.OutputTokens != 3 || res.Outcome.PromptTokens != 4 {
		t.Errorf("out=%d prompt=%d, want 3 4", res.Outcome.OutputTokens, res.Outcome.PromptTokens)
	}
	want := map[string]any{"include_usage": true, "continuous_usage_stats": false}
	if diff := cmp.Diff(want, up.Requests()[0].Body["stream_options"]); diff != "" {
		t.Errorf("stream_options (-want +got):\n%s", diff)
	}
}

func TestStreamCountsChunksWithoutUsage(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Tokens: 5, OmitUsage: true})
	p := newProxy(t, Config{})
	call := &Call{Endpoint: Chat, Stream: true, PromptTokens: 9,
		Body: rawBody(t, `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)}
	resp, err := p.Open(context.Background(), instance(up.URL), call)
	if err != nil {
		t.Fatal(err)
	}
	res := resp.Relay(context.Background(), &recorder{}, nil)
	if res.UsageReported || res.Outcome.OutputTokens != 5 || res.Outcome.PromptTokens != 9 {
		t.Errorf("reported=%v out=%d prompt=%d, want false 5 9", res.UsageReported, res.Outcome.OutputTokens, res.Outcome.PromptTokens)
	}
}

func TestStreamStopsWhenBudgetIsSpent(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Tokens: 50})
	p := newProxy(t, Config{})
	in := instance(up.URL)
	in.PriceInPerMTok, in.PriceOutPerMTok = 0, 1e6 // one dollar per output token
	for _, tc := range []struct {
		name         string
		includeUsage bool
		wantEvents   int
	}{
		// role chunk, 3 tokens, our finish chunk, [DONE]
		{"no usage", false, 6},
		// ... plus our usage chunk
		{"with usage", true, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call := &Call{Endpoint: Chat, Stream: true, IncludeUsage: tc.includeUsage, BudgetUSD: 3, PromptTokens: 1,
				Body: rawBody(t, `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)}
			resp, err := p.Open(context.Background(), in, call)
			if err != nil {
				t.Fatal(err)
			}
			w := &recorder{}
			res := resp.Relay(context.Background(), w, nil)
			if res.Status != ResultBudget || res.Outcome.Err != nil {
				t.Fatalf("status %q err %v, want budget", res.Status, res.Outcome.Err)
			}
			if res.Outcome.OutputTokens != 3 || !res.Outcome.Truncated {
				t.Errorf("output tokens %d truncated %v, want 3 true", res.Outcome.OutputTokens, res.Outcome.Truncated)
			}
			evs := events(t, w.String())
			if len(evs) != tc.wantEvents || evs[len(evs)-1] != "[DONE]" {
				t.Fatalf("relayed %q", evs)
			}
			var fin struct {
				ID      string `json:"id"`
				Object  string `json:"object"`
				Choices []struct {
					Index        int             `json:"index"`
					Delta        json.RawMessage `json:"delta"`
					FinishReason string          `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(evs[4]), &fin); err != nil {
				t.Fatal(err)
			}
			if fin.ID != "cmpl-test" || fin.Object != "chat.completion.chunk" || len(fin.Choices) != 1 || fin.Choices[0].FinishReason != "length" {
				t.Errorf("final chunk %s", evs[4])
			}
			if tc.includeUsage && !strings.Contains(evs[5], `"usage":{"completion_tokens":3,"prompt_tokens":1,"total_tokens":4}`) {
				t.Errorf("usage chunk %s", evs[5])
			}
		})
	}
}

func TestStreamUpstreamDiesMidStream(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Tokens: 10, DieAfter: 3})
	p := newProxy(t, Config{})
	call := &Call{Endpoint: Chat, Stream: true,
		Body: rawBody(t, `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)}
	resp, err := p.Open(context.Background(), instance(up.URL), call)
	if err != nil {
		t.Fatal(err)
	}
	w := &recorder{}
	res := resp.Relay(context.Background(), w, nil)
	if res.Status != ResultError || !errors.Is(res.Outcome.Err, ErrStreamBroken) || !res.Outcome.Upstream {
		t.Fatalf("status %q err %v upstream %v", res.Status, res.Outcome.Err, res.Outcome.Upstream)
	}
	if res.Outcome.OutputTokens != 3 {
		t.Errorf("metered %d tokens, want the 3 that were sent", res.Outcome.OutputTokens)
	}
	evs := events(t, w.String())
	last := evs[len(evs)-1]
	var env struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(last), &env); err != nil || env.Error.Code != "upstream_stream_broken" || env.Error.Message == "" {
		t.Errorf("last event %q is not an error envelope", last)
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Tokens: 10, StallAfter: 2})
	p := newProxy(t, Config{StreamIdleTimeout: 50 * time.Millisecond})
	call := &Call{Endpoint: Completions, Stream: true, Body: rawBody(t, `{"model":"m","stream":true,"prompt":"x"}`)}
	resp, err := p.Open(context.Background(), instance(up.URL), call)
	if err != nil {
		t.Fatal(err)
	}
	w := &recorder{}
	res := resp.Relay(context.Background(), w, nil)
	if res.Status != ResultError || !errors.Is(res.Outcome.Err, ErrStreamBroken) || !strings.Contains(res.Outcome.Err.Error(), "sent nothing") {
		t.Fatalf("status %q err %v", res.Status, res.Outcome.Err)
	}
	if res.Outcome.OutputTokens != 2 {
		t.Errorf("tokens %d, want 2", res.Outcome.OutputTokens)
	}
}

func TestOpenClassifiesFailures(t *testing.T) {
	p := newProxy(t, Config{})
	body := `{"model":"m","messages":[{"role":"user","content":"x"}]}`
	t.Run("refused", func(t *testing.T) {
		refused := vllmtest.RefusedURL(t)
		_, err := p.Open(context.Background(), instance(refused), &Call{Endpoint: Chat, Body: rawBody(t, body)})
		var ue *UnreachableError
		if !errors.Is(err, ErrUnreachable) || !errors.As(err, &ue) || ue.InstanceID != "i1" {
			t.Fatalf("err %v, want UnreachableError for i1", err)
		}
		// the transport is called directly; the error reads as http.Client's
		_, cerr := http.Post(upstreamURL(refused, Chat), "application/json", strings.NewReader(body))
		if cerr == nil || ue.Err.Error() != cerr.Error() {
			t.Errorf("error text %q, http.Client says %q", ue.Err, cerr)
		}
	})
	t.Run("server error", func(t *testing.T) {
		up := vllmtest.New(t, vllmtest.Config{Status: 500})
		_, err := p.Open(context.Background(), instance(up.URL), &Call{Endpoint: Chat, Body: rawBody(t, body)})
		var se *StatusError
		if !errors.As(err, &se) {
			t.Fatalf("err %v, want StatusError", err)
		}
		want := &StatusError{InstanceID: "i1", Status: 500, Message: "injected failure 500", Type: "InternalServerError", Code: "500"}
		if diff := cmp.Diff(want, se); diff != "" || !se.InstanceFault() {
			t.Errorf("StatusError (-want +got):\n%s", diff)
		}
	})
	t.Run("unknown model", func(t *testing.T) {
		up := vllmtest.New(t, vllmtest.Config{Model: "other"})
		_, err := p.Open(context.Background(), instance(up.URL), &Call{Endpoint: Chat, Body: rawBody(t, body)})
		var se *StatusError
		if !errors.As(err, &se) || se.Status != http.StatusNotFound || se.Message != "The model `test-model` does not exist." || se.InstanceFault() {
			t.Fatalf("err %#v", err)
		}
	})
}

func TestDialControlRefusesAddress(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{})
	refuse := errors.New("address not allowed")
	p, err := New(Config{}, Deps{Control: func(network, address string, _ syscall.RawConn) error { return refuse }})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Open(context.Background(), instance(up.URL), &Call{Endpoint: Chat, Body: rawBody(t, `{"model":"m"}`)})
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, refuse) {
		t.Fatalf("err %v, want the dial refusal as unreachable", err)
	}
	if len(up.Requests()) != 0 {
		t.Error("the request reached the upstream")
	}
}

func TestClientCancelBeforeHeadersReachesUpstream(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	up := vllmtest.New(t, vllmtest.Config{Hold: hold})
	p := newProxy(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-up.Arrived()
		cancel()
	}()
	_, err := p.Open(ctx, instance(up.URL), &Call{Endpoint: Chat, Stream: true,
		Body: rawBody(t, `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnreachable) {
		t.Fatalf("err %v, want context.Canceled and not retryable", err)
	}
	testwait.Until(t, "upstream to see the cancellation", func() bool { return up.Cancelled() == 1 })
}

func TestClientGoneMidStreamCancelsUpstream(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Tokens: 1000, TokenDelay: time.Millisecond})
	p := newProxy(t, Config{})
	ctx := context.Background()
	resp, err := p.Open(ctx, instance(up.URL), &Call{Endpoint: Chat, Stream: true,
		Body: rawBody(t, `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	res := resp.Relay(ctx, &recorder{failAfter: 3}, nil)
	if res.Status != ResultCancelled || !errors.Is(res.Outcome.Err, errGone) || res.Outcome.Upstream {
		t.Fatalf("status %q err %v upstream %v", res.Status, res.Outcome.Err, res.Outcome.Upstream)
	}
	testwait.Until(t, "upstream to see the cancellation", func() bool { return up.Cancelled() == 1 })
	if up.Finished() != 0 {
		t.Errorf("upstream finished %d requests, want 0", up.Finished())
	}
}

func TestContextCancelMidStream(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Tokens: 1000, TokenDelay: time.Millisecond})
	p := newProxy(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := p.Open(ctx, instance(up.URL), &Call{Endpoint: Chat, Stream: true,
		Body: rawBody(t, `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	prog := progressFunc(func(n int) {
		if n == 2 {
			cancel()
		}
	})
	res := resp.Relay(ctx, &recorder{}, prog)
	if res.Status != ResultCancelled || !errors.Is(res.Outcome.Err, context.Canceled) || res.Outcome.Upstream {
		t.Fatalf("status %q err %v upstream %v", res.Status, res.Outcome.Err, res.Outcome.Upstream)
	}
	testwait.Until(t, "upstream to see the cancellation", func() bool { return up.Cancelled() == 1 })
}

type progressFunc func(int)

func (f progressFunc) Progress(n int) { f(n) }

// TestRewrite checks the body sent upstream byte for byte: the client's
// members keep their order and formatting, the ones the proxy sets are
// replaced in place and the ones it adds go last.
func TestRewrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		call Call
		body string
		want string
	}{
		{"model and routebalance", Call{Endpoint: Chat},
			`{"model":"auto","routebalance":{"preset":"cost"},"n":2}`,
			`{"model":"served","n":2}`},
		{"order and formatting kept", Call{Endpoint: Chat},
			`{ "n" : 2, "messages": [ {"role":"user", "content":"a <b> & c\u00e9"} ],"model":"auto" }`,
			`{"n":2,"messages":[ {"role":"user", "content":"a <b> & c\u00e9"} ],"model":"served"}`},
		{"no model: added", Call{Endpoint: Completions},
			`{"prompt":"x"}`, `{"prompt":"x","model":"served"}`},
		{"repeated key: the last value once", Call{Endpoint: Chat},
			`{"temperature":1,"model":"a","temperature":0.5,"model":"b","routebalance":{},"routebalance":null}`,
			`{"temperature":0.5,"model":"served"}`},
		{"escaped key names the same member", Call{Endpoint: Chat},
			`{"mod\u0065l":"auto","n":1}`, `{"model":"served","n":1}`},
		{"clamp adds max_tokens", Call{Endpoint: Chat, MaxTokens: 10},
			`{"model":"auto"}`, `{"model":"served","max_tokens":10}`},
		{"embeddings: no clamp, no stream options", Call{Endpoint: Embeddings, MaxTokens: 10, Stream: true},
			`{"model":"auto","input":["a","b"]}`, `{"model":"served","input":["a","b"]}`},
		{"clamp lowers max_tokens", Call{Endpoint: Completions, MaxTokens: 10},
			`{"model":"auto","max_tokens":500}`, `{"model":"served","max_tokens":10}`},
		{"tighter client limit kept", Call{Endpoint: Chat, MaxTokens: 10},
			`{"model":"auto","max_completion_tokens":4}`, `{"model":"served","max_completion_tokens":4}`},
		{"clamp lowers max_completion_tokens", Call{Endpoint: Chat, MaxTokens: 10},
			`{"model":"auto","max_completion_tokens":40,"max_tokens":null}`, `{"model":"served","max_completion_tokens":10,"max_tokens":null}`},
		{"completions: max_completion_tokens is not a limit", Call{Endpoint: Completions, MaxTokens: 10},
			`{"model":"auto","max_completion_tokens":40}`, `{"model":"served","max_completion_tokens":40,"max_tokens":10}`},
		{"stream asks for usage", Call{Endpoint: Chat, Stream: true},
			`{"model":"auto","stream":true,"stream_options":null}`,
			`{"model":"served","stream":true,"stream_options":{"include_usage":true}}`},
		{"stream adds stream_options", Call{Endpoint: Chat, Stream: true},
			`{"model":"auto","stream":true}`,
			`{"model":"served","stream":true,"stream_options":{"include_usage":true}}`},
		{"stream keeps other options", Call{Endpoint: Chat, Stream: true},
			`{"model":"auto","stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`,
			`{"model":"served","stream":true,"stream_options":{"continuous_usage_stats":true,"include_usage":true}}`},
		{"responses: max_output_tokens clamped, no stream_options", Call{Endpoint: Responses, MaxTokens: 10, Stream: true},
			`{"model":"auto","input":"x","stream":true,"max_output_tokens":50,"max_tokens":70}`,
			`{"model":"served","input":"x","stream":true,"max_output_tokens":10,"max_tokens":70}`},
		{"responses: clamp adds max_output_tokens", Call{Endpoint: Responses, MaxTokens: 10},
			`{"model":"auto","input":"x"}`, `{"model":"served","input":"x","max_output_tokens":10}`},
		{"tokenize: no clamp", Call{Endpoint: Tokenize, MaxTokens: 10},
			`{"model":"m","prompt":"x"}`, `{"model":"served","prompt":"x"}`},
		{"not streamed: stream_options untouched", Call{Endpoint: Chat},
			`{"model":"auto","stream_options":{"include_usage":false}}`,
			`{"model":"served","stream_options":{"include_usage":false}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call := tc.call
			call.Body = rawBody(t, tc.body)
			before := string(call.Body.Raw())
			got, err := rewrite(&call, "served")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if !json.Valid(got) {
				t.Errorf("rewrite wrote invalid JSON: %s", got)
			}
			if after := string(call.Body.Raw()); before != after {
				t.Errorf("rewrite changed the caller's body: %s -> %s", before, after)
			}
		})
	}
}

// FuzzRewrite checks the spliced body against the old decode-and-encode
// rewrite for any JSON object: the same members with the same values.
func FuzzRewrite(f *testing.F) {
	for _, s := range []string{
		`{"model":"auto","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"routebalance":{"preset":"cost"}}`,
		`{"model":"a","stream":true,"stream_options":{"include_usage":false,"x":1,"x":2}}`,
		`{"mod\u0065l":1,"model":2,"max_completion_tokens":"7","max_tokens":null}`,
		`{}`, ` { "a" : [1, {"b": "}"}] } `,
	} {
		f.Add([]byte(s), 10, true, true)
	}
	f.Fuzz(func(t *testing.T, raw []byte, maxTokens int, stream, chat bool) {
		b, err := NewBody(raw)
		if err != nil {
			return
		}
		call := Call{Body: b, Stream: stream, MaxTokens: maxTokens % 1000, Endpoint: Completions}
		if chat {
			call.Endpoint = Chat
		}
		got, gerr := rewrite(&call, "served")
		want, werr := oldRewrite(&call, raw, "served")
		if (gerr != nil) != (werr != nil) {
			t.Fatalf("errors differ: spliced %v, re-encoded %v", gerr, werr)
		}
		if gerr != nil {
			return
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("spliced body is not JSON: %s: %v", got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(w, g); diff != "" {
			t.Errorf("body %s: spliced %s differs from re-encoded %s (-want +got):\n%s", raw, got, want, diff)
		}
	})
}

// oldRewrite is the rewrite the proxy did before splicing (decode the
// object into a map, set members, encode), the reference of FuzzRewrite.
func oldRewrite(call *Call, raw []byte, model string) ([]byte, error) {
	var out map[string]json.RawMessage
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	delete(out, "routebalance")
	m, _ := json.Marshal(model)
	out["model"] = m
	if call.Stream {
		opts := map[string]json.RawMessage{}
		if raw, ok := out["stream_options"]; ok && !isNull(raw) {
			if err := json.Unmarshal(raw, &opts); err != nil {
				return nil, err
			}
		}
		opts["include_usage"] = json.RawMessage("true")
		b, _ := json.Marshal(opts)
		out["stream_options"] = b
	}
	if call.MaxTokens > 0 {
		clamp := func(key string) bool {
			raw, ok := out[key]
			if !ok || isNull(raw) {
				return false
			}
			if v, err := strconv.Atoi(string(bytes.TrimSpace(raw))); err == nil && v > 0 && v <= call.MaxTokens {
				return true
			}
			out[key] = []byte(strconv.Itoa(call.MaxTokens))
			return true
		}
		a := clamp("max_tokens")
		b := call.Endpoint == Chat && clamp("max_completion_tokens")
		if !a && !b {
			out["max_tokens"] = []byte(strconv.Itoa(call.MaxTokens))
		}
	}
	return json.Marshal(out)
}

func TestParseUpstreamError(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  string
		want StatusError
	}{
		{"openai envelope", `{"error":{"message":"bad","type":"invalid_request_error","param":"messages","code":"x"}}`,
			StatusError{Status: 400, Message: "bad", Type: "invalid_request_error", Param: "messages", Code: "x"}},
		{"vllm flat", `{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}`,
			StatusError{Status: 400, Message: "too long", Type: "BadRequestError", Code: "400"}},
		{"string error", `{"error":"nope"}`, StatusError{Status: 400, Message: "nope"}},
		{"plain text", "Internal Server Error\n", StatusError{Status: 400, Message: "Internal Server Error"}},
		{"empty", "", StatusError{Status: 400, Message: "Bad Request"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseUpstreamError(400, []byte(tc.raw))
			if diff := cmp.Diff(&tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestSSEParsing feeds the relay hand-written streams: CRLF line ends,
// "data:" without a space, comments, a multi-line data field, and a last
// event without its blank line.
func TestSSEParsing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream string
		want   []string
		status string
		tokens int
	}{
		{"crlf and comments",
			": keep-alive\r\n\r\ndata:{\"choices\":[{\"index\":0,\"text\":\"a\"}]}\r\n\r\nevent: x\r\ndata: [DONE]\r\n\r\n",
			[]string{`{"choices":[{"index":0,"text":"a"}]}`, "[DONE]"}, ResultOK, 1},
		{"multi-line data",
			"data: {\"choices\":\ndata: [{\"index\":0,\"text\":\"b\"}]}\n\ndata: [DONE]",
			[]string{"{\"choices\":\n[{\"index\":0,\"text\":\"b\"}]}", "[DONE]"}, ResultOK, 1},
		{"not json is relayed", "data: hello\n\ndata: [DONE]\n\n", []string{"hello", "[DONE]"}, ResultOK, 0},
		{"upstream error event", "data: {\"error\":{\"message\":\"oom\"}}\n\ndata: [DONE]\n\n",
			[]string{`{"error":{"message":"oom"}}`, "[DONE]"}, ResultError, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProxy(t, Config{})
			_, cancel := context.WithCancel(context.Background())
			r := &Response{Status: 200, p: p, body: io.NopCloser(strings.NewReader(tc.stream)), cancel: cancel, stream: true, start: p.clock.Now()}
			w := &recorder{}
			res := r.Relay(context.Background(), w, nil)
			if diff := cmp.Diff(tc.want, events(t, w.String())); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if res.Status != tc.status || res.Outcome.OutputTokens != tc.tokens {
				t.Errorf("status %q tokens %d, want %q %d", res.Status, res.Outcome.OutputTokens, tc.status, tc.tokens)
			}
		})
	}
}

func TestUpstreamURL(t *testing.T) {
	for base, want := range map[string]string{
		"http://h:8000":     "http://h:8000/v1/chat/completions",
		"http://h:8000/":    "http://h:8000/v1/chat/completions",
		"http://h:8000/v1":  "http://h:8000/v1/chat/completions",
		"http://h:8000/v1/": "http://h:8000/v1/chat/completions",
		"http://h/prefix":   "http://h/prefix/v1/chat/completions",
	} {
		if got := upstreamURL(base, Chat); got != want {
			t.Errorf("upstreamURL(%q) = %q, want %q", base, got, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	if err := (Config{DialTimeout: -1}).Validate(); err == nil {
		t.Error("negative dial timeout accepted")
	}
	if _, err := New(Config{MaxEventBytes: -1}, Deps{}); err == nil {
		t.Error("New accepted a negative size")
	}
}

// BenchmarkRewrite compares splicing the body with the decode-and-encode
// rewrite it replaced, on a chat body with a 460-character prompt:
//
//	go test -run '^$' -bench Rewrite -benchmem ./routing/proxy/
func BenchmarkRewrite(b *testing.B) {
	prompt := strings.Repeat("Which of these is a prime number? Answer with the letter only.\n", 8)[:460]
	raw, _ := json.Marshal(map[string]any{"model": "auto", "messages": []map[string]string{
		{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": prompt}}, "temperature": 0})
	body, err := NewBody(raw)
	if err != nil {
		b.Fatal(err)
	}
	call := &Call{Endpoint: Chat, Body: body, MaxTokens: 512}
	b.Run("splice", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := rewrite(call, "llama-3.1-8b-instruct"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-encode", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := oldRewrite(call, raw, "llama-3.1-8b-instruct"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestReadAll(t *testing.T) {
	body := strings.Repeat("x", 100)
	for _, tc := range []struct {
		name        string
		size, limit int64
		want        int
	}{
		{"announced size", 100, 1000, 100},
		{"unknown size", -1, 1000, 100},
		{"longer than announced", 10, 1000, 100},
		{"shorter than announced", 200, 1000, 100},
		{"limit below the size", 100, 50, 50},
		{"limit below the body", 10, 50, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAll(iotest.OneByteReader(strings.NewReader(body)), tc.size, tc.limit)
			if err != nil || len(got) != tc.want || strings.Trim(string(got), "x") != "" {
				t.Errorf("readAll = %d bytes, %v; want %d", len(got), err, tc.want)
			}
		})
	}
}
