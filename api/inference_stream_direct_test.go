package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/tenants"
)

// countingClient is an HTTP client on at most one connection that counts
// its dials.
func countingClient(dials *atomic.Int64) *http.Client {
	d := &net.Dialer{}
	return &http.Client{Transport: &http.Transport{
		MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
	}}
}

func wantWords(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("w%d", i)
	}
	return strings.Join(w, " ")
}

// Streams written straight to the connection keep it alive: on one
// connection, streams, a non-streamed completion and a model listing
// follow each other, each stream whole and in order, every completion
// metered once. (The client reads every body to its end: the OpenAI SDK
// stops reading a stream at [DONE], and Go's transport drops a connection
// whose body was closed before its last chunk arrived.)
func TestDirectStreamKeepsConnection(t *testing.T) {
	const tokens = 40
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: tokens})
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	var dials atomic.Int64
	hc := countingClient(&dials)
	before := e.srv.resumer.streams.Load()
	send := func(method, path, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d %v %q", method, path, resp.StatusCode, err, b)
		}
		return resp, string(b)
	}
	want := wantWords(tokens)
	stream := func(usage bool) {
		t.Helper()
		body := `{"model":"auto","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		if usage {
			body = `{"model":"auto","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
		}
		resp, b := send(http.MethodPost, "/v1/chat/completions", body)
		if resp.Header.Get("Content-Type") != "text/event-stream" || !strings.HasSuffix(b, "data: [DONE]\n\n") {
			t.Fatalf("stream: %v %q", resp.Header, b)
		}
		var text strings.Builder
		gotUsage := false
		for _, ev := range strings.Split(strings.TrimSuffix(b, "data: [DONE]\n\n"), "\n\n") {
			var ch openai.ChatCompletionChunk
			if err := ch.UnmarshalJSON([]byte(strings.TrimPrefix(ev, "data: "))); err != nil {
				if strings.TrimSpace(ev) == "" {
					continue
				}
				t.Fatalf("event %q: %v", ev, err)
			}
			if len(ch.Choices) > 0 {
				text.WriteString(ch.Choices[0].Delta.Content)
			}
			gotUsage = gotUsage || ch.Usage.CompletionTokens == tokens
		}
		if text.String() != want {
			t.Fatalf("stream text %q, want %q", text.String(), want)
		}
		if usage != gotUsage {
			t.Errorf("usage chunk seen %v, asked for %v", gotUsage, usage)
		}
	}
	stream(false)
	stream(true)
	if _, b := send(http.MethodPost, "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`); !strings.Contains(b, want) {
		t.Fatalf("non-streamed completion after streams: %q", b)
	}
	stream(false)
	send(http.MethodGet, "/v1/models", "")
	if n := dials.Load(); n != 1 {
		t.Errorf("%d connections dialled for five requests, want 1 (keep-alive lost after a stream)", n)
	}
	// The third stream follows a non-streamed completion on the
	// connection (the second request since the hand-back), so it takes
	// fasthttp's body writer (directEligible): 2 direct streams.
	if n := e.srv.resumer.streams.Load() - before; n != 2 {
		t.Errorf("%d streams written straight to the connection, want 2", n)
	}
	e.router.Settled(t)
	var evs []billing.UsageEvent
	testwait.Until(t, "4 usage events", func() bool { evs = e.meter.events(); return len(evs) >= 4 })
	if len(evs) != 4 {
		t.Fatalf("%d usage events for 4 completions", len(evs))
	}
	for _, ev := range evs {
		if ev.OutputTokens != tokens || ev.Status != "ok" {
			t.Errorf("event %s: %d tokens, status %q", ev.RequestID, ev.OutputTokens, ev.Status)
		}
	}
}

// rawPost is an HTTP/1.1 request for a raw connection.
func rawPost(path, body, extra string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testKey +
		"\r\nContent-Type: application/json\r\n" + extra + "Content-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
}

const streamBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// readStream reads one streamed response from br and checks it is a
// whole SSE stream.
func readStream(t *testing.T, br *bufio.Reader) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the stream's response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the stream's body: %v", err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Fatalf("stream: %d %v %q", resp.StatusCode, resp.Header, b)
	}
	return resp
}

// rawStreamEnv is a gateway in front of a fake vLLM streaming 5 tokens,
// and one raw connection to it (closed at the end of the test).
func rawStreamEnv(t *testing.T) (*infEnv, net.Conn) {
	t.Helper()
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 5})
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	return e, conn
}

// A request pipelined behind a stream on the same connection (its bytes
// already read by fasthttp when the stream is hijacked) is answered after
// the stream, in order, and the connection goes on serving.
func TestDirectStreamPipelinedRequest(t *testing.T) {
	e, conn := rawStreamEnv(t)
	before := e.srv.resumer.streams.Load()
	if _, err := io.WriteString(conn, rawPost("/v1/chat/completions", streamBody, "")+"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	readStream(t, br)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the pipelined request's answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("pipelined /healthz: %d", resp.StatusCode)
	}
	// And again: a stream on the connection served on after the first. It
	// is the second request since the hand-back (after /healthz), so it
	// takes fasthttp's body writer (directEligible): 1 direct stream.
	if _, err := io.WriteString(conn, rawPost("/v1/chat/completions", streamBody, "")); err != nil {
		t.Fatal(err)
	}
	readStream(t, br)
	if n := e.srv.resumer.streams.Load() - before; n != 1 {
		t.Errorf("%d streams written straight to the connection, want 1", n)
	}
}

// A stream pipelined behind another request (whose answer fasthttp holds
// unflushed while a further request is buffered) is answered after it, in
// order: it is not written straight to the connection.
func TestStreamPipelinedBehindARequestKeepsOrder(t *testing.T) {
	e, conn := rawStreamEnv(t)
	before := e.srv.resumer.streams.Load()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"+rawPost("/v1/chat/completions", streamBody, "")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the first answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") == "text/event-stream" {
		t.Fatalf("the first answer on the connection is %d %q, want /healthz's", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	readStream(t, br)
	if n := e.srv.resumer.streams.Load() - before; n != 0 {
		t.Errorf("%d streams written straight to the connection behind a pipelined request, want 0", n)
	}
	// The connection goes on serving, and its next stream is answered too.
	if _, err := io.WriteString(conn, rawPost("/v1/chat/completions", streamBody, "")); err != nil {
		t.Fatal(err)
	}
	readStream(t, br)
}

// Requests that do not keep their connection (Connection: close, HTTP/1.0)
// are streamed through fasthttp's body writer, whole, and the connection
// is closed after them.
func TestDirectStreamNotForClosingConnections(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 5})
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	before := e.srv.resumer.streams.Load()
	for _, req := range []string{
		rawPost("/v1/chat/completions", streamBody, "Connection: close\r\n"),
		strings.Replace(rawPost("/v1/chat/completions", streamBody, ""), "HTTP/1.1", "HTTP/1.0", 1),
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		readStream(t, br)
		if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("after a closing request's stream: read %d, %v; want the connection closed", n, err)
		}
		conn.Close()
	}
	if n := e.srv.resumer.streams.Load() - before; n != 0 {
		t.Errorf("%d closing requests written straight to the connection, want 0", n)
	}
}

// A stream whose upstream fails before its first byte is answered with
// the error envelope, by fasthttp as any answer, and the connection stays
// usable.
func TestDirectStreamFailureBeforeFirstByte(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Status: http.StatusInternalServerError})
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	var dials atomic.Int64
	c := e.client(option.WithHTTPClient(countingClient(&dials)))
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "auto", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	for st.Next() {
	}
	var apiErr *openai.Error
	if err := st.Err(); err == nil || !errors.As(err, &apiErr) || apiErr.StatusCode < 500 {
		t.Fatalf("stream over a failing upstream: %v, want a 5xx API error", err)
	}
	if _, err := c.Models.List(context.Background()); err != nil {
		t.Fatalf("models after the failed stream: %v", err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d connections dialled, want 1", n)
	}
}

// hijacked is a connection read through a reader in front of it, as
// fasthttp hands a hijacked connection over.
type hijacked struct {
	net.Conn
	r io.Reader
}

func (h *hijacked) Read(b []byte) (int, error) { return h.r.Read(b) }
func (h *hijacked) UnsafeConn() net.Conn       { return h.Conn }

// reclaimConn puts the bytes fasthttp's reader held back in front of the
// connection, in order (the reader's, then a prefix left from an earlier
// reclaim, then the socket's), leaves the socket's bytes in the socket,
// and unwraps a prefixConn whose prefix is spent.
func TestReclaimConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := peer.Write([]byte("socket")); err != nil {
		t.Fatal(err)
	}
	earlier := &prefixConn{Conn: raw, pre: []byte("-prefix-")}
	br := bufio.NewReaderSize(io.MultiReader(strings.NewReader("reader"), earlier), 16)
	if _, err := br.Peek(4); err != nil { // fill the reader: it holds "reader" only
		t.Fatal(err)
	}
	got, err := reclaimConn(&hijacked{Conn: earlier, r: br}, earlier)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := got.(*prefixConn)
	if !ok || p.Conn != raw {
		t.Fatalf("reclaimed %T, want a prefixConn over the socket itself", got)
	}
	buf := make([]byte, 64)
	var all []byte
	for len(all) < len("reader-prefix-socket") {
		n, err := got.Read(buf)
		if err != nil {
			t.Fatalf("read after %q: %v", all, err)
		}
		all = append(all, buf[:n]...)
	}
	if string(all) != "reader-prefix-socket" {
		t.Fatalf("read %q, want %q", all, "reader-prefix-socket")
	}
	again, err := reclaimConn(&hijacked{Conn: got, r: got}, got)
	if err != nil || again != raw {
		t.Fatalf("reclaiming a spent prefixConn: %T %v, want the socket", again, err)
	}
	if err := raw.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if n, err := again.Read(buf); err != nil || string(buf[:n]) != "x" {
		t.Fatalf("the socket after reclaiming: %q %v", buf[:n], err)
	}
}

func TestAppendChunk(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{1, "1\r\n"}, {15, "f\r\n"}, {16, "10\r\n"}, {4096, "1000\r\n"}, {70000, "11170\r\n"}} {
		b := strings.Repeat("a", c.n)
		got := string(appendChunk([]byte("H"), []byte(b)))
		if got != "H"+c.want+b+"\r\n" {
			t.Errorf("appendChunk of %d bytes: %q…", c.n, got[:min(len(got), 12)])
		}
	}
}

// A connection resting after a stream (kept alive, no next request yet)
// does not hold up the server's shutdown: Shutdown closes it and returns
// without waiting out its context.
func TestDirectStreamRestingConnectionClosedAtShutdown(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 5})
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, rawPost("/v1/chat/completions", streamBody, "")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	readStream(t, br)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with a connection resting after a stream: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the resting connection after Shutdown: read %d, %v; want it closed by the server", n, err)
	}
}

// The body of a stream ends in the write of its [DONE] event: the OpenAI
// SDK, which stops reading at [DONE] and closes the body, has then read it
// to its end, and its connection is kept for the next stream (with the
// last chunk sent separately it dialled again for about one stream in
// five). Every stream is still metered once.
func TestDirectStreamSDKKeepsConnection(t *testing.T) {
	const streams = 30
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 8})
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	var dials atomic.Int64
	c := e.client(option.WithHTTPClient(countingClient(&dials)))
	want := wantWords(8)
	for i := range streams {
		params := openai.ChatCompletionNewParams{Model: "auto", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
		params.StreamOptions.IncludeUsage = openai.Bool(i%2 == 0)
		text, err := streamText(c.Chat.Completions.NewStreaming(context.Background(), params))
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if text != want {
			t.Fatalf("stream %d: %q, want %q", i, text, want)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d connections dialled for %d SDK streams, want 1", n, streams)
	}
	e.router.Settled(t)
	testwait.Until(t, "every stream metered", func() bool { return len(e.meter.events()) >= streams })
	if n := len(e.meter.events()); n != streams {
		t.Errorf("%d usage events for %d streams", n, streams)
	}
}
