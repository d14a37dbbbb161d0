// Package sqlitestore is the SQLite (database/sql, modernc.org/sqlite)
// storage of billing: the usage ledger written in one transaction per
// batch with INSERT OR IGNORE, the usage aggregation, the Stripe outbox,
// billing accounts and processed webhook events. Times are stored as Unix
// milliseconds. Tables come from migrations/sqlite/0100_billing.sql.
package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/routebalance/routebalance/billing"
)

// Store is the billing storage over a SQLite handle.
type Store struct {
	db *sql.DB
	// insert is Insert's prepared statement, made on first use and kept
	// for the handle's life (it is closed with the *sql.DB): preparing
	// it per batch cost ~12 µs of CPU per commit (BenchmarkInsert).
	mu     sync.Mutex
	insert *sql.Stmt
}

// New returns a Store on db (migrations already applied).
func New(db *sql.DB) *Store { return &Store{db: db} }

var _ billing.Ledger = (*Store)(nil)

func toMs(t time.Time) int64 { return t.UnixMilli() }

func fromMs(v int64) time.Time { return time.UnixMilli(v).UTC() }

func durMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// usageArity is the number of columns Insert writes.
const usageArity = 25

const insertUsage = `INSERT OR IGNORE INTO billing_usage (request_id, tenant_id, key_id,
	cluster_id, instance_id, model, policy, prompt_tokens, output_tokens, cost_nano, billed_nano,
	predicted_quality, ttft_ms, e2e_ms, status, http_status, started_ms, finished_ms,
	predicted_e2e_ms, preset, w_quality, w_cost, w_latency, relaxed, attempts)
	VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`

// appendUsageArgs appends e's values for insertUsage.
func appendUsageArgs(args []any, e *billing.UsageEvent) []any {
	// Integers go in as int64, the driver's own type, so database/sql
	// does not convert (and box) them a second time.
	return append(args, e.RequestID, e.TenantID, e.KeyID, e.ClusterID, e.InstanceID, e.Model,
		e.Policy, int64(e.PromptTokens), int64(e.OutputTokens), int64(max(e.Cost, 0)), int64(max(e.Billed, 0)), e.PredictedQuality,
		durMs(e.TTFT), durMs(e.E2E), e.Status, int64(e.HTTPStatus), toMs(e.StartedAt), toMs(e.FinishedAt),
		durMs(e.PredictedE2E), e.Preset, e.Weights.Quality, e.Weights.Cost, e.Weights.Latency,
		billing.JoinRelaxed(e.Relaxed), int64(max(1, e.Attempts)))
}

// insertStmt returns the prepared insertUsage.
func (s *Store) insertStmt(ctx context.Context) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.insert != nil {
		return s.insert, nil
	}
	st, err := s.db.PrepareContext(ctx, insertUsage)
	if err != nil {
		return nil, err
	}
	s.insert = st
	return st, nil
}

// Insert writes evs in one transaction with INSERT OR IGNORE and returns
// the inserted request ids (an id already in the ledger, or twice in evs,
// is inserted once).
func (s *Store) Insert(ctx context.Context, evs []billing.UsageEvent) ([]string, error) {
	st, err := s.insertStmt(ctx)
	if err != nil {
		return nil, fmt.Errorf("billing sqlitestore: prepare: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("billing sqlitestore: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after commit
	ins := tx.StmtContext(ctx, st)
	ids := make([]string, 0, len(evs))
	args := make([]any, 0, usageArity)
	// The rows run without ctx's cancellation: given a context that can
	// end, the driver starts a goroutine per statement to interrupt it
	// (~15 % of the insert's CPU). Nothing here can wait (the transaction
	// took the write lock at BEGIN IMMEDIATE), ctx is checked before each
	// row, and its end still rolls the transaction back (database/sql
	// watches it for the Tx).
	rowCtx := context.WithoutCancel(ctx)
	for i := range evs {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("billing sqlitestore: insert usage: %w", err)
		}
		res, err := ins.ExecContext(rowCtx, appendUsageArgs(args[:0], &evs[i])...)
		if err != nil {
			return nil, fmt.Errorf("billing sqlitestore: insert usage: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			ids = append(ids, evs[i].RequestID)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("billing sqlitestore: commit: %w", err)
	}
	return ids, nil
}

// sumNano sums an INTEGER nano-USD column without SQLite's "integer
// overflow" error: as whole dollars and the nano remainder, each far from
// overflowing, recombined by joinNano.
func sumNano(col string) string {
	return `coalesce(sum(` + col + ` / 1000000000), 0), coalesce(sum(` + col + ` % 1000000000), 0)`
}

// joinNano returns whole × 10⁹ + rem, saturating at billing.MaxNano.
func joinNano(whole, rem int64) billing.Nano {
	if whole > int64(billing.MaxNano/billing.NanoPerUSD) {
		return billing.MaxNano
	}
	return billing.Nano(whole * int64(billing.NanoPerUSD)).Add(billing.Nano(rem))
}

// PeriodSpend returns billed totals per tenant and key since since.
func (s *Store) PeriodSpend(ctx context.Context, since time.Time) ([]billing.PeriodSpend, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT tenant_id, key_id, `+sumNano("billed_nano")+` FROM billing_usage
		WHERE finished_ms >= ? GROUP BY tenant_id, key_id`, toMs(since))
	if err != nil {
		return nil, fmt.Errorf("billing sqlitestore: period spend: %w", err)
	}
	defer rows.Close()
	var out []billing.PeriodSpend
	for rows.Next() {
		var (
			p         billing.PeriodSpend
			whole, rm int64
		)
		if err := rows.Scan(&p.TenantID, &p.KeyID, &whole, &rm); err != nil {
			return nil, fmt.Errorf("billing sqlitestore: period spend: %w", err)
		}
		p.Billed = joinNano(whole, rm)
		out = append(out, p)
	}
	return out, rows.Err()
}

// Usage aggregates the tenant's ledger rows in [q.From, q.To) in memory
// (SQLite has no percentile aggregate).
func (s *Store) Usage(ctx context.Context, q billing.UsageQuery) (billing.UsageReport, error) {
	if err := q.Validate(); err != nil {
		return billing.UsageReport{}, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT model, instance_id, key_id, prompt_tokens, output_tokens,
		cost_nano, billed_nano, ttft_ms, e2e_ms, predicted_quality, finished_ms FROM billing_usage
		WHERE tenant_id = ? AND finished_ms >= ? AND finished_ms < ?`, q.TenantID, toMs(q.From), toMs(q.To))
	if err != nil {
		return billing.UsageReport{}, fmt.Errorf("billing sqlitestore: usage: %w", err)
	}
	defer rows.Close()
	groups, total := billing.NewAccumulator(), billing.NewAccumulator()
	for rows.Next() {
		var (
			model, inst, key string
			s                billing.UsageSample
			fin, c, b        int64
		)
		if err := rows.Scan(&model, &inst, &key, &s.PromptTokens, &s.OutputTokens, &c, &b,
			&s.TTFTMs, &s.E2EMs, &s.Quality, &fin); err != nil {
			return billing.UsageReport{}, fmt.Errorf("billing sqlitestore: usage: %w", err)
		}
		s.Cost, s.Billed = billing.Nano(c), billing.Nano(b)
		total.Add(s)
		s.Group = billing.GroupOf(q.GroupBy, fromMs(fin), model, inst, key)
		groups.Add(s)
	}
	if err := rows.Err(); err != nil {
		return billing.UsageReport{}, fmt.Errorf("billing sqlitestore: usage: %w", err)
	}
	rep := billing.UsageReport{From: q.From, To: q.To, GroupBy: q.GroupBy, Rows: groups.Rows()}
	if t := total.Rows(); len(t) > 0 {
		rep.Total = t[0]
	}
	return rep, nil
}
