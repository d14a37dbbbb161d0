// Package sqlstore keeps clusters' uploaded quality data in Postgres or
// SQLite (table quality_data, migration 0300): the quality.Persister of
// `routebalance serve`.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/routebalance/routebalance/routing/quality"
)

// Store is a quality.Persister over a migrated database. It is safe for
// concurrent use.
type Store struct {
	db       *sql.DB
	postgres bool
}

var (
	_ quality.Persister = (*Store)(nil)
	_ quality.Syncer    = (*Store)(nil)
)

// NewPostgres returns a Store over a pgx pool (the pool stays the
// caller's).
func NewPostgres(pool *pgxpool.Pool) *Store {
	return &Store{db: stdlib.OpenDBFromPool(pool), postgres: true}
}

// NewSQLite returns a Store over an open SQLite database
// (tenants/sqlstore.OpenSQLite).
func NewSQLite(db *sql.DB) *Store { return &Store{db: db} }

// changeChannel is the Postgres channel Save and Delete notify with the
// tenant's id: the channel of tenant changes (tenants/sqlstore), so
// serve's existing change feed (Store.Watch there) carries them to every
// replica (quality.Store.Changed).
const changeChannel = "routebalance_tenants"

// Save replaces a cluster's upload (on Postgres, then notifies the other
// replicas).
func (s *Store) Save(ctx context.Context, v quality.Saved) error {
	q := `INSERT INTO quality_data (cluster_id, tenant_id, uploaded_ms, records, meta, data) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (cluster_id) DO UPDATE SET tenant_id = excluded.tenant_id, uploaded_ms = excluded.uploaded_ms,
		records = excluded.records, meta = excluded.meta, data = excluded.data`
	if _, err := s.db.ExecContext(ctx, s.rebind(q), v.ClusterID, v.TenantID, v.UploadedAt.UnixMilli(), v.Records, string(v.Meta), v.Data); err != nil {
		return fmt.Errorf("save quality data of %s: %w", v.ClusterID, err)
	}
	if s.postgres {
		if _, err := s.db.ExecContext(ctx, `SELECT pg_notify($1, $2)`, changeChannel, v.TenantID); err != nil {
			return fmt.Errorf("notify quality data of %s: %w", v.ClusterID, err)
		}
	}
	return nil
}

// Delete removes a cluster's upload (on Postgres, notifying the other
// replicas); a missing one is not an error.
func (s *Store) Delete(ctx context.Context, clusterID string) error {
	q := `DELETE FROM quality_data WHERE cluster_id = ?`
	if s.postgres {
		q = `WITH d AS (DELETE FROM quality_data WHERE cluster_id = $1 RETURNING tenant_id)
			SELECT pg_notify('` + changeChannel + `', tenant_id) FROM d`
	}
	if _, err := s.db.ExecContext(ctx, s.rebind(q), clusterID); err != nil {
		return fmt.Errorf("delete quality data of %s: %w", clusterID, err)
	}
	return nil
}

// All returns every stored upload, oldest first.
func (s *Store) All(ctx context.Context) ([]quality.Saved, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT cluster_id, tenant_id, uploaded_ms, records, meta, data FROM quality_data ORDER BY uploaded_ms, cluster_id`)
	if err != nil {
		return nil, fmt.Errorf("read quality data: %w", err)
	}
	defer rows.Close()
	var out []quality.Saved
	for rows.Next() {
		var v quality.Saved
		var ms int64
		var meta string
		if err := rows.Scan(&v.ClusterID, &v.TenantID, &ms, &v.Records, &meta, &v.Data); err != nil {
			return nil, fmt.Errorf("read quality data: %w", err)
		}
		v.UploadedAt, v.Meta = time.UnixMilli(ms).UTC(), []byte(meta)
		out = append(out, v)
	}
	return out, rows.Err()
}

// Stamps returns the upload time of every stored upload of a tenant (all
// tenants for "").
func (s *Store) Stamps(ctx context.Context, tenantID string) (map[string]time.Time, error) {
	q, args := `SELECT cluster_id, uploaded_ms FROM quality_data`, []any{}
	if tenantID != "" {
		q, args = q+` WHERE tenant_id = ?`, append(args, tenantID)
	}
	rows, err := s.db.QueryContext(ctx, s.rebind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("read quality data stamps: %w", err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var id string
		var ms int64
		if err := rows.Scan(&id, &ms); err != nil {
			return nil, fmt.Errorf("read quality data stamps: %w", err)
		}
		out[id] = time.UnixMilli(ms).UTC()
	}
	return out, rows.Err()
}

// Get returns one cluster's stored upload (false when it has none).
func (s *Store) Get(ctx context.Context, clusterID string) (quality.Saved, bool, error) {
	v := quality.Saved{ClusterID: clusterID}
	var ms int64
	var meta string
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT tenant_id, uploaded_ms, records, meta, data FROM quality_data WHERE cluster_id = ?`), clusterID).
		Scan(&v.TenantID, &ms, &v.Records, &meta, &v.Data)
	if errors.Is(err, sql.ErrNoRows) {
		return v, false, nil
	}
	if err != nil {
		return v, false, fmt.Errorf("read quality data of %s: %w", clusterID, err)
	}
	v.UploadedAt, v.Meta = time.UnixMilli(ms).UTC(), []byte(meta)
	return v, true, nil
}

// rebind turns ? placeholders into Postgres's $n.
func (s *Store) rebind(q string) string {
	if !s.postgres {
		return q
	}
	out := make([]byte, 0, len(q)+8)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			out = fmt.Appendf(out, "$%d", n)
			continue
		}
		out = append(out, q[i])
	}
	return string(out)
}

// Close releases the Store's handle on a Postgres pool (the pool stays
// open); for SQLite the caller closes the database it opened.
func (s *Store) Close() error {
	if s.postgres {
		return s.db.Close()
	}
	return nil
}
