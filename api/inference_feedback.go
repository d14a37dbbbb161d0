package api

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/routing"
)

// servedRequest is what feedback needs to know about a recent request.
type servedRequest struct {
	tenantID  string
	clusterID string
	model     string
	prompt    string
	memo      uint64 // the decision's estimate handle (Decision.EstimateMemo)
	scored    bool   // feedback was recorded (claim)
}

// recentRequests remembers the last n requests that reached an instance,
// so a later quality score can be tied to the prompt and the model that
// answered. Memory is bounded by n × promptBytes. Safe for concurrent use.
type recentRequests struct {
	mu          sync.Mutex
	n           int
	promptBytes int
	byID        map[string]servedRequest
	ring        []string
	next        int
}

func newRecentRequests(n, promptBytes int) *recentRequests {
	return &recentRequests{n: n, promptBytes: promptBytes, byID: make(map[string]servedRequest, n), ring: make([]string, n)}
}

func (r *recentRequests) add(id string, s servedRequest) {
	if len(s.prompt) > r.promptBytes {
		cut := r.promptBytes
		for cut > 0 && !utf8.RuneStart(s.prompt[cut]) {
			cut--
		}
		s.prompt = s.prompt[:cut]
	}
	s.prompt = strings.Clone(s.prompt)
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.ring[r.next]; old != "" {
		delete(r.byID, old)
	}
	r.ring[r.next] = id
	r.next = (r.next + 1) % r.n
	r.byID[id] = s
}

func (r *recentRequests) get(id string) (servedRequest, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.byID[id]
	return s, ok
}

// claim returns tenantID's request id for scoring, once: found is false
// for an unknown id or another tenant's, again true for one already
// claimed (each request's answer is one label).
func (r *recentRequests) claim(id, tenantID string) (s servedRequest, found, again bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.byID[id]
	if !ok || s.tenantID != tenantID {
		return servedRequest{}, false, false
	}
	if s.scored {
		return s, true, true
	}
	s.scored = true
	r.byID[id] = s
	return s, true, false
}

// remember keeps a request for feedback when a QualityObserver is wired.
func (h *inference) remember(x *exchange, a *routing.Assignment) {
	if h.recent == nil || x.body.prompt == "" {
		return
	}
	clusterID := ""
	if x.cluster != nil {
		clusterID = x.cluster.ID
	}
	h.recent.add(x.id, servedRequest{tenantID: x.p.Tenant.ID, clusterID: clusterID, model: a.Instance.Model, prompt: x.body.prompt,
		memo: a.Decision.EstimateMemo})
}

// feedback serves POST /v1/feedback {"request_id": "...", "score": 0..1}:
// a client's quality score for a request it made recently (the last
// InferenceConfig.FeedbackWindow requests of the server). The score is
// handed to the QualityObserver with the request's prompt and the model
// that answered: for the cluster that served it when the observer keeps
// per-cluster data (ClusterQualityObserver), else, to a
// MemoQualityObserver, with the memo of the request's decision, so the
// estimator does not embed the prompt again while it still holds that
// estimate. Without an observer the server answers 501; a request id that
// is unknown, too old or another tenant's is 404; a second score for one
// request is 409 (the first one counts).
func (h *inference) feedback(c *fiber.Ctx) error {
	p, err := h.authenticate(c.UserContext(), c)
	if p == nil {
		return err
	}
	// The request was remembered by the replica that decided it: the
	// owner of the key's cluster (inference_forward.go).
	if cl, ok := p.RoutingCluster(); ok {
		x := &exchange{h: h, c: c, id: requestIDOf(c), p: p, cluster: cl}
		if handled, _, err := h.deps.Forward.step(c.UserContext(), x, func() {}); handled {
			return err
		}
	}
	if h.deps.Quality == nil {
		return sendError(c, http.StatusNotImplemented, typeInvalidRequest, "feedback_disabled", "",
			"quality feedback is not enabled on this server")
	}
	var in struct {
		RequestID *string  `json:"request_id"`
		Score     *float64 `json:"score"`
	}
	if err := json.Unmarshal(c.BodyRaw(), &in); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return sendError(c, http.StatusBadRequest, typeInvalidRequest, "", te.Field, te.Field+" has the wrong type")
		}
		return sendError(c, http.StatusBadRequest, typeInvalidRequest, "", "", "could not parse the JSON body: "+jsonErrText(err))
	}
	if in.RequestID == nil || *in.RequestID == "" {
		return sendError(c, http.StatusBadRequest, typeInvalidRequest, "", "request_id", "you must provide a request_id (the X-Request-Id of the response)")
	}
	if in.Score == nil || math.IsNaN(*in.Score) || *in.Score < 0 || *in.Score > 1 {
		return sendError(c, http.StatusBadRequest, typeInvalidRequest, "", "score", "score must be a number in [0, 1]")
	}
	s, ok, again := h.recent.claim(*in.RequestID, p.Tenant.ID)
	if !ok {
		return sendError(c, http.StatusNotFound, typeInvalidRequest, "request_not_found", "request_id",
			"no recent request with this id (feedback is accepted for recent requests of your tenant only)")
	}
	if again {
		return sendError(c, http.StatusConflict, typeInvalidRequest, "feedback_already_recorded", "request_id",
			"this request's feedback is already recorded (one score per request)")
	}
	if co, ok := h.deps.Quality.(ClusterQualityObserver); ok && s.clusterID != "" {
		co.ObserveClusterQuality(s.clusterID, s.prompt, s.model, *in.Score)
	} else if mo, ok := h.deps.Quality.(MemoQualityObserver); ok {
		mo.ObserveQualityMemo(s.memo, s.prompt, s.model, *in.Score)
	} else {
		h.deps.Quality.ObserveQuality(s.prompt, s.model, *in.Score)
	}
	return c.JSON(fiber.Map{"object": "feedback", "request_id": *in.RequestID, "model": s.model, "score": *in.Score})
}
