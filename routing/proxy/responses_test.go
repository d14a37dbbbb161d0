package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/routebalance/routebalance/routing"
)

// respServer answers POST /v1/responses with the events of one streamed
// response: created, in_progress, n output_text deltas, then (unless
// end is "") the terminal event end; with end "" it hangs up after the
// deltas. It records the body it was sent.
func respServer(t *testing.T, n int, end string, got *[]byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if got != nil {
			*got = b
		}
		if r.URL.Path != "/v1/responses" {
			http.NotFound(w, r)
			return
		}
		var req struct {
			Stream bool `json:"stream"`
		}
		_ = json.Unmarshal(b, &req)
		obj := func(status string, out int) string {
			usage := "null"
			if out >= 0 {
				usage = fmt.Sprintf(`{"input_tokens":7,"output_tokens":%d,"total_tokens":%d}`, out, 7+out)
			}
			details := "null"
			if status == "incomplete" {
				details = `{"reason":"max_output_tokens"}`
			}
			return fmt.Sprintf(`{"id":"resp_1","object":"response","created_at":1,"model":"m","status":%q,"incomplete_details":%s,"output":[],"usage":%s}`, status, details, usage)
		}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, obj("completed", n))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		seq := 0
		ev := func(typ, data string) {
			fmt.Fprintf(w, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", typ, typ, seq, data)
			seq++
			fl.Flush()
		}
		ev("response.created", `"response":`+obj("in_progress", -1))
		ev("response.in_progress", `"response":`+obj("in_progress", -1))
		for i := 0; i < n; i++ {
			ev("response.output_text.delta", fmt.Sprintf(`"item_id":"msg_1","output_index":0,"content_index":0,"delta":"w%d "`, i))
		}
		switch end {
		case "":
			return // hang up without a terminal event
		case "response.completed", "response.incomplete":
			status := strings.TrimPrefix(end, "response.")
			ev(end, `"response":`+obj(status, n))
		default:
			ev(end, `"response":`+obj("failed", n))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// typedEvents splits a relayed Responses stream into (name, data) pairs.
func typedEvents(t *testing.T, body string) [][2]string {
	t.Helper()
	var out [][2]string
	for _, ev := range strings.Split(body, "\n\n") {
		if ev == "" {
			continue
		}
		name, data, ok := strings.Cut(ev, "\ndata: ")
		if !ok || !strings.HasPrefix(name, "event: ") {
			t.Fatalf("relayed event %q is not 'event: …\\ndata: …'", ev)
		}
		out = append(out, [2]string{strings.TrimPrefix(name, "event: "), data})
	}
	return out
}

func TestResponsesStreamRelayed(t *testing.T) {
	var sent []byte
	up := respServer(t, 4, "response.completed", &sent)
	p := newProxy(t, Config{})
	call := &Call{Endpoint: Responses, Stream: true, MaxTokens: 50, PromptTokens: 3,
		Body: rawBody(t, `{"model":"auto","input":"hi","stream":true}`)}
	resp, err := p.Open(context.Background(), instance(up.URL), call)
	if err != nil {
		t.Fatal(err)
	}
	w, prog := &recorder{}, &progressLog{}
	res := resp.Relay(context.Background(), w, prog)
	if res.Status != ResultOK || res.Outcome.Err != nil {
		t.Fatalf("status %q err %v", res.Status, res.Outcome.Err)
	}
	if string(sent) != `{"model":"test-model","input":"hi","stream":true,"max_output_tokens":50}` {
		t.Errorf("upstream got %s", sent)
	}
	// usage from response.completed; every delta counted on the way
	if !res.UsageReported || res.Outcome.PromptTokens != 7 || res.Outcome.OutputTokens != 4 || res.Outcome.TTFT <= 0 || res.Outcome.Truncated {
		t.Errorf("outcome %+v reported %v", res.Outcome, res.UsageReported)
	}
	if len(prog.got) != 4 || prog.got[3] != 4 {
		t.Errorf("progress %v", prog.got)
	}
	evs := typedEvents(t, w.String())
	if len(evs) != 7 || evs[0][0] != "response.created" || evs[2][0] != "response.output_text.delta" || evs[6][0] != "response.completed" {
		t.Fatalf("relayed %v", evs)
	}
	if w.flushes < len(evs) {
		t.Errorf("%d flushes for %d events: not flushed per event", w.flushes, len(evs))
	}
}

func TestResponsesStreamIncompleteIsTruncated(t *testing.T) {
	up := respServer(t, 3, "response.incomplete", nil)
	p := newProxy(t, Config{})
	resp, err := p.Open(context.Background(), instance(up.URL), &Call{Endpoint: Responses, Stream: true,
		Body: rawBody(t, `{"model":"m","input":"hi","stream":true,"max_output_tokens":3}`)})
	if err != nil {
		t.Fatal(err)
	}
	res := resp.Relay(context.Background(), &recorder{}, nil)
	if res.Status != ResultOK || !res.Outcome.Truncated || res.Outcome.OutputTokens != 3 {
		t.Errorf("status %q outcome %+v, want ok, truncated, 3 tokens", res.Status, res.Outcome)
	}
}

func TestResponsesStreamFailures(t *testing.T) {
	p := newProxy(t, Config{})
	for _, tc := range []struct {
		end      string
		wantLast string
	}{
		{"response.failed", "response.failed"}, // relayed as sent; an upstream error
		{"", "error"},                          // hung up: the relay ends it with an error event
	} {
		up := respServer(t, 2, tc.end, nil)
		resp, err := p.Open(context.Background(), instance(up.URL), &Call{Endpoint: Responses, Stream: true,
			Body: rawBody(t, `{"model":"m","input":"hi","stream":true}`)})
		if err != nil {
			t.Fatal(err)
		}
		w := &recorder{}
		res := resp.Relay(context.Background(), w, nil)
		if res.Status != ResultError || !res.Outcome.Upstream || res.Outcome.OutputTokens != 2 {
			t.Errorf("%q: status %q outcome %+v", tc.end, res.Status, res.Outcome)
		}
		evs := typedEvents(t, w.String())
		last := evs[len(evs)-1]
		if last[0] != tc.wantLast {
			t.Errorf("%q: last event %v", tc.end, last)
		}
		if tc.end == "" {
			var e struct {
				Type    string `json:"type"`
				Code    string `json:"code"`
				Message string `json:"message"`
				Seq     int    `json:"sequence_number"`
			}
			if json.Unmarshal([]byte(last[1]), &e) != nil || e.Type != "error" || e.Code != "upstream_stream_broken" || e.Message == "" || e.Seq != 4 {
				t.Errorf("error event %s", last[1])
			}
		}
	}
}

func TestResponsesStreamStopsWhenBudgetIsSpent(t *testing.T) {
	up := respServer(t, 50, "response.completed", nil)
	p := newProxy(t, Config{})
	in := instance(up.URL)
	in.PriceInPerMTok, in.PriceOutPerMTok = 0, 1e6 // one dollar per output token
	resp, err := p.Open(context.Background(), in, &Call{Endpoint: Responses, Stream: true, BudgetUSD: 3, PromptTokens: 5,
		Body: rawBody(t, `{"model":"m","input":"hi","stream":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	w := &recorder{}
	res := resp.Relay(context.Background(), w, nil)
	if res.Status != ResultBudget || res.Outcome.OutputTokens != 3 || !res.Outcome.Truncated {
		t.Fatalf("status %q outcome %+v", res.Status, res.Outcome)
	}
	evs := typedEvents(t, w.String())
	if len(evs) != 6 { // created, in_progress, 3 deltas, our incomplete
		t.Fatalf("relayed %v", evs)
	}
	var fin struct {
		Type     string `json:"type"`
		Seq      int    `json:"sequence_number"`
		Response struct {
			ID                string            `json:"id"`
			Status            string            `json:"status"`
			IncompleteDetails map[string]string `json:"incomplete_details"`
			Usage             map[string]any    `json:"usage"`
		} `json:"response"`
	}
	if err := json.Unmarshal([]byte(evs[5][1]), &fin); err != nil {
		t.Fatal(err)
	}
	if evs[5][0] != "response.incomplete" || fin.Type != "response.incomplete" || fin.Seq != 5 || fin.Response.ID != "resp_1" ||
		fin.Response.Status != "incomplete" || fin.Response.IncompleteDetails["reason"] != "max_output_tokens" ||
		fin.Response.Usage["output_tokens"] != float64(3) || fin.Response.Usage["input_tokens"] != float64(5) {
		t.Errorf("final event %s", evs[5][1])
	}
}

func TestResponsesNonStreamCounted(t *testing.T) {
	up := respServer(t, 6, "", nil)
	p := newProxy(t, Config{})
	resp, err := p.Open(context.Background(), instance(up.URL), &Call{Endpoint: Responses, Body: rawBody(t, `{"model":"m","input":"hi"}`)})
	if err != nil {
		t.Fatal(err)
	}
	w := &recorder{}
	res := resp.Relay(context.Background(), w, nil)
	if res.Status != ResultOK || !res.UsageReported || res.Outcome.PromptTokens != 7 || res.Outcome.OutputTokens != 6 {
		t.Errorf("status %q outcome %+v", res.Status, res.Outcome)
	}
	if !strings.HasPrefix(w.String(), `{"id":"resp_1"`) {
		t.Errorf("body %q not relayed verbatim", w.String())
	}
	// Without usage: estimated from the output text.
	var r Result
	countResponse([]byte(`{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"content":[{"text":"abcdefgh"}]},{"arguments":"{\"a\":1}"}]}`), &r)
	if want := routing.EstimateTokens("abcdefgh") + routing.EstimateTokens(`{"a":1}`); r.UsageReported || !r.Outcome.Truncated || r.Outcome.OutputTokens != want {
		t.Errorf("estimated %+v", r)
	}
}
