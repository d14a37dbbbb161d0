package tenants

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/routebalance/routebalance/routing"
)

// ProbeResult is what one endpoint of a connection test answered.
type ProbeResult struct {
	OK     bool   `json:"ok"`
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

// ConnectionReport is the result of TestConnection.
type ConnectionReport struct {
	// OK is true when /health answered 200 and /v1/models listed at least
	// one model.
	OK      bool        `json:"ok"`
	BaseURL string      `json:"base_url"`
	Health  ProbeResult `json:"health"`
	Models  ProbeResult `json:"models"`
	// ModelIDs are the served model names /v1/models reported.
	ModelIDs []string `json:"model_ids"`
	// ModelKinds are the kinds ("chat" or "embedding") the server states
	// for its models, only for those whose /v1/models entry says
	// (probe_kind.go); vLLM's entries do not, so register a vLLM
	// embedding instance with kind "embedding".
	ModelKinds map[string]routing.Kind `json:"model_kinds"`
	// Kind is the kind to register with when every listed model's entry
	// states the same one, else empty.
	Kind      routing.Kind `json:"kind,omitempty"`
	LatencyMs float64      `json:"latency_ms"`
}

// TestConnection checks that a vLLM-compatible server answers at baseURL:
// GET /health and GET /v1/models (with apiKey as a bearer token when
// given). The URL passes the endpoint policy first, and the dialer enforces
// it again on the address actually connected (DNS rebinding included).
// Redirects are not followed: a 3xx is reported as a failed probe, so the
// key is sent to the registered host:port only. Each probe is bounded by 5 s; failures are reported in the
// result, not as an error, except a URL the policy refuses.
func (s *Service) TestConnection(ctx context.Context, baseURL, apiKey string) (ConnectionReport, error) {
	u, err := s.endpoints.CheckURL(ctx, "base_url", baseURL)
	if err != nil {
		return ConnectionReport{}, err
	}
	if apiKey != "" {
		if err := checkUpstreamKey("api_key", apiKey); err != nil {
			return ConnectionReport{}, err
		}
	}
	client := s.probeClient()
	defer client.CloseIdleConnections()
	rep := ConnectionReport{BaseURL: u, ModelIDs: []string{}, ModelKinds: map[string]routing.Kind{}}
	start := time.Now()
	get := func(path string) (ProbeResult, []byte) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+path, nil)
		if err != nil {
			return ProbeResult{Error: err.Error()}, nil
		}
		if apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
		resp, err := client.Do(req)
		if err != nil {
			return ProbeResult{Error: err.Error()}, nil
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		r := ProbeResult{Status: resp.StatusCode, OK: resp.StatusCode == http.StatusOK}
		if err != nil {
			r.OK, r.Error = false, err.Error()
		} else if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			r.Error = fmt.Sprintf("%s answered %d (a redirect to %q; redirects are not followed, register the final URL)", path, resp.StatusCode, resp.Header.Get("Location"))
		} else if !r.OK {
			r.Error = fmt.Sprintf("%s answered %d", path, resp.StatusCode)
		}
		return r, body
	}
	rep.Health, _ = get("/health")
	var body []byte
	rep.Models, body = get("/v1/models")
	if rep.Models.OK {
		var list struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		var cards struct {
			Data []json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			rep.Models.OK, rep.Models.Error = false, "/v1/models is not an OpenAI model list: "+err.Error()
		} else if json.Unmarshal(body, &cards) == nil {
			rep.ModelKinds, rep.Kind = modelKinds(cards.Data)
		}
		for _, m := range list.Data {
			rep.ModelIDs = append(rep.ModelIDs, m.ID)
		}
		if rep.Models.OK && len(rep.ModelIDs) == 0 {
			rep.Models.OK, rep.Models.Error = false, "/v1/models lists no models"
		}
	}
	rep.LatencyMs = float64(time.Since(start).Microseconds()) / 1000
	rep.OK = rep.Health.OK && rep.Models.OK
	return rep, nil
}

func (s *Service) probeClient() *http.Client {
	d := &net.Dialer{Timeout: 3 * time.Second, Control: s.endpoints.DialControl}
	return &http.Client{
		Transport: &http.Transport{DialContext: d.DialContext, Proxy: nil, TLSHandshakeTimeout: 3 * time.Second, MaxIdleConns: 2},
		// Redirects are never followed (the proxy refuses them too): the
		// upstream key must reach only the host:port the tenant registered,
		// and a redirect is not what routing would get either.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
