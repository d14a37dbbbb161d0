package migrations

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

type pgExec struct {
	pool *pgxpool.Pool
	tx   pgx.Tx
}

func (p pgExec) exec(ctx context.Context, q string, args ...any) error {
	var err error
	if p.tx != nil {
		_, err = p.tx.Exec(ctx, q, args...)
	} else {
		_, err = p.pool.Exec(ctx, q, args...)
	}
	return err
}

func (p pgExec) applied(ctx context.Context) (map[int]bool, error) {
	rows, err := p.pool.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, err
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	out := make(map[int]bool, len(vs))
	for _, v := range vs {
		out[int(v)] = true
	}
	return out, nil
}

func (p pgExec) inTx(ctx context.Context, fn func(execer) error) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error { return fn(pgExec{pool: p.pool, tx: tx}) })
}

type sqlExec struct {
	db *sql.DB
	tx *sql.Tx
}

func (s sqlExec) exec(ctx context.Context, q string, args ...any) error {
	var err error
	if s.tx != nil {
		_, err = s.tx.ExecContext(ctx, q, args...)
	} else {
		_, err = s.db.ExecContext(ctx, q, args...)
	}
	return err
}

func (s sqlExec) applied(ctx context.Context) (map[int]bool, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out[v] = true
	}
	return out, rows.Err()
}

func (s sqlExec) inTx(ctx context.Context, fn func(execer) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(sqlExec{db: s.db, tx: tx}); err != nil {
		tx.Rollback() //nolint:errcheck
		return err
	}
	return tx.Commit()
}
