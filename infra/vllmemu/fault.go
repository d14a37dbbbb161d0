package vllmemu

import (
	"fmt"
	"math"
)

// Fault is the failure behaviour injected into one instance.
type Fault struct {
	// ErrorRate is the probability in [0,1] that a generation request is
	// answered at once with ErrorStatus instead of being served.
	ErrorRate float64 `json:"error_rate"`
	// ErrorStatus is the status of injected errors: 500–599 (default 503).
	ErrorStatus int `json:"error_status"`
	// StallMs delays every generation request by this much world time
	// before it reaches the engine (scaled like everything else).
	StallMs float64 `json:"stall_ms"`
	// Dead makes the instance drop every connection: in-flight requests
	// are cut off mid-response and new ones are closed without an answer
	// (only /admin/fault still answers, so the instance can be revived).
	Dead bool `json:"dead"`
}

// FaultPatch changes some fields of a Fault; nil fields stay as they are.
// It is the body of POST /admin/fault.
type FaultPatch struct {
	ErrorRate   *float64 `json:"error_rate"`
	ErrorStatus *int     `json:"error_status"`
	StallMs     *float64 `json:"stall_ms"`
	Dead        *bool    `json:"dead"`
}

// Apply returns f with p's fields set.
func (p FaultPatch) Apply(f Fault) Fault {
	if p.ErrorRate != nil {
		f.ErrorRate = *p.ErrorRate
	}
	if p.ErrorStatus != nil {
		f.ErrorStatus = *p.ErrorStatus
	}
	if p.StallMs != nil {
		f.StallMs = *p.StallMs
	}
	if p.Dead != nil {
		f.Dead = *p.Dead
	}
	return f
}

// Validate checks the ranges.
func (f Fault) Validate() error {
	if math.IsNaN(f.ErrorRate) || f.ErrorRate < 0 || f.ErrorRate > 1 {
		return fmt.Errorf("error_rate must be in [0,1], got %v", f.ErrorRate)
	}
	if f.ErrorStatus != 0 && (f.ErrorStatus < 500 || f.ErrorStatus > 599) {
		return fmt.Errorf("error_status must be a 5xx status, got %d", f.ErrorStatus)
	}
	if math.IsNaN(f.StallMs) || math.IsInf(f.StallMs, 0) || f.StallMs < 0 {
		return fmt.Errorf("stall_ms must be a number >= 0, got %v", f.StallMs)
	}
	return nil
}

func (f Fault) status() int {
	if f.ErrorStatus == 0 {
		return 503
	}
	return f.ErrorStatus
}
