package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/routebalance/routebalance/billing"
)

// Requests returns one page of the tenant's request log, newest first
// (started_at, then request id, descending), with the query's filters.
func (s *Store) Requests(ctx context.Context, q billing.RequestQuery) (billing.RequestPage, error) {
	if err := q.Validate(); err != nil {
		return billing.RequestPage{}, err
	}
	where := []string{"tenant_id = $1", "started_at >= $2", "started_at < $3"}
	args := []any{q.TenantID, q.From, q.To}
	// add appends a condition whose %d verbs number the new arguments.
	add := func(cond string, v ...any) {
		idx := make([]any, len(v))
		for i := range v {
			idx[i] = len(args) + i + 1
		}
		args = append(args, v...)
		where = append(where, fmt.Sprintf(cond, idx...))
	}
	if q.Model != "" {
		add("model = $%d", q.Model)
	}
	if q.KeyID != "" {
		add("key_id = $%d", q.KeyID)
	}
	if q.Status != "" {
		add("status = $%d", q.Status)
	}
	if q.ClusterID != "" {
		add("cluster_id = $%d", q.ClusterID)
	}
	if q.Cursor != "" {
		t, id, _ := billing.DecodeCursor(q.Cursor) // checked by Validate
		add("(started_at, request_id) < ($%d, $%d)", t, id)
	}
	rows, err := s.pool.Query(ctx, `SELECT request_id, started_at, finished_at, key_id, cluster_id, model,
		instance_id, policy, status, http_status, prompt_tokens, output_tokens, ttft_ms, e2e_ms, cost_nano,
		billed_nano, predicted_quality, predicted_e2e_ms, preset, w_quality, w_cost, w_latency, relaxed, attempts
		FROM billing_usage WHERE `+strings.Join(where, " AND ")+`
		ORDER BY started_at DESC, request_id DESC LIMIT `+strconv.Itoa(q.Limit+1), args...)
	if err != nil {
		return billing.RequestPage{}, fmt.Errorf("billing pgstore: requests: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (billing.RequestRow, error) {
		var (
			x            billing.RequestRow
			wq, wc, wl   float64
			relaxed      string
			cost, billed int64
		)
		err := r.Scan(&x.ID, &x.StartedAt, &x.FinishedAt, &x.KeyID, &x.ClusterID, &x.Model, &x.InstanceID,
			&x.Policy, &x.Status, &x.HTTPStatus, &x.PromptTokens, &x.OutputTokens, &x.TTFTMs, &x.E2EMs,
			&cost, &billed, &x.PredictedQuality, &x.PredictedE2EMs, &x.Preset, &wq, &wc, &wl,
			&relaxed, &x.Attempts)
		x.StartedAt, x.FinishedAt = x.StartedAt.UTC(), x.FinishedAt.UTC()
		x.Weights = billing.WeightsOrNil(wq, wc, wl)
		x.Relaxed = billing.SplitRelaxed(relaxed)
		x.SetMoney(billing.Nano(cost), billing.Nano(billed))
		return x, err
	})
	if err != nil {
		return billing.RequestPage{}, fmt.Errorf("billing pgstore: requests: %w", err)
	}
	return billing.PageOf(out, q.Limit), nil
}
