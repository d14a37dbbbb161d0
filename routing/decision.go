package routing

import (
	"sync"
	"time"
)

// Decision is what the scheduler chose for one request and why.
type Decision struct {
	Instance Instance
	Policy   string
	// BatchSize is the size of the batch the request was scheduled in.
	BatchSize int
	// DecisionTime is the scheduler's compute time for the request's batch.
	DecisionTime time.Duration
	// EstimateTime is the part of DecisionTime spent estimating the
	// batch's prompts (the rest is snapshot, ordering and scoring).
	EstimateTime time.Duration
	// QueueWait is how long the request waited for admission on its
	// instance after the decision.
	QueueWait time.Duration
	// Predictions for the chosen instance.
	PredictedQuality      float64
	PredictedE2E          time.Duration
	PredictedTTFT         time.Duration
	PredictedCostUSD      float64
	PredictedOutputTokens float64
	// MaxTokens is the max_tokens to send upstream after the budget clamp;
	// 0 leaves the client's value (or its absence) alone.
	MaxTokens int
	// Relaxed lists the filters that had to be relaxed, in order, because
	// no candidate passed them (e.g. "ttft", "tpot", "quality", "budget").
	Relaxed []string
	// QualitySource says where the chosen model's quality estimate came
	// from.
	QualitySource EstimateSource
	// EstimateMemo is the estimator's handle of this request's estimate
	// (PromptEstimate.Memo): learning from the outcome or from feedback
	// passes it back so the prompt is not embedded or searched again.
	EstimateMemo uint64
}

// Outcome is what happened to a request on its instance; the proxy reports
// it so fleet state and the estimators learn from it.
type Outcome struct {
	PromptTokens int
	OutputTokens int
	// TTFT and E2E are measured from when the proxy sent the request
	// upstream (so they exclude the router's queue wait, which is in
	// Decision.QueueWait). TTFT is zero when no first token was observed
	// apart from the whole answer — a non-streamed request — and then
	// says nothing about time to first token.
	TTFT time.Duration
	E2E  time.Duration
	// Err is non-nil when the request failed; Upstream tells whether the
	// instance itself is to blame (connection error, 5xx) rather than the
	// client (cancel, bad request).
	Err      error
	Upstream bool
	// Truncated reports that the output was cut short — by max_tokens
	// (finish_reason "length") or by the request's budget — so
	// OutputTokens is a lower bound of the model's natural length, not a
	// sample of it.
	Truncated bool
}

// Assignment is a granted slot on one instance. Its holder must call
// Release exactly once when the request is over, on every path; calls after
// the first do nothing, so a deferred Release is always safe.
type Assignment struct {
	Decision
	once    sync.Once
	release func(Outcome)
	// progress, when set, receives the running count of streamed output
	// tokens so dead reckoning can be corrected mid-stream.
	progress func(tokens int)
}

// NewAssignment returns an Assignment that calls release once on Release
// and progress (may be nil) on Progress.
func NewAssignment(d Decision, release func(Outcome), progress func(tokens int)) *Assignment {
	return &Assignment{Decision: d, release: release, progress: progress}
}

// Release reports the outcome and frees the slot. Safe to call many times
// and from any goroutine; only the first call counts.
func (a *Assignment) Release(o Outcome) {
	a.once.Do(func() {
		if a.release != nil {
			a.release(o)
		}
	})
}

// Progress reports the tokens streamed so far. Safe for concurrent use.
func (a *Assignment) Progress(tokens int) {
	if a.progress != nil {
		a.progress(tokens)
	}
}
