package api

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/owner"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/tenants"
)

// fixedOwner is an Owners whose every cluster is owned by one replica at
// url; it records the Unreachable calls.
type fixedOwner struct {
	url         string
	mu          sync.Mutex
	unreachable int
}

func (o *fixedOwner) Lookup(_ context.Context, _ string) (owner.Replica, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.unreachable > 0 {
		return owner.Replica{}, false // as owner.Leases within Down
	}
	return owner.Replica{ID: "owner", URL: o.url}, true
}

func (o *fixedOwner) Touch(string) {}

func (o *fixedOwner) Unreachable(string, owner.Replica) {
	o.mu.Lock()
	o.unreachable++
	o.mu.Unlock()
}

func testSigner(t testing.TB) *owner.Signer {
	s, err := owner.NewSigner([]byte(strings.Repeat("j", 32)), 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ownerPair is an owner replica and an entry replica that forwards every
// request to it, over one fake vLLM instance.
func ownerPair(t testing.TB, ownerURL string) (entry, own *infEnv, owners *fixedOwner, up *vllmtest.Server) {
	return ownerPairWith(t, ownerURL, false)
}

func ownerPairWith(t testing.TB, ownerURL string, quality bool) (entry, own *infEnv, owners *fixedOwner, up *vllmtest.Server) {
	up = vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 4})
	s := testSigner(t)
	ins := []tenants.Instance{inst("i1", up.URL, "m")}
	own = newInfEnv(t, envOpts{instances: ins, quality: quality, forward: NewForwarder(ForwardConfig{Replica: "owner"}, nil, s, nil)})
	if ownerURL == "" {
		ownerURL = own.url
	}
	owners = &fixedOwner{url: ownerURL}
	entry = newInfEnv(t, envOpts{instances: ins, quality: quality, forward: NewForwarder(ForwardConfig{Replica: "entry"}, owners, s, nil)})
	return entry, own, owners, up
}

func TestForwardToOwner(t *testing.T) {
	entry, own, _, up := ownerPair(t, "")
	for _, stream := range []bool{false, true} {
		body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		if stream {
			body = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
		}
		res, got := entry.post(t, "/v1/chat/completions", testKey, body, map[string]string{"X-RouteBalance-Priority": "high"})
		if res.StatusCode != 200 || res.Header.Get(hdrReplica) != "owner" || res.Header.Get(hdrInstance) != "i1" {
			t.Fatalf("stream %v: %d, replica %q, instance %q: %s", stream, res.StatusCode, res.Header.Get(hdrReplica), res.Header.Get(hdrInstance), got)
		}
		dres, direct := own.post(t, "/v1/chat/completions", testKey, body, nil)
		if dres.StatusCode != 200 {
			t.Fatalf("direct: %d", dres.StatusCode)
		}
		if stream {
			if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Fatalf("forwarded stream content type %q", ct)
			}
			if a, b := strings.Count(got, "data: "), strings.Count(direct, "data: "); a != b || !strings.HasSuffix(strings.TrimSpace(got), "data: [DONE]") {
				t.Fatalf("forwarded stream has %d events, direct %d:\n%s", a, b, got)
			}
		} else if !strings.Contains(got, `"choices"`) {
			t.Fatalf("forwarded answer %s", got)
		}
	}
	// Each request ran once, on the owner; the entry metered nothing.
	testwait.Until(t, "the owner meters 4 requests", func() bool { return len(own.meter.events()) == 4 })
	if n := len(entry.meter.events()); n != 0 {
		t.Fatalf("the entry replica metered %d forwarded requests, want 0", n)
	}
	if n := len(up.Requests()); n != 4 {
		t.Fatalf("the instance received %d requests, want 4", n)
	}
	// The owner saw the client's own headers (a routing override); the
	// last request was the direct one, so look at the first.
	if p := own.router.Requests()[0].Priority; p != routing.PriorityHigh {
		t.Fatalf("the owner routed the forwarded request at priority %v, want the client's X-RouteBalance-Priority high", p)
	}
}

// Feedback goes to the replica that remembers the request: the owner.
func TestForwardFeedbackToOwner(t *testing.T) {
	entry, own, _, _ := ownerPairWith(t, "", true)
	res, body := entry.post(t, "/v1/chat/completions", testKey, `{"model":"m","messages":[{"role":"user","content":"rate me"}]}`, nil)
	id := res.Header.Get(HeaderRequestID)
	if res.StatusCode != 200 || id == "" {
		t.Fatalf("completion: %d %s", res.StatusCode, body)
	}
	res, body = entry.post(t, "/v1/feedback", testKey, `{"request_id":"`+id+`","score":0.75}`, nil)
	if res.StatusCode != 200 {
		t.Fatalf("feedback via the entry replica: %d %s, want 200 from the owner", res.StatusCode, body)
	}
	own.quality.mu.Lock()
	got := append([]string(nil), own.quality.got...)
	own.quality.mu.Unlock()
	if len(got) != 1 || !strings.HasPrefix(got[0], "rate me|m|0.75") {
		t.Fatalf("the owner's quality observer got %q, want the forwarded score", got)
	}
	entry.quality.mu.Lock()
	defer entry.quality.mu.Unlock()
	if len(entry.quality.got) != 0 {
		t.Fatalf("the entry replica observed %q itself", entry.quality.got)
	}
}

func TestForwardOwnerUnreachableRoutesHere(t *testing.T) {
	entry, own, owners, _ := ownerPair(t, vllmtest.RefusedURL(t))
	res, body := entry.post(t, "/v1/chat/completions", testKey, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
	if res.StatusCode != 200 || res.Header.Get(hdrReplica) != "entry" {
		t.Fatalf("owner down: %d by %q %s, want 200 routed by the entry", res.StatusCode, res.Header.Get(hdrReplica), body)
	}
	testwait.Until(t, "the entry meters it", func() bool { return len(entry.meter.events()) == 1 })
	owners.mu.Lock()
	unreachable := owners.unreachable
	owners.mu.Unlock()
	if n := len(own.meter.events()); n != 0 || unreachable != 1 {
		t.Fatalf("owner metered %d, unreachable reported %d times; want 0 and 1", n, unreachable)
	}
	if st := entry.fwd.Stats(); st.Fallbacks != 1 || st.Forwarded != 0 {
		t.Fatalf("stats %+v, want one fallback", st)
	}
}

// A replica that takes the request and dies before answering: the entry
// answers 502 and does not run it again (the owner may have admitted it).
func TestForwardOwnerDiesAfterAccepting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = http.ReadRequest(bufio.NewReader(c))
			c.Close()
		}
	}()
	entry, _, _, up := ownerPair(t, "http://"+ln.Addr().String())
	res, body := entry.post(t, "/v1/chat/completions", testKey, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
	env := decodeEnvelope(t, body)
	if res.StatusCode != 502 || str(env.Error.Code) != "owner_replica_failed" {
		t.Fatalf("owner died: %d %s, want 502 owner_replica_failed", res.StatusCode, body)
	}
	if n := len(up.Requests()); n != 0 || len(entry.meter.events()) != 0 {
		t.Fatalf("the entry ran the request itself after the owner accepted it (%d upstream requests)", n)
	}
}

func TestForwardedHeaderChecked(t *testing.T) {
	_, own, _, _ := ownerPair(t, "")
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	s := testSigner(t)
	good := s.Sign(time.Now(), "entry", "POST", "/v1/chat/completions", []byte(body))
	for _, tc := range []struct {
		name, h string
		want    int
	}{
		{"signed", good, 200},
		{"garbage", "yes", 403},
		{"other body", s.Sign(time.Now(), "entry", "POST", "/v1/chat/completions", []byte(`{}`)), 403},
		{"other secret", func() string {
			o, _ := owner.NewSigner([]byte(strings.Repeat("x", 32)), 0)
			return o.Sign(time.Now(), "entry", "POST", "/v1/chat/completions", []byte(body))
		}(), 403},
	} {
		res, got := own.post(t, "/v1/chat/completions", testKey, body, map[string]string{owner.Header: tc.h})
		if res.StatusCode != tc.want {
			t.Fatalf("%s: %d %s, want %d", tc.name, res.StatusCode, got, tc.want)
		}
		if tc.want == 403 {
			env := decodeEnvelope(t, got)
			if env.Error.Type != typePermission || str(env.Error.Code) != "invalid_forwarded_header" || str(env.Error.Param) != owner.Header {
				t.Fatalf("%s: envelope %s", tc.name, got)
			}
		}
	}
	// Without a Forwarder (no secret wired) every forwarded header is refused.
	plain := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", vllmtest.RefusedURL(t), "m")}})
	if res, got := plain.post(t, "/v1/chat/completions", testKey, body, map[string]string{owner.Header: good}); res.StatusCode != 403 {
		t.Fatalf("no forwarder: %d %s, want 403", res.StatusCode, got)
	}
}

// BenchmarkForwardHop is the latency one forward adds: the same sequential
// chat completion sent to the owner replica directly and through an entry
// replica that forwards it (loopback, fake router, fake vLLM answering 4
// tokens); the difference of the two rows is the hop.
//
//	go test -run '^$' -bench ForwardHop -benchtime 2000x ./api/
func BenchmarkForwardHop(b *testing.B) {
	entry, own, _, _ := ownerPair(b, "")
	for _, bc := range []struct {
		name, url string
		stream    bool
	}{
		{"direct", own.url, false}, {"forwarded", entry.url, false},
		{"direct-stream", own.url, true}, {"forwarded-stream", entry.url, true},
	} {
		body := `{"model":"m","stream":` + map[bool]string{false: "false", true: "true"}[bc.stream] + `,"messages":[{"role":"user","content":"hello there"}]}`
		b.Run(bc.name, func(b *testing.B) {
			client := &http.Client{}
			for i := 0; i < b.N; i++ {
				req, _ := http.NewRequest(http.MethodPost, bc.url+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+testKey)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
