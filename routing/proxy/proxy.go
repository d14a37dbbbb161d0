// Package proxy forwards one OpenAI-style request to the instance the
// scheduler chose and relays the answer back: the request body is rewritten
// for the instance (served model name, usage reporting on streams, the
// budget clamp on max_tokens, the upstream credential), streamed answers are
// relayed event by event without buffering, tokens are counted and TTFT/E2E
// measured, a stream is cut when the request's budget is spent, and
// failures are classified so the caller can fail over, relay an error or
// close a broken stream. See README.md.
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/routebalance/routebalance/routing"
)

// Endpoint is the path of an OpenAI API the proxy forwards to.
type Endpoint string

// The endpoints the proxy speaks.
const (
	Chat        Endpoint = "/v1/chat/completions"
	Completions Endpoint = "/v1/completions"
	// Embeddings is never streamed and takes no max_tokens clamp; its
	// answer's usage has prompt_tokens only (0 output tokens).
	Embeddings Endpoint = "/v1/embeddings"
	// Responses is OpenAI's Responses API: its clamp is max_output_tokens,
	// no stream_options are added (the final response.completed event
	// carries usage), and its stream is typed events (responses.go).
	Responses Endpoint = "/v1/responses"
	// Tokenize and Detokenize are vLLM's tokenizer endpoints (at the
	// server root): never streamed, no clamp, no usage.
	Tokenize   Endpoint = "/tokenize"
	Detokenize Endpoint = "/detokenize"
)

// Config holds the upstream client's settings. The zero value of a field
// takes its default (see Default).
type Config struct {
	// DialTimeout bounds establishing the TCP connection (default 5s).
	DialTimeout time.Duration
	// KeepAlive is the TCP keep-alive period of upstream connections
	// (default 30s).
	KeepAlive time.Duration
	// TLSHandshakeTimeout bounds the TLS handshake (default 10s).
	TLSHandshakeTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers once the request is sent (default 10m: a non-streamed answer
	// only starts when the whole generation is done).
	ResponseHeaderTimeout time.Duration
	// StreamIdleTimeout is the longest silence allowed between two events
	// of a stream before it is treated as dead (default 2m). There is no
	// limit on a stream's total duration.
	StreamIdleTimeout time.Duration
	// IdleConnTimeout closes idle keep-alive connections (default 90s).
	IdleConnTimeout time.Duration
	// MaxIdleConns caps idle keep-alive connections overall (default 1024).
	MaxIdleConns int
	// MaxIdleConnsPerHost caps idle keep-alive connections per instance
	// (default 128, so a burst of concurrent requests to one vLLM server
	// reuses its connections instead of re-dialling).
	MaxIdleConnsPerHost int
	// MaxResponseBytes caps a non-streamed response body (default 32 MiB).
	MaxResponseBytes int64
	// MaxEventBytes caps one server-sent event of a stream (default 1 MiB).
	MaxEventBytes int
	// MaxErrorBytes caps how much of an upstream error body is read
	// (default 64 KiB).
	MaxErrorBytes int64
	// DrainTimeout bounds reading the end of a stream's body after [DONE],
	// which returns the connection to the keep-alive pool (default 100ms;
	// an upstream that lingers longer loses its connection).
	DrainTimeout time.Duration
}

// Default returns the default Config.
func Default() Config {
	return Config{
		DialTimeout:           5 * time.Second,
		KeepAlive:             30 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 10 * time.Minute,
		StreamIdleTimeout:     2 * time.Minute,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   128,
		MaxResponseBytes:      32 << 20,
		MaxEventBytes:         1 << 20,
		MaxErrorBytes:         64 << 10,
		DrainTimeout:          100 * time.Millisecond,
	}
}

// withDefaults fills zero fields from Default.
func (c Config) withDefaults() Config {
	d := Default()
	if c.DialTimeout == 0 {
		c.DialTimeout = d.DialTimeout
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = d.DrainTimeout
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = d.KeepAlive
	}
	if c.TLSHandshakeTimeout == 0 {
		c.TLSHandshakeTimeout = d.TLSHandshakeTimeout
	}
	if c.ResponseHeaderTimeout == 0 {
		c.ResponseHeaderTimeout = d.ResponseHeaderTimeout
	}
	if c.StreamIdleTimeout == 0 {
		c.StreamIdleTimeout = d.StreamIdleTimeout
	}
	if c.IdleConnTimeout == 0 {
		c.IdleConnTimeout = d.IdleConnTimeout
	}
	if c.MaxIdleConns == 0 {
		c.MaxIdleConns = d.MaxIdleConns
	}
	if c.MaxIdleConnsPerHost == 0 {
		c.MaxIdleConnsPerHost = d.MaxIdleConnsPerHost
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = d.MaxResponseBytes
	}
	if c.MaxEventBytes == 0 {
		c.MaxEventBytes = d.MaxEventBytes
	}
	if c.MaxErrorBytes == 0 {
		c.MaxErrorBytes = d.MaxErrorBytes
	}
	return c
}

// Validate reports a setting that cannot work. Zero values are valid (they
// take defaults); negative ones are not.
func (c Config) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"dial_timeout", c.DialTimeout}, {"keep_alive", c.KeepAlive},
		{"tls_handshake_timeout", c.TLSHandshakeTimeout},
		{"response_header_timeout", c.ResponseHeaderTimeout},
		{"stream_idle_timeout", c.StreamIdleTimeout}, {"idle_conn_timeout", c.IdleConnTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("proxy: %s must be >= 0, got %v", d.name, d.v)
		}
	}
	if c.MaxIdleConns < 0 || c.MaxIdleConnsPerHost < 0 {
		return fmt.Errorf("proxy: idle connection limits must be >= 0")
	}
	if c.MaxResponseBytes < 0 || c.MaxEventBytes < 0 || c.MaxErrorBytes < 0 {
		return fmt.Errorf("proxy: size limits must be >= 0")
	}
	return nil
}

// Deps are the proxy's collaborators; nil fields take defaults.
type Deps struct {
	// Log receives upstream failures (default slog.Default()).
	Log *slog.Logger
	// Clock times TTFT and E2E (default the wall clock).
	Clock routing.Clock
	// Transport replaces the tuned upstream transport (tests); nil builds
	// one from Config.
	Transport http.RoundTripper
	// Control, when set, vets every address the built transport dials
	// (serve passes tenants.EndpointPolicy.DialControl, so DNS rebinding
	// cannot reach a refused address). Unused with Transport.
	Control func(network, address string, c syscall.RawConn) error
	// Propagator writes the trace context of Open's ctx into the upstream
	// request's headers, so an instance that traces joins the request's
	// trace (default W3C TraceContext: traceparent/tracestate, nothing
	// when ctx carries no valid span). An empty
	// propagation.NewCompositeTextMapPropagator() turns it off.
	Propagator propagation.TextMapPropagator
}

// Proxy is the upstream client. It is safe for concurrent use; one Proxy
// serves every tenant and instance and shares keep-alive connections.
type Proxy struct {
	cfg    Config
	log    *slog.Logger
	clock  routing.Clock
	client *http.Client
	rt     http.RoundTripper // client's transport, called directly by Open
	h1     *h1Client         // plain-HTTP instances (h1.go); nil with Deps.Transport
	prop   propagation.TextMapPropagator
}

// New returns a Proxy with a transport tuned for many long-lived streams
// to a modest set of hosts.
func New(cfg Config, deps Deps) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Clock == nil {
		deps.Clock = routing.WallClock{}
	}
	if deps.Propagator == nil {
		deps.Propagator = propagation.TraceContext{}
	}
	rt := deps.Transport
	var h1 *h1Client
	if rt == nil {
		dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: cfg.KeepAlive, Control: deps.Control}
		h1 = newH1Client(cfg, dialer.DialContext)
		rt = &http.Transport{
			Proxy:                 nil, // instances are reached directly, never via HTTP_PROXY
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			TLSHandshakeTimeout:   cfg.TLSHandshakeTimeout,
			ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
			IdleConnTimeout:       cfg.IdleConnTimeout,
			MaxIdleConns:          cfg.MaxIdleConns,
			MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerHost,
			ExpectContinueTimeout: time.Second,
			// SSE must not be transparently decompressed or buffered.
			DisableCompression: true,
		}
	}
	// No Client.Timeout: it would cut long streams; time limits are the
	// transport's per-phase timeouts and the stream idle timer.
	client := &http.Client{
		Transport: rt,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // an instance does not redirect inference calls
		},
	}
	return &Proxy{cfg: cfg, log: deps.Log, clock: deps.Clock, client: client, rt: rt, h1: h1, prop: deps.Propagator}, nil
}

// Close drops idle upstream connections.
func (p *Proxy) Close() {
	p.client.CloseIdleConnections()
	if p.h1 != nil {
		p.h1.closeIdle()
	}
}

// Call is one request to forward.
type Call struct {
	// Endpoint is the API the call goes to (Chat, Completions,
	// Embeddings, Responses, Tokenize, Detokenize).
	Endpoint Endpoint
	// Body is the client's JSON object (NewBody). Open writes the
	// instance's body from it without changing it; the "routebalance"
	// member is removed before forwarding.
	Body *Body
	// Stream tells whether the client asked for a stream.
	Stream bool
	// IncludeUsage tells whether the client itself asked for the usage
	// chunk (stream_options.include_usage); when false the proxy still
	// asks the upstream for it but does not relay it.
	IncludeUsage bool
	// MaxTokens is the clamped max_tokens to send (Decision.MaxTokens); 0
	// leaves the client's value alone.
	MaxTokens int
	// BudgetUSD stops a stream once the spend at the instance's prices
	// reaches it; 0 means no budget.
	BudgetUSD float64
	// PromptTokens is the estimated prompt size; it prices the prompt for
	// the budget and stands in for the upstream's count when the upstream
	// reports no usage.
	PromptTokens int
	// RequestID is sent upstream as X-Request-Id.
	RequestID string
}

// ErrUnreachable marks a failure before the upstream's first response
// byte (refused or reset connection, DNS or TLS failure, header timeout):
// nothing reached the client, so the request may be retried on another
// instance.
var ErrUnreachable = errors.New("upstream unreachable")

// ErrStreamBroken marks an upstream that died or stalled after its
// response had started.
var ErrStreamBroken = errors.New("upstream stream broken")

// UnreachableError is returned by Open when the upstream could not be
// reached; it matches ErrUnreachable with errors.Is.
type UnreachableError struct {
	InstanceID string
	Err        error
}

func (e *UnreachableError) Error() string {
	return "instance " + e.InstanceID + " unreachable: " + e.Err.Error()
}

// Unwrap returns the transport error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// Is matches ErrUnreachable.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnreachable }

// StatusError is an upstream answer with a non-2xx status. Message, Type,
// Param and Code come from the upstream's error body (OpenAI's envelope or
// vLLM's flat error object), or Message holds the body's text.
type StatusError struct {
	InstanceID string
	Status     int
	Message    string
	Type       string
	Param      string
	Code       string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("instance %s answered %d: %s", e.InstanceID, e.Status, e.Message)
}

// InstanceFault reports whether the instance rather than the request is
// to blame: 5xx, and 429 (the instance is overloaded).
func (e *StatusError) InstanceFault() bool {
	return e.Status >= 500 || e.Status == http.StatusTooManyRequests
}

// Open sends the call to the instance and returns once the upstream's
// response headers arrived with a 2xx status. Errors: *UnreachableError
// (retry elsewhere), *StatusError (relay it), or the context's error when
// ctx ended first. ctx governs the whole exchange: cancelling it aborts the
// upstream request, also while the Response is being relayed.
func (p *Proxy) Open(ctx context.Context, in *routing.Instance, call *Call) (*Response, error) {
	body, err := rewrite(call, in.Model)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	var resp *http.Response
	var start time.Time
	err = errH1Header
	if p.h1 != nil {
		if t := p.h1.target(in.BaseURL); t.ok {
			start = p.clock.Now()
			resp, err = p.h1.roundTrip(rctx, t, in, call, body, p.prop, ctx)
		}
	}
	if err == errH1Header { // not a plain-HTTP instance, or a header only net/http may refuse
		req, rerr := http.NewRequestWithContext(rctx, http.MethodPost, upstreamURL(in.BaseURL, call.Endpoint), bytes.NewReader(body))
		if rerr != nil {
			cancel()
			return nil, &UnreachableError{InstanceID: in.ID, Err: rerr}
		}
		setUpstreamHeader(req.Header, in, call)
		p.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
		start = p.clock.Now()
		resp, err = p.roundTrip(req)
	}
	if err != nil {
		cancel()
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("upstream call to instance %s: %w", in.ID, cerr)
		}
		p.log.Warn("upstream unreachable", slog.String("instance", in.ID), slog.String("error", err.Error()))
		return nil, &UnreachableError{InstanceID: in.ID, Err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer cancel()
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, p.cfg.MaxErrorBytes))
		se := parseUpstreamError(resp.StatusCode, raw)
		se.InstanceID = in.ID
		return nil, se
	}
	return &Response{
		Status:  resp.StatusCode,
		p:       p,
		body:    resp.Body,
		cancel:  cancel,
		stream:  call.Stream,
		usage:   call.IncludeUsage,
		chat:    call.Endpoint == Chat,
		resp:    call.Endpoint == Responses,
		budget:  call.BudgetUSD,
		prompt:  call.PromptTokens,
		priceIn: in.PriceInPerMTok, priceOut: in.PriceOutPerMTok,
		start: start,
		size:  resp.ContentLength,
	}, nil
}

// The constant header values of upstream calls, shared by every request
// (nothing modifies a request's header values in place; Header.Set
// replaces the slice).
var (
	hdrJSON = []string{"application/json"}
	hdrSSE  = []string{"text/event-stream"}
)

// setUpstreamHeader fills the (new, empty) header of an upstream call: the
// shared constants, and a slice only per header that varies.
func setUpstreamHeader(h http.Header, in *routing.Instance, call *Call) {
	h["Content-Type"] = hdrJSON
	h["Accept"] = hdrJSON
	if call.Stream {
		h["Accept"] = hdrSSE
	}
	if k := in.APIKey.Reveal(); k != "" {
		h["Authorization"] = []string{"Bearer " + k}
	}
	if call.RequestID != "" {
		h["X-Request-Id"] = []string{call.RequestID}
	}
}

// roundTrip sends req on the transport itself rather than through
// http.Client.Do: the client adds nothing an upstream call needs (no
// cookie jar, no client timeout, and redirects are never followed, as the
// client's CheckRedirect says), while Do clones the headers and the URL of
// every request for a redirect that cannot happen. Errors are wrapped in
// *url.Error as Do wraps them, so their text is unchanged; a 3xx answer
// is returned as it is, as with http.ErrUseLastResponse.
// Like Do, credentials in the URL become Basic auth unless the request
// has an Authorization header.
func (p *Proxy) roundTrip(req *http.Request) (*http.Response, error) {
	if u := req.URL.User; u != nil && req.Header.Get("Authorization") == "" {
		pass, _ := u.Password()
		req.SetBasicAuth(u.Username(), pass)
	}
	resp, err := p.rt.RoundTrip(req)
	if err != nil {
		return nil, &url.Error{Op: "Post", URL: stripPassword(req.URL), Err: err}
	}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	return resp, nil
}

// stripPassword writes u as http.Client's errors do: a password is ***.
func stripPassword(u *url.URL) string {
	if _, ok := u.User.Password(); ok {
		return strings.Replace(u.String(), u.User.String()+"@", u.User.Username()+":***@", 1)
	}
	return u.String()
}

// upstreamURL joins an instance's base URL and an endpoint. The base URL
// is the server root ("http://host:8000"); a trailing "/v1" as OpenAI
// clients write it is accepted too.
func upstreamURL(base string, ep Endpoint) string {
	base = strings.TrimRight(base, "/")
	base = strings.TrimSuffix(base, "/v1")
	return base + string(ep)
}

// rewrite returns the body to send upstream (rewriteBody).
func rewrite(call *Call, model string) ([]byte, error) {
	if call.Body == nil {
		return nil, errors.New("proxy: the call has no body")
	}
	return rewriteBody(call, model)
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// parseUpstreamError reads OpenAI's envelope {"error":{...}} or vLLM's
// flat {"object":"error","message":...}; anything else becomes the
// message verbatim.
func parseUpstreamError(status int, raw []byte) *StatusError {
	se := &StatusError{Status: status}
	var env struct {
		Error json.RawMessage `json:"error"`
		errFields
	}
	if json.Unmarshal(raw, &env) == nil {
		var inner errFields
		switch {
		case len(env.Error) > 0 && json.Unmarshal(env.Error, &inner) == nil && inner.Message != "":
			inner.fill(se)
		case len(env.Error) > 0 && env.Error[0] == '"':
			_ = json.Unmarshal(env.Error, &se.Message)
		case env.Message != "":
			env.errFields.fill(se)
		}
	}
	if se.Message == "" {
		se.Message = strings.TrimSpace(string(raw))
	}
	if se.Message == "" {
		se.Message = http.StatusText(status)
	}
	return se
}

// errFields are an upstream envelope's fields. Type is raw like Param and
// Code: a server that sends a non-string type (the fuzzer sent 0) must
// not lose the message beside it.
type errFields struct {
	Message string          `json:"message"`
	Type    json.RawMessage `json:"type"`
	Param   json.RawMessage `json:"param"`
	Code    json.RawMessage `json:"code"`
}

func (f errFields) fill(se *StatusError) {
	se.Message, se.Type = f.Message, scalar(f.Type)
	se.Param = scalar(f.Param)
	se.Code = scalar(f.Code)
}

// scalar renders a JSON string or number as text; null and others are "".
func scalar(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}
