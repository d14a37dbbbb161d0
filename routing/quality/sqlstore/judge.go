package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/routebalance/routebalance/routing/quality"
)

var _ quality.JudgeStore = (*Store)(nil)

// SaveJudge replaces a cluster's judge settings (on Postgres, then
// notifies the other replicas).
func (s *Store) SaveJudge(ctx context.Context, tenantID, clusterID string, v quality.JudgeSettings) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	q := `INSERT INTO quality_judge (cluster_id, tenant_id, settings) VALUES (?, ?, ?)
		ON CONFLICT (cluster_id) DO UPDATE SET tenant_id = excluded.tenant_id, settings = excluded.settings`
	if _, err := s.db.ExecContext(ctx, s.rebind(q), clusterID, tenantID, string(b)); err != nil {
		return fmt.Errorf("save judge settings of %s: %w", clusterID, err)
	}
	if s.postgres { // the other replicas reload (quality.Judge.Changed)
		if _, err := s.db.ExecContext(ctx, `SELECT pg_notify($1, $2)`, changeChannel, tenantID); err != nil {
			return fmt.Errorf("notify judge settings of %s: %w", clusterID, err)
		}
	}
	return nil
}

// Judges returns every cluster's judge settings.
func (s *Store) Judges(ctx context.Context) (map[string]quality.JudgeSettings, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT cluster_id, settings FROM quality_judge`)
	if err != nil {
		return nil, fmt.Errorf("read judge settings: %w", err)
	}
	defer rows.Close()
	out := map[string]quality.JudgeSettings{}
	for rows.Next() {
		var id, raw string
		if err := rows.Scan(&id, &raw); err != nil {
			return nil, fmt.Errorf("read judge settings: %w", err)
		}
		var v quality.JudgeSettings
		if err := json.Unmarshal([]byte(raw), &v); err != nil {
			return nil, fmt.Errorf("judge settings of %s: %w", id, err)
		}
		out[id] = v
	}
	return out, rows.Err()
}

var _ quality.JudgeSpender = (*Store)(nil)

// AddJudgeSpend adds a judge call's cost (and labels) to a cluster's
// month, in nano-USD, and returns the month's totals over every replica.
func (s *Store) AddJudgeSpend(ctx context.Context, tenantID, clusterID, month string, usd float64, labels int) (quality.JudgeSpend, error) {
	q := `INSERT INTO quality_judge_spend (cluster_id, month, tenant_id, spent_nano, labels) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (cluster_id, month) DO UPDATE SET spent_nano = quality_judge_spend.spent_nano + excluded.spent_nano,
		labels = quality_judge_spend.labels + excluded.labels
		RETURNING spent_nano, labels`
	var nano int64
	var n int
	if err := s.db.QueryRowContext(ctx, s.rebind(q), clusterID, month, tenantID, int64(math.Round(usd*1e9)), labels).Scan(&nano, &n); err != nil {
		return quality.JudgeSpend{}, fmt.Errorf("add judge spend of %s: %w", clusterID, err)
	}
	return quality.JudgeSpend{SpentUSD: float64(nano) / 1e9, Labels: n}, nil
}

// JudgeSpends returns every cluster's judge totals of a month.
func (s *Store) JudgeSpends(ctx context.Context, month string) (map[string]quality.JudgeSpend, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT cluster_id, spent_nano, labels FROM quality_judge_spend WHERE month = ?`), month)
	if err != nil {
		return nil, fmt.Errorf("read judge spend: %w", err)
	}
	defer rows.Close()
	out := map[string]quality.JudgeSpend{}
	for rows.Next() {
		var id string
		var nano int64
		var n int
		if err := rows.Scan(&id, &nano, &n); err != nil {
			return nil, fmt.Errorf("read judge spend: %w", err)
		}
		out[id] = quality.JudgeSpend{SpentUSD: float64(nano) / 1e9, Labels: n}
	}
	return out, rows.Err()
}
