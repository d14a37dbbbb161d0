// Package sqlstore keeps clusters' uploaded quality data in Postgres or
// SQLite (table quality_data, migration 0300): the quality.Persister of
// `routebalance serve`.
package sqlstore

import (
	"context"
	"database/sql"
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

var _ quality.Persister = (*Store)(nil)

// NewPostgres returns a Store over a pgx pool (the pool stays the
// caller's).
func NewPostgres(pool *pgxpool.Pool) *Store {
	return &Store{db: stdlib.OpenDBFromPool(pool), postgres: true}
}

// NewSQLite returns a Store over an open SQLite database
// (tenants/sqlstore.OpenSQLite).
func NewSQLite(db *sql.DB) *Store { return &Store{db: db} }

// Save replaces a cluster's upload.
func (s *Store) Save(ctx context.Context, v quality.Saved) error {
	q := `INSERT INTO quality_data (cluster_id, tenant_id, uploaded_ms, records, meta, data) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (cluster_id) DO UPDATE SET tenant_id = excluded.tenant_id, uploaded_ms = excluded.uploaded_ms,
		records = excluded.records, meta = excluded.meta, data = excluded.data`
	if _, err := s.db.ExecContext(ctx, s.rebind(q), v.ClusterID, v.TenantID, v.UploadedAt.UnixMilli(), v.Records, string(v.Meta), v.Data); err != nil {
		return fmt.Errorf("save quality data of %s: %w", v.ClusterID, err)
	}
	return nil
}

// Delete removes a cluster's upload; a missing one is not an error.
func (s *Store) Delete(ctx context.Context, clusterID string) error {
	if _, err := s.db.ExecContext(ctx, s.rebind(`DELETE FROM quality_data WHERE cluster_id = ?`), clusterID); err != nil {
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
