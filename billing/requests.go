package billing

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"
)

// Request log limits.
const (
	// DefaultRequestLimit is the page size when RequestQuery.Limit is 0.
	DefaultRequestLimit = 50
	// MaxRequestLimit is the largest page a RequestQuery may ask for.
	MaxRequestLimit = 500
)

// Statuses a usage event (and a RequestQuery.Status filter) may have.
var requestStatuses = map[string]bool{"ok": true, "error": true, "cancelled": true, "budget": true, "cached": true}

// RequestQuery selects one page of a tenant's request log: ledger rows
// that started in [From, To), newest first, optionally of one model, key
// or status, continuing after Cursor (a RequestPage.NextCursor).
type RequestQuery struct {
	TenantID string
	From, To time.Time
	Model    string
	KeyID    string
	Status   string
	// ClusterID keeps one cluster's requests ("" = all).
	ClusterID string
	Cursor    string
	Limit     int
}

// Validate reports a missing tenant, an empty range, an unknown status, a
// malformed cursor or a limit out of range; it fills the default limit.
func (q *RequestQuery) Validate() error {
	switch {
	case q.TenantID == "":
		return fmt.Errorf("%w: tenant is required", ErrInvalid)
	case !q.From.Before(q.To):
		return fmt.Errorf("%w: from must be before to", ErrInvalid)
	case q.Status != "" && !requestStatuses[q.Status]:
		return fmt.Errorf("%w: status must be ok, error, cancelled or budget", ErrInvalid)
	case q.Limit < 0 || q.Limit > MaxRequestLimit:
		return fmt.Errorf("%w: limit must be 1 to %d", ErrInvalid, MaxRequestLimit)
	}
	if q.Limit == 0 {
		q.Limit = DefaultRequestLimit
	}
	if q.Cursor != "" {
		if _, _, err := DecodeCursor(q.Cursor); err != nil {
			return err
		}
	}
	return nil
}

// RequestRow is one request of the log: what was asked, where it went,
// what it cost and why it was routed there.
type RequestRow struct {
	ID         string    `json:"id"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	KeyID      string    `json:"key_id"`
	// KeyName is filled by the API from the tenant's keys ("" when deleted).
	KeyName      string  `json:"key_name"`
	ClusterID    string  `json:"cluster_id"`
	Model        string  `json:"model"`
	InstanceID   string  `json:"instance_id"`
	Policy       string  `json:"policy"`
	Status       string  `json:"status"`
	HTTPStatus   int     `json:"http_status"`
	PromptTokens int64   `json:"prompt_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	TTFTMs       float64 `json:"ttft_ms"`
	E2EMs        float64 `json:"e2e_ms"`
	// Cost and Billed are the request's amounts in nano-USD (exact);
	// CostUSD and BilledUSD the same in dollars (set by SetMoney).
	Cost             Nano     `json:"cost_nano_usd"`
	Billed           Nano     `json:"billed_nano_usd"`
	CostUSD          float64  `json:"cost_usd"`
	BilledUSD        float64  `json:"billed_usd"`
	PredictedQuality float64  `json:"predicted_quality"`
	PredictedE2EMs   float64  `json:"predicted_e2e_ms"`
	Preset           string   `json:"preset"`
	Weights          *Weights `json:"weights"`
	Relaxed          []string `json:"relaxed"`
	Attempts         int      `json:"attempts"`
}

// SetMoney sets the row's amounts in Nano and their dollar fields.
func (r *RequestRow) SetMoney(cost, billed Nano) {
	r.Cost, r.Billed = cost, billed
	r.CostUSD, r.BilledUSD = cost.USD(), billed.USD()
}

// RequestPage is one page of the log; NextCursor is "" on the last page.
type RequestPage struct {
	Rows       []RequestRow
	NextCursor string
}

// EncodeCursor is the opaque position after the row started at t with id.
func EncodeCursor(t time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(t.UTC().Format(time.RFC3339Nano) + "|" + id))
}

// DecodeCursor reads a cursor made by EncodeCursor.
func DecodeCursor(c string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("%w: cursor is not one this server issued", ErrInvalid)
	}
	ts, id, ok := strings.Cut(string(b), "|")
	if !ok || id == "" {
		return time.Time{}, "", fmt.Errorf("%w: cursor is not one this server issued", ErrInvalid)
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("%w: cursor is not one this server issued", ErrInvalid)
	}
	return t, id, nil
}

// JoinRelaxed is the stored form of UsageEvent.Relaxed (comma-separated).
func JoinRelaxed(r []string) string { return strings.Join(r, ",") }

// SplitRelaxed reads JoinRelaxed's form; "" is an empty list.
func SplitRelaxed(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}

// WeightsOrNil returns nil for the zero vector (not recorded).
func WeightsOrNil(q, c, l float64) *Weights {
	if q == 0 && c == 0 && l == 0 {
		return nil
	}
	return &Weights{Quality: q, Cost: c, Latency: l}
}

// PageOf trims rows fetched with limit+1 to limit and sets the cursor.
func PageOf(rows []RequestRow, limit int) RequestPage {
	if rows == nil {
		rows = []RequestRow{}
	}
	if len(rows) <= limit {
		return RequestPage{Rows: rows}
	}
	rows = rows[:limit]
	last := rows[len(rows)-1]
	return RequestPage{Rows: rows, NextCursor: EncodeCursor(last.StartedAt, last.ID)}
}
