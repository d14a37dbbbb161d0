package sqlitestore

import (
	"context"
	"fmt"
	"strings"

	"github.com/routebalance/routebalance/billing"
)

// Requests returns one page of the tenant's request log, newest first
// (started_ms, then request id, descending), with the query's filters.
func (s *Store) Requests(ctx context.Context, q billing.RequestQuery) (billing.RequestPage, error) {
	if err := q.Validate(); err != nil {
		return billing.RequestPage{}, err
	}
	where := []string{"tenant_id = ?", "started_ms >= ?", "started_ms < ?"}
	args := []any{q.TenantID, toMs(q.From), toMs(q.To)}
	if q.Model != "" {
		where, args = append(where, "model = ?"), append(args, q.Model)
	}
	if q.KeyID != "" {
		where, args = append(where, "key_id = ?"), append(args, q.KeyID)
	}
	if q.Status != "" {
		where, args = append(where, "status = ?"), append(args, q.Status)
	}
	if q.ClusterID != "" {
		where, args = append(where, "cluster_id = ?"), append(args, q.ClusterID)
	}
	if q.Cursor != "" {
		t, id, _ := billing.DecodeCursor(q.Cursor) // checked by Validate
		where = append(where, "(started_ms < ? OR (started_ms = ? AND request_id < ?))")
		args = append(args, toMs(t), toMs(t), id)
	}
	args = append(args, q.Limit+1)
	rows, err := s.db.QueryContext(ctx, `SELECT request_id, started_ms, finished_ms, key_id, cluster_id, model,
		instance_id, policy, status, http_status, prompt_tokens, output_tokens, ttft_ms, e2e_ms, cost_nano,
		billed_nano, predicted_quality, predicted_e2e_ms, preset, w_quality, w_cost, w_latency, relaxed, attempts
		FROM billing_usage WHERE `+strings.Join(where, " AND ")+`
		ORDER BY started_ms DESC, request_id DESC LIMIT ?`, args...)
	if err != nil {
		return billing.RequestPage{}, fmt.Errorf("billing sqlitestore: requests: %w", err)
	}
	defer rows.Close()
	var out []billing.RequestRow
	for rows.Next() {
		var (
			x            billing.RequestRow
			st, fin      int64
			wq, wc, wl   float64
			relaxed      string
			cost, billed int64
		)
		if err := rows.Scan(&x.ID, &st, &fin, &x.KeyID, &x.ClusterID, &x.Model, &x.InstanceID,
			&x.Policy, &x.Status, &x.HTTPStatus, &x.PromptTokens, &x.OutputTokens, &x.TTFTMs, &x.E2EMs,
			&cost, &billed, &x.PredictedQuality, &x.PredictedE2EMs, &x.Preset, &wq, &wc, &wl,
			&relaxed, &x.Attempts); err != nil {
			return billing.RequestPage{}, fmt.Errorf("billing sqlitestore: requests: %w", err)
		}
		x.StartedAt, x.FinishedAt = fromMs(st), fromMs(fin)
		x.Weights = billing.WeightsOrNil(wq, wc, wl)
		x.Relaxed = billing.SplitRelaxed(relaxed)
		x.SetMoney(billing.Nano(cost), billing.Nano(billed))
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return billing.RequestPage{}, fmt.Errorf("billing sqlitestore: requests: %w", err)
	}
	return billing.PageOf(out, q.Limit), nil
}
