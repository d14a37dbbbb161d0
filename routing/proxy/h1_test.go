package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
)

// rawUpstream is a loopback TCP server that reads each request (headers
// and a Content-Length body) and answers it with answer(n) for the n-th
// request on the whole server (from 1); close(n) tells whether to close
// the connection after that answer.
type rawUpstream struct {
	ln       net.Listener
	requests atomic.Int64
	conns    atomic.Int64
	mu       sync.Mutex
	seen     []*http.Request
}

func newRawUpstream(t *testing.T, answer func(n int64) string, closeAfter func(n int64) bool) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					req.Body = io.NopCloser(bytes.NewReader(body))
					n := u.requests.Add(1)
					u.mu.Lock()
					u.seen = append(u.seen, req)
					u.mu.Unlock()
					if _, err := io.WriteString(c, answer(n)); err != nil || closeAfter(n) {
						return
					}
				}
			}()
		}
	}()
	return u
}

func (u *rawUpstream) URL() string { return "http://" + u.ln.Addr().String() }

const okChat = `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

func httpAnswer(body string, extra string) string {
	return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// chatCall is a non-streamed chat call.
func chatCall(t *testing.T) *Call {
	return &Call{Endpoint: Chat, PromptTokens: 3, RequestID: "req-1",
		Body: rawBody(t, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`)}
}

// TestPlainClientReusesItsConnection: sequential non-streamed calls to a
// plain-HTTP instance share one connection, each is metered from its own
// usage, and the request carries the headers net/http sent.
func TestPlainClientReusesItsConnection(t *testing.T) {
	up := newRawUpstream(t, func(int64) string { return httpAnswer(okChat, "") }, func(int64) bool { return false })
	p := newProxy(t, Config{})
	in := instance(up.URL())
	for i := 0; i < 4; i++ {
		resp, err := p.Open(context.Background(), in, chatCall(t))
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		res := resp.Relay(context.Background(), rec, nil)
		if res.Status != ResultOK || !res.UsageReported || res.Outcome.OutputTokens != 1 || rec.String() != okChat {
			t.Fatalf("call %d: %+v, body %q", i, res, rec.String())
		}
	}
	if n := up.conns.Load(); n != 1 {
		t.Errorf("4 sequential calls used %d connections, want 1", n)
	}
	up.mu.Lock()
	r := up.seen[0]
	up.mu.Unlock()
	for k, want := range map[string]string{"Content-Type": "application/json", "Accept": "application/json",
		"X-Request-Id": "req-1", "User-Agent": "Go-http-client/1.1"} {
		if got := r.Header.Get(k); got != want {
			t.Errorf("upstream header %s = %q, want %q", k, got, want)
		}
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" || r.Host != strings.TrimPrefix(up.URL(), "http://") {
		t.Errorf("request line %s %s host %s", r.Method, r.URL.Path, r.Host)
	}
}

// TestPlainClientDropsAConnectionTheInstanceClosed: an instance that
// closes its side after an answer (idle timeout, restart) costs no
// failed call: the next one goes on a new connection, sent once.
func TestPlainClientDropsAConnectionTheInstanceClosed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra string
		close bool
	}{
		{"closed silently", "", true},
		{"Connection: close", "Connection: close\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newRawUpstream(t, func(int64) string { return httpAnswer(okChat, tc.extra) }, func(int64) bool { return tc.close })
			p := newProxy(t, Config{})
			in := instance(up.URL())
			for i := 0; i < 3; i++ {
				resp, err := p.Open(context.Background(), in, chatCall(t))
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if res := resp.Relay(context.Background(), &recorder{}, nil); res.Status != ResultOK {
					t.Fatalf("call %d: %+v", i, res)
				}
				// the instance's close reaches the pooled connection before the
				// next call (else that call would be written to it and fail)
				testwait.Until(t, "the instance's close to reach the pooled connection", func() bool { return connClosed(p, in.BaseURL) })
			}
			if n := up.requests.Load(); n != 3 {
				t.Errorf("the instance saw %d requests, want 3 (none resent)", n)
			}
			if n := up.conns.Load(); n != 3 {
				t.Errorf("%d connections, want 3 (one per answer)", n)
			}
		})
	}
}

// connClosed reports whether the pool holds no live connection to base.
func connClosed(p *Proxy, base string) bool {
	t := p.h1.target(base)
	p.h1.mu.Lock()
	defer p.h1.mu.Unlock()
	for _, c := range p.h1.idle[t.addr] {
		if h1Alive(c.c) {
			return false
		}
	}
	return true
}

// TestPlainClientNeverPoolsAnUnfinishedBody: a body closed before its end
// (a cancelled stream, an error answer read in part) closes the
// connection; the next call gets a fresh one and a whole answer.
func TestPlainClientNeverPoolsAnUnfinishedBody(t *testing.T) {
	// The stream stalls after 5 tokens until the client goes away, so the
	// cancel is the only way it can end (with all 50 tokens sent at once,
	// the relay could read the whole answer before seeing the cancel).
	up := vllmtest.New(t, vllmtest.Config{Tokens: 50, StallAfter: 5})
	p := newProxy(t, Config{})
	in := instance(up.URL)
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := p.Open(ctx, in, &Call{Endpoint: Chat, Stream: true, Body: rawBody(t, `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if res := resp.Relay(ctx, &recorder{}, nil); res.Status != ResultCancelled {
		t.Fatalf("cancelled stream: %+v", res)
	}
	resp, err = p.Open(context.Background(), in, chatCall(t))
	if err != nil {
		t.Fatal(err)
	}
	if res := resp.Relay(context.Background(), &recorder{}, nil); res.Status != ResultOK || !res.UsageReported {
		t.Fatalf("next call: %+v", res)
	}
	if n := up.Conns(); n != 2 {
		t.Errorf("%d connections, want 2 (the cancelled one not reused)", n)
	}
}

// TestPlainClientHeaderTimeout: an instance that accepts the request but
// sends no headers within ResponseHeaderTimeout is unreachable, as with
// net/http.
func TestPlainClientHeaderTimeout(t *testing.T) {
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
			go func() { _, _ = io.Copy(io.Discard, c) }() // reads, never answers
		}
	}()
	p := newProxy(t, Config{ResponseHeaderTimeout: 30 * time.Millisecond})
	_, err = p.Open(context.Background(), instance("http://"+ln.Addr().String()), chatCall(t))
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Fatalf("err %v, want unreachable after the header timeout", err)
	}
}

// TestPlainClientBoundsResponseHeaders: an instance whose response headers
// (1xx answers included) run past maxH1HeaderBytes is unreachable, its
// connection closed, the next call on a new one; headers of 64 KiB still
// pass, and the limit does not reach the body read after them.
func TestPlainClientBoundsResponseHeaders(t *testing.T) {
	big := "X-Big: " + strings.Repeat("a", 2*maxH1HeaderBytes) + "\r\n"
	many := strings.Repeat("HTTP/1.1 100 Continue\r\nX-Pad: "+strings.Repeat("b", 64<<10)+"\r\n\r\n", 20)
	wide := "X-Wide: " + strings.Repeat("c", 64<<10) + "\r\n"
	longBody := `{"pad":"` + strings.Repeat("d", 2*maxH1HeaderBytes) + `",` + okChat[1:]
	up := newRawUpstream(t, func(n int64) string {
		switch n {
		case 1:
			return httpAnswer(okChat, big)
		case 2:
			return many + httpAnswer(okChat, "")
		case 3:
			return httpAnswer(okChat, wide)
		default:
			return httpAnswer(longBody, "")
		}
	}, func(int64) bool { return false })
	p := newProxy(t, Config{})
	in := instance(up.URL())
	for i, name := range []string{"one 2 MiB header", "20 informational answers of 64 KiB"} {
		_, err := p.Open(context.Background(), in, chatCall(t))
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "exceed 1 MiB") {
			t.Fatalf("call %d (%s): err %v, want unreachable, headers too large", i+1, name, err)
		}
	}
	for i, want := range []string{okChat, longBody} {
		resp, err := p.Open(context.Background(), in, chatCall(t))
		if err != nil {
			t.Fatalf("call %d: %v", i+3, err)
		}
		rec := &recorder{}
		res := resp.Relay(context.Background(), rec, nil)
		if res.Status != ResultOK || !res.UsageReported || rec.String() != want {
			t.Fatalf("call %d: %+v, body of %d bytes, want %d", i+3, res, len(rec.String()), len(want))
		}
	}
	if n := up.conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3 (one per refused answer, then one shared by the two good calls)", n)
	}
}

// FuzzPlainClientAnswer: whatever bytes an instance answers with, Open
// and Relay end without a panic, a non-2xx or broken answer is an error,
// and a call after it gets a whole answer (no connection left mid-answer
// in the pool).
func FuzzPlainClientAnswer(f *testing.F) {
	for _, s := range []string{
		httpAnswer(okChat, ""),
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",
		"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 100 Continue\r\n\r\n" + httpAnswer(okChat, ""),
		"HTTP/1.0 200 OK\r\n\r\n" + okChat,
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"garbage\r\n\r\n", "", "HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n1a\r\ndata: {\"choices\":[]}\n\n\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		first := true
		var mu sync.Mutex
		up := newRawUpstream(t, func(int64) string {
			mu.Lock()
			defer mu.Unlock()
			if first {
				first = false
				return string(raw)
			}
			return httpAnswer(okChat, "")
		}, func(int64) bool { return false })
		// The first call is bounded by its context; the second, which must
		// succeed, only by testwait.Bound, so a loaded machine cannot fail it.
		p := newProxy(t, Config{ResponseHeaderTimeout: testwait.Bound})
		in := instance(up.URL())
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel() // a body shorter than announced waits for the request's end
		if resp, err := p.Open(ctx, in, chatCall(t)); err == nil {
			resp.Relay(ctx, &recorder{}, nil)
		}
		resp, err := p.Open(context.Background(), in, chatCall(t))
		if err != nil {
			t.Fatalf("the call after %q: %v", raw, err)
		}
		rec := &recorder{}
		if res := resp.Relay(context.Background(), rec, nil); res.Status != ResultOK || rec.String() != okChat {
			t.Fatalf("the call after %q: %+v, body %q", raw, res, rec.String())
		}
	})
}
