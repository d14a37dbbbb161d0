// Package pgstore is the Postgres (pgx) storage of billing: the usage
// ledger written with CopyFrom, the usage aggregation, the Stripe outbox,
// billing accounts and processed webhook events. Tables come from
// migrations/postgres/0100_billing.sql.
package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/routebalance/routebalance/billing"
)

// Store is the billing storage over a pgx pool.
type Store struct {
	pool *pgxpool.Pool
}

// New returns a Store on pool (migrations already applied).
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

var _ billing.Ledger = (*Store)(nil)

var usageCols = []string{
	"request_id", "tenant_id", "key_id", "cluster_id", "instance_id", "model", "policy",
	"prompt_tokens", "output_tokens", "cost_nano", "billed_nano", "predicted_quality",
	"ttft_ms", "e2e_ms", "status", "http_status", "started_at", "finished_at",
	"predicted_e2e_ms", "preset", "w_quality", "w_cost", "w_latency", "relaxed", "attempts",
}

const insertFromStage = `
INSERT INTO billing_usage (request_id, tenant_id, key_id, cluster_id, instance_id, model, policy,
    prompt_tokens, output_tokens, cost_nano, billed_nano, predicted_quality, ttft_ms, e2e_ms,
    status, http_status, started_at, finished_at,
    predicted_e2e_ms, preset, w_quality, w_cost, w_latency, relaxed, attempts)
SELECT request_id, tenant_id, key_id, cluster_id, instance_id, model, policy,
    prompt_tokens, output_tokens, cost_nano, billed_nano, predicted_quality, ttft_ms, e2e_ms,
    status, http_status, started_at, finished_at,
    predicted_e2e_ms, preset, w_quality, w_cost, w_latency, relaxed, attempts
FROM billing_usage_stage
ON CONFLICT (request_id) DO NOTHING
RETURNING request_id`

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Insert copies evs into a per-connection temporary staging table with
// CopyFrom and moves them into billing_usage with ON CONFLICT (request_id)
// DO NOTHING, all in one transaction; it returns the inserted request ids.
func (s *Store) Insert(ctx context.Context, evs []billing.UsageEvent) ([]string, error) {
	var ids []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS billing_usage_stage
			(LIKE billing_usage INCLUDING DEFAULTS) ON COMMIT DELETE ROWS`); err != nil {
			return fmt.Errorf("create staging table: %w", err)
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"billing_usage_stage"}, usageCols,
			pgx.CopyFromSlice(len(evs), func(i int) ([]any, error) {
				e := &evs[i]
				return []any{e.RequestID, e.TenantID, e.KeyID, e.ClusterID, e.InstanceID, e.Model, e.Policy,
					int32(e.PromptTokens), int32(e.OutputTokens), int64(max(e.Cost, 0)), int64(max(e.Billed, 0)), e.PredictedQuality,
					ms(e.TTFT), ms(e.E2E), e.Status, int32(e.HTTPStatus), e.StartedAt, e.FinishedAt,
					ms(e.PredictedE2E), e.Preset, e.Weights.Quality, e.Weights.Cost, e.Weights.Latency,
					billing.JoinRelaxed(e.Relaxed), int32(max(1, e.Attempts))}, nil
			}))
		if err != nil {
			return fmt.Errorf("copy usage: %w", err)
		}
		rows, err := tx.Query(ctx, insertFromStage)
		if err != nil {
			return fmt.Errorf("insert usage: %w", err)
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("insert usage: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("billing pgstore: %w", err)
	}
	return ids, nil
}

// sumNano sums a bigint nano-USD column exactly (Postgres sums bigint as
// numeric) and saturates at billing.MaxNano instead of failing the cast.
func sumNano(col string) string {
	return `least(coalesce(sum(` + col + `), 0), 9223372036854775807)::bigint`
}

// PeriodSpend returns billed totals per tenant and key since since.
func (s *Store) PeriodSpend(ctx context.Context, since time.Time) ([]billing.PeriodSpend, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id, key_id, `+sumNano("billed_nano")+` FROM billing_usage
		WHERE finished_at >= $1 GROUP BY tenant_id, key_id`, since)
	if err != nil {
		return nil, fmt.Errorf("billing pgstore: period spend: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (billing.PeriodSpend, error) {
		var (
			p      billing.PeriodSpend
			billed int64
		)
		err := r.Scan(&p.TenantID, &p.KeyID, &billed)
		p.Billed = billing.Nano(billed)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("billing pgstore: period spend: %w", err)
	}
	return out, nil
}

func groupExpr(groupBy string) string {
	switch groupBy {
	case billing.GroupHour:
		return `to_char(date_trunc('hour', finished_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD"T"HH24:00:00"Z"')`
	case billing.GroupDay:
		return `to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')`
	case billing.GroupModel:
		return "model"
	case billing.GroupInstance:
		return "instance_id"
	case billing.GroupKey:
		return "key_id"
	}
	return "''"
}

// Usage aggregates the tenant's ledger rows in [q.From, q.To).
func (s *Store) Usage(ctx context.Context, q billing.UsageQuery) (billing.UsageReport, error) {
	if err := q.Validate(); err != nil {
		return billing.UsageReport{}, err
	}
	rep := billing.UsageReport{From: q.From, To: q.To, GroupBy: q.GroupBy, Rows: []billing.UsageRow{}}
	var err error
	if rep.Rows, err = s.usageRows(ctx, q, groupExpr(q.GroupBy)); err != nil {
		return rep, err
	}
	if q.GroupBy == "" {
		if len(rep.Rows) > 0 {
			rep.Total = rep.Rows[0]
		}
		return rep, nil
	}
	tot, err := s.usageRows(ctx, q, "''")
	if err != nil {
		return rep, err
	}
	if len(tot) > 0 {
		rep.Total = tot[0]
	}
	return rep, nil
}

func (s *Store) usageRows(ctx context.Context, q billing.UsageQuery, expr string) ([]billing.UsageRow, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+expr+` AS g, count(*),
		coalesce(sum(prompt_tokens),0)::bigint, coalesce(sum(output_tokens),0)::bigint,
		`+sumNano("cost_nano")+`, `+sumNano("billed_nano")+`,
		avg(ttft_ms), percentile_cont(0.95) WITHIN GROUP (ORDER BY ttft_ms),
		avg(e2e_ms), percentile_cont(0.95) WITHIN GROUP (ORDER BY e2e_ms),
		avg(predicted_quality)
		FROM billing_usage WHERE tenant_id = $1 AND finished_at >= $2 AND finished_at < $3
		GROUP BY g ORDER BY g`, q.TenantID, q.From, q.To)
	if err != nil {
		return nil, fmt.Errorf("billing pgstore: usage: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (billing.UsageRow, error) {
		var (
			u            billing.UsageRow
			cost, billed int64
		)
		err := r.Scan(&u.Group, &u.Requests, &u.PromptTokens, &u.OutputTokens, &cost, &billed,
			&u.MeanTTFTMs, &u.P95TTFTMs, &u.MeanE2EMs, &u.P95E2EMs, &u.MeanPredictedQuality)
		u.Tokens = u.PromptTokens + u.OutputTokens
		u.SetMoney(billing.Nano(cost), billing.Nano(billed))
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("billing pgstore: usage: %w", err)
	}
	if out == nil {
		out = []billing.UsageRow{}
	}
	return out, nil
}
