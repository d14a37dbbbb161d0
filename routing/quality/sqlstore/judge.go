package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/routebalance/routebalance/routing/quality"
)

var _ quality.JudgeStore = (*Store)(nil)

// SaveJudge replaces a cluster's judge settings.
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
