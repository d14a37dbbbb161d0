// Package sqlstore keeps the tenants domain in SQL: one implementation of
// tenants.Store over database/sql with two dialects, Postgres (through a
// pgx/v5 pgxpool via pgx's stdlib adapter) and SQLite (modernc.org/sqlite,
// pure Go).
//
// Queries are written once with ? placeholders and rebound to $n for
// Postgres. Times are timestamptz on Postgres and fixed-width UTC text on
// SQLite (so they sort); JSON-valued settings are text on both. Every query
// that takes a tenant id filters on it, so another tenant's id is
// tenants.ErrNotFound.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/tenants"
)

// Store is the SQL implementation of tenants.Store. It is safe for
// concurrent use.
type Store struct {
	db       *sql.DB
	pool     *pgxpool.Pool // set for Postgres (Watch)
	postgres bool
	rebound  sync.Map // query → Postgres form
}

var (
	_ tenants.Store          = (*Store)(nil)
	_ tenants.SealedKeyStore = (*Store)(nil)
)

// NewPostgres returns a Store over a pgx pool. The pool stays owned by the
// caller.
func NewPostgres(pool *pgxpool.Pool) *Store {
	return &Store{db: stdlib.OpenDBFromPool(pool), pool: pool, postgres: true}
}

// NewSQLite returns a Store over a database opened with OpenSQLite.
func NewSQLite(db *sql.DB) *Store { return &Store{db: db} }

// OpenSQLite opens (creating if needed) a SQLite file with foreign keys on,
// WAL journaling, a 5 s busy timeout and IMMEDIATE write transactions, so
// concurrent writers queue instead of failing.
func OpenSQLite(path string) (*sql.DB, error) {
	dsn := "file:" + path + "?_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return db, nil
}

// Close releases the Store's handle on a Postgres pool (the pool itself
// stays open); for SQLite the caller closes the *sql.DB it opened.
func (s *Store) Close() error {
	if s.postgres {
		return s.db.Close()
	}
	return nil
}

func (s *Store) q(query string) string {
	if !s.postgres {
		return query
	}
	if v, ok := s.rebound.Load(query); ok {
		return v.(string)
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	s.rebound.Store(query, b.String())
	return b.String()
}

const sqliteTime = "2006-01-02T15:04:05.000000Z"

// t converts a time to the engine's parameter form.
func (s *Store) t(v time.Time) any {
	if s.postgres {
		return v.UTC()
	}
	return v.UTC().Format(sqliteTime)
}

func (s *Store) tp(v *time.Time) any {
	if v == nil {
		return nil
	}
	return s.t(*v)
}

// timeCol scans a timestamptz or a SQLite text time, NULL leaving it nil.
type timeCol struct{ t **time.Time }

func (c timeCol) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*c.t = nil
		return nil
	case time.Time:
		u := v.UTC()
		*c.t = &u
		return nil
	case string:
		return c.parse(v)
	case []byte:
		return c.parse(string(v))
	}
	return fmt.Errorf("cannot scan %T into a time", src)
}

func (c timeCol) parse(v string) error {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return fmt.Errorf("parse time %q: %w", v, err)
	}
	t = t.UTC()
	*c.t = &t
	return nil
}

// reqTime scans a NOT NULL time into a value.
type reqTime struct{ t *time.Time }

func (c reqTime) Scan(src any) error {
	var p *time.Time
	if err := (timeCol{&p}).Scan(src); err != nil {
		return err
	}
	if p == nil {
		return errors.New("unexpected NULL time")
	}
	*c.t = *p
	return nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func isUnique(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "23505"
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}

func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return tenants.ErrNotFound
	}
	return err
}

// inTx runs fn in a transaction.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback() //nolint:errcheck // the first error matters
		return err
	}
	return tx.Commit()
}

// bump increments the tenant's config_version inside tx and, on Postgres,
// notifies every replica's Watch when the transaction commits.
func (s *Store) bump(ctx context.Context, tx *sql.Tx, tenantID string) error {
	if _, err := tx.ExecContext(ctx, s.q("UPDATE tenants SET config_version = config_version + 1 WHERE id = ?"), tenantID); err != nil {
		return err
	}
	if s.postgres {
		_, err := tx.ExecContext(ctx, "SELECT pg_notify($1, $2)", notifyChannel, tenantID)
		return err
	}
	return nil
}

// notifyChannel is the Postgres channel of tenant changes.
const notifyChannel = "routebalance_tenants"

// Watch reports tenant changes committed by any process sharing the
// database, so each replica can drop cached API-key resolutions at once:
// changed(tenantID) per change, and lost() whenever notifications may have
// been missed (at every (re)connection), after which callers should drop
// everything. It runs until ctx ends (reconnecting after errors, 1 s
// apart) and returns nil. On SQLite (one process) it only waits for ctx.
func (s *Store) Watch(ctx context.Context, changed func(tenantID string), lost func()) error {
	if !s.postgres {
		<-ctx.Done()
		return nil
	}
	for {
		err := s.listen(ctx, changed, lost)
		if ctx.Err() != nil {
			return nil
		}
		_ = err // transient: reconnect below
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (s *Store) listen(ctx context.Context, changed func(string), lost func()) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := c.Hijack() // a LISTENing connection never goes back to the pool
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return err
	}
	lost()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		changed(n.Payload)
	}
}

// mutate runs fn in a transaction, requires it to have touched exactly one
// row (else ErrNotFound) and bumps the tenant's config_version.
func (s *Store) mutate(ctx context.Context, tenantID, query string, args ...any) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(query), args...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return tenants.ErrNotFound
		}
		return s.bump(ctx, tx, tenantID)
	})
}

func jsonText(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// ---- accounts ----

// CreateAccount implements tenants.AccountStore.
func (s *Store) CreateAccount(ctx context.Context, t tenants.Tenant, u tenants.User, st tenants.Settings) error {
	w, err := jsonText(st.Weights)
	if err != nil {
		return err
	}
	o, err := jsonText(st.SLO)
	if err != nil {
		return err
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q("INSERT INTO tenants (id, name, config_version, created_at) VALUES (?, ?, ?, ?)"),
			t.ID, t.Name, max(t.ConfigVersion, 1), s.t(t.CreatedAt)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q("INSERT INTO users (id, tenant_id, email, password_hash, created_at) VALUES (?, ?, ?, ?, ?)"),
			u.ID, t.ID, u.Email, u.PasswordHash, s.t(u.CreatedAt)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q("INSERT INTO tenant_settings (tenant_id, default_cluster_id, preset, weights, slo) VALUES (?, ?, ?, ?, ?)"),
			t.ID, nullable(st.DefaultClusterID), st.Preset, w, o)
		return err
	})
	if isUnique(err) {
		return fmt.Errorf("email %s: %w", u.Email, tenants.ErrConflict)
	}
	return err
}

// UserByEmail implements tenants.AccountStore.
func (s *Store) UserByEmail(ctx context.Context, email string) (tenants.User, error) {
	var u tenants.User
	err := s.db.QueryRowContext(ctx, s.q("SELECT id, tenant_id, email, password_hash, created_at FROM users WHERE email = ?"), email).
		Scan(&u.ID, &u.TenantID, &u.Email, &u.PasswordHash, reqTime{&u.CreatedAt})
	return u, notFound(err)
}

// Tenant implements tenants.AccountStore.
func (s *Store) Tenant(ctx context.Context, id string) (tenants.Tenant, error) {
	var t tenants.Tenant
	err := s.db.QueryRowContext(ctx, s.q("SELECT id, name, config_version, created_at FROM tenants WHERE id = ?"), id).
		Scan(&t.ID, &t.Name, &t.ConfigVersion, reqTime{&t.CreatedAt})
	return t, notFound(err)
}

// ---- keys ----

const keyCols = "id, tenant_id, name, prefix, cluster_id, preset, weights, slo, created_at, last_used_at, revoked_at, rate_limits"

func scanKey(row interface{ Scan(...any) error }) (tenants.Key, error) {
	var k tenants.Key
	var cluster, weights, slo sql.NullString
	var lim string
	err := row.Scan(&k.ID, &k.TenantID, &k.Name, &k.Prefix, &cluster, &k.Preset, &weights, &slo,
		reqTime{&k.CreatedAt}, timeCol{&k.LastUsedAt}, timeCol{&k.RevokedAt}, &lim)
	if err != nil {
		return k, notFound(err)
	}
	if err := json.Unmarshal([]byte(lim), &k.Limits); err != nil {
		return k, fmt.Errorf("key %s limits: %w", k.ID, err)
	}
	k.ClusterID = cluster.String
	if weights.Valid && weights.String != "" {
		var w routing.Weights
		if err := json.Unmarshal([]byte(weights.String), &w); err != nil {
			return k, fmt.Errorf("key %s weights: %w", k.ID, err)
		}
		k.Weights = &w
	}
	if slo.Valid && slo.String != "" {
		var o tenants.SLO
		if err := json.Unmarshal([]byte(slo.String), &o); err != nil {
			return k, fmt.Errorf("key %s slo: %w", k.ID, err)
		}
		k.SLO = &o
	}
	return k, nil
}

func optJSON[T any](v *T) (any, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	return string(b), err
}

// CreateKey implements tenants.KeyStore.
func (s *Store) CreateKey(ctx context.Context, k tenants.Key, hash string) error {
	w, err := optJSON(k.Weights)
	if err != nil {
		return err
	}
	o, err := optJSON(k.SLO)
	if err != nil {
		return err
	}
	lim, err := jsonText(k.Limits)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, s.q("INSERT INTO api_keys (id, tenant_id, name, prefix, key_hash, cluster_id, preset, weights, slo, created_at, rate_limits) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
		k.ID, k.TenantID, k.Name, k.Prefix, hash, nullable(k.ClusterID), k.Preset, w, o, s.t(k.CreatedAt), lim)
	if isUnique(err) {
		return fmt.Errorf("key: %w", tenants.ErrConflict)
	}
	return err
}

// Keys implements tenants.KeyStore.
func (s *Store) Keys(ctx context.Context, tenantID string) ([]tenants.Key, error) {
	return queryAll(ctx, s, scanKey, "SELECT "+keyCols+" FROM api_keys WHERE tenant_id = ? ORDER BY created_at, id", tenantID)
}

// Key implements tenants.KeyStore.
func (s *Store) Key(ctx context.Context, tenantID, id string) (tenants.Key, error) {
	return scanKey(s.db.QueryRowContext(ctx, s.q("SELECT "+keyCols+" FROM api_keys WHERE tenant_id = ? AND id = ?"), tenantID, id))
}

// KeyByHash implements tenants.KeyStore.
func (s *Store) KeyByHash(ctx context.Context, hash string) (tenants.Key, error) {
	return scanKey(s.db.QueryRowContext(ctx, s.q("SELECT "+keyCols+" FROM api_keys WHERE key_hash = ?"), hash))
}

// UpdateKey implements tenants.KeyStore.
func (s *Store) UpdateKey(ctx context.Context, k tenants.Key) error {
	w, err := optJSON(k.Weights)
	if err != nil {
		return err
	}
	o, err := optJSON(k.SLO)
	if err != nil {
		return err
	}
	lim, err := jsonText(k.Limits)
	if err != nil {
		return err
	}
	return s.mutate(ctx, k.TenantID, "UPDATE api_keys SET name = ?, cluster_id = ?, preset = ?, weights = ?, slo = ?, revoked_at = ?, rate_limits = ? WHERE tenant_id = ? AND id = ?",
		k.Name, nullable(k.ClusterID), k.Preset, w, o, s.tp(k.RevokedAt), lim, k.TenantID, k.ID)
}

// TouchKeys implements tenants.KeyStore: one transaction, one statement per
// key, never moving last_used_at backwards.
func (s *Store) TouchKeys(ctx context.Context, used map[string]time.Time) error {
	if len(used) == 0 {
		return nil
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, s.q("UPDATE api_keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)"))
		if err != nil {
			return err
		}
		defer stmt.Close()
		for id, t := range used {
			if _, err := stmt.ExecContext(ctx, s.t(t), id, s.t(t)); err != nil {
				return err
			}
		}
		return nil
	})
}

// ---- clusters ----

func scanCluster(row interface{ Scan(...any) error }) (tenants.Cluster, error) {
	var c tenants.Cluster
	var policy string
	if err := row.Scan(&c.ID, &c.TenantID, &c.Name, &policy, reqTime{&c.CreatedAt}, reqTime{&c.UpdatedAt}); err != nil {
		return c, notFound(err)
	}
	if err := json.Unmarshal([]byte(policy), &c.Policy); err != nil {
		return c, fmt.Errorf("cluster %s policy: %w", c.ID, err)
	}
	return c, nil
}

const clusterCols = "id, tenant_id, name, policy, created_at, updated_at"

// CreateCluster implements tenants.ClusterStore.
func (s *Store) CreateCluster(ctx context.Context, c tenants.Cluster) error {
	pol, err := jsonText(c.Policy)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q("INSERT INTO clusters ("+clusterCols+") VALUES (?, ?, ?, ?, ?, ?)"),
			c.ID, c.TenantID, c.Name, pol, s.t(c.CreatedAt), s.t(c.UpdatedAt)); err != nil {
			return err
		}
		return s.bump(ctx, tx, c.TenantID)
	})
}

// Clusters implements tenants.ClusterStore.
func (s *Store) Clusters(ctx context.Context, tenantID string) ([]tenants.Cluster, error) {
	return queryAll(ctx, s, scanCluster, "SELECT "+clusterCols+" FROM clusters WHERE tenant_id = ? ORDER BY created_at, id", tenantID)
}

// Cluster implements tenants.ClusterStore.
func (s *Store) Cluster(ctx context.Context, tenantID, id string) (tenants.Cluster, error) {
	return scanCluster(s.db.QueryRowContext(ctx, s.q("SELECT "+clusterCols+" FROM clusters WHERE tenant_id = ? AND id = ?"), tenantID, id))
}

// UpdateCluster implements tenants.ClusterStore.
func (s *Store) UpdateCluster(ctx context.Context, c tenants.Cluster) error {
	pol, err := jsonText(c.Policy)
	if err != nil {
		return err
	}
	return s.mutate(ctx, c.TenantID, "UPDATE clusters SET name = ?, policy = ?, updated_at = ? WHERE tenant_id = ? AND id = ?",
		c.Name, pol, s.t(c.UpdatedAt), c.TenantID, c.ID)
}

// DeleteCluster implements tenants.ClusterStore. Foreign keys cascade to
// instances and clear key bindings and the default cluster.
func (s *Store) DeleteCluster(ctx context.Context, tenantID, id string) error {
	return s.mutate(ctx, tenantID, "DELETE FROM clusters WHERE tenant_id = ? AND id = ?", tenantID, id)
}

// ---- instances ----

const instanceCols = "id, cluster_id, base_url, model, gpu, tensor_parallel, price_in_per_mtok, price_out_per_mtok, max_concurrency, quality_prior, disabled, api_key_sealed, created_at, updated_at, kind"

func scanInstance(row interface{ Scan(...any) error }) (tenants.Instance, error) {
	var in tenants.Instance
	err := row.Scan(&in.ID, &in.ClusterID, &in.BaseURL, &in.Model, &in.GPU, &in.TensorParallel,
		&in.PriceInPerMTok, &in.PriceOutPerMTok, &in.MaxConcurrency, &in.QualityPrior, &in.Disabled,
		&in.SealedAPIKey, reqTime{&in.CreatedAt}, reqTime{&in.UpdatedAt}, &in.Kind)
	if err != nil {
		return in, notFound(err)
	}
	in.HasAPIKey = len(in.SealedAPIKey) > 0
	return in, nil
}

// kindArg stores an instance's kind; the empty Kind is "chat".
func kindArg(k routing.Kind) string {
	if k == "" {
		return string(routing.KindChat)
	}
	return string(k)
}

func sealedArg(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// CreateInstance implements tenants.InstanceStore. A cluster of another
// tenant is ErrNotFound (the composite foreign key refuses it).
func (s *Store) CreateInstance(ctx context.Context, tenantID string, in tenants.Instance) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, s.q("SELECT 1 FROM clusters WHERE tenant_id = ? AND id = ?"), tenantID, in.ClusterID).Scan(&one); err != nil {
			return notFound(err)
		}
		if _, err := tx.ExecContext(ctx, s.q("INSERT INTO instances (tenant_id, "+instanceCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
			tenantID, in.ID, in.ClusterID, in.BaseURL, in.Model, in.GPU, in.TensorParallel, in.PriceInPerMTok, in.PriceOutPerMTok,
			in.MaxConcurrency, in.QualityPrior, in.Disabled, sealedArg(in.SealedAPIKey), s.t(in.CreatedAt), s.t(in.UpdatedAt), kindArg(in.Kind)); err != nil {
			return err
		}
		return s.bump(ctx, tx, tenantID)
	})
}

// Instances implements tenants.InstanceStore.
func (s *Store) Instances(ctx context.Context, tenantID, clusterID string) ([]tenants.Instance, error) {
	return queryAll(ctx, s, scanInstance, "SELECT "+instanceCols+" FROM instances WHERE tenant_id = ? AND cluster_id = ? ORDER BY created_at, id", tenantID, clusterID)
}

// Instance implements tenants.InstanceStore.
func (s *Store) Instance(ctx context.Context, tenantID, clusterID, id string) (tenants.Instance, error) {
	return scanInstance(s.db.QueryRowContext(ctx, s.q("SELECT "+instanceCols+" FROM instances WHERE tenant_id = ? AND cluster_id = ? AND id = ?"), tenantID, clusterID, id))
}

// UpdateInstance implements tenants.InstanceStore.
func (s *Store) UpdateInstance(ctx context.Context, tenantID string, in tenants.Instance) error {
	return s.mutate(ctx, tenantID, "UPDATE instances SET base_url = ?, model = ?, gpu = ?, tensor_parallel = ?, price_in_per_mtok = ?, price_out_per_mtok = ?, max_concurrency = ?, quality_prior = ?, disabled = ?, api_key_sealed = ?, updated_at = ?, kind = ? WHERE tenant_id = ? AND cluster_id = ? AND id = ?",
		in.BaseURL, in.Model, in.GPU, in.TensorParallel, in.PriceInPerMTok, in.PriceOutPerMTok, in.MaxConcurrency, in.QualityPrior,
		in.Disabled, sealedArg(in.SealedAPIKey), s.t(in.UpdatedAt), kindArg(in.Kind), tenantID, in.ClusterID, in.ID)
}

// DeleteInstance implements tenants.InstanceStore.
func (s *Store) DeleteInstance(ctx context.Context, tenantID, clusterID, id string) error {
	return s.mutate(ctx, tenantID, "DELETE FROM instances WHERE tenant_id = ? AND cluster_id = ? AND id = ?", tenantID, clusterID, id)
}

// ---- settings ----

// Settings implements tenants.SettingsStore.
func (s *Store) Settings(ctx context.Context, tenantID string) (tenants.Settings, error) {
	var st tenants.Settings
	var def sql.NullString
	var w, o, lim string
	err := s.db.QueryRowContext(ctx, s.q("SELECT default_cluster_id, preset, weights, slo, rate_limits FROM tenant_settings WHERE tenant_id = ?"), tenantID).
		Scan(&def, &st.Preset, &w, &o, &lim)
	if err != nil {
		return st, notFound(err)
	}
	st.DefaultClusterID = def.String
	if err := json.Unmarshal([]byte(w), &st.Weights); err != nil {
		return st, fmt.Errorf("settings weights: %w", err)
	}
	if err := json.Unmarshal([]byte(o), &st.SLO); err != nil {
		return st, fmt.Errorf("settings slo: %w", err)
	}
	if err := json.Unmarshal([]byte(lim), &st.Limits); err != nil {
		return st, fmt.Errorf("settings limits: %w", err)
	}
	return st, nil
}

// PutSettings implements tenants.SettingsStore.
func (s *Store) PutSettings(ctx context.Context, tenantID string, st tenants.Settings) error {
	w, err := jsonText(st.Weights)
	if err != nil {
		return err
	}
	o, err := jsonText(st.SLO)
	if err != nil {
		return err
	}
	lim, err := jsonText(st.Limits)
	if err != nil {
		return err
	}
	return s.mutate(ctx, tenantID, "UPDATE tenant_settings SET default_cluster_id = ?, preset = ?, weights = ?, slo = ?, rate_limits = ? WHERE tenant_id = ?",
		nullable(st.DefaultClusterID), st.Preset, w, o, lim, tenantID)
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// SealedInstanceKeys implements tenants.SealedKeyStore: every instance of
// every tenant that has an upstream key, for key rotation.
func (s *Store) SealedInstanceKeys(ctx context.Context) ([]tenants.SealedKey, error) {
	return queryAll(ctx, s, func(row interface{ Scan(...any) error }) (tenants.SealedKey, error) {
		var k tenants.SealedKey
		err := row.Scan(&k.TenantID, &k.ClusterID, &k.InstanceID, &k.Sealed)
		return k, err
	}, "SELECT tenant_id, cluster_id, id, api_key_sealed FROM instances WHERE api_key_sealed IS NOT NULL ORDER BY tenant_id, id")
}

// ReplaceSealedInstanceKey implements tenants.SealedKeyStore: it writes
// resealed only while the row still holds k.Sealed, so an edit made in the
// meantime is never overwritten. It reports whether the row was updated.
func (s *Store) ReplaceSealedInstanceKey(ctx context.Context, k tenants.SealedKey, resealed []byte) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.q("UPDATE instances SET api_key_sealed = ? WHERE tenant_id = ? AND cluster_id = ? AND id = ? AND api_key_sealed = ?"),
		resealed, k.TenantID, k.ClusterID, k.InstanceID, k.Sealed)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// queryAll runs a query and scans every row with scan; no rows is an empty,
// non-nil slice (lists encode as [] rather than null).
func queryAll[T any](ctx context.Context, s *Store, scan func(interface{ Scan(...any) error }) (T, error), query string, args ...any) ([]T, error) {
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
