package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/routebalance/routebalance/billing"
)

const accountCols = `tenant_id, coalesce(stripe_customer_id, ''), subscription_id, subscription_status, price_id,
	current_period_end_ms, past_due_since_ms, state_at_ms, updated_ms`

type scanner interface{ Scan(dest ...any) error }

func scanAccount(r scanner) (billing.Account, error) {
	var (
		a                     billing.Account
		end, pastDue, stateAt sql.NullInt64
		upd                   int64
	)
	if err := r.Scan(&a.TenantID, &a.StripeCustomerID, &a.SubscriptionID, &a.SubscriptionStatus, &a.PriceID,
		&end, &pastDue, &stateAt, &upd); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return a, billing.ErrNotFound
		}
		return a, err
	}
	if end.Valid {
		a.CurrentPeriodEnd = fromMs(end.Int64)
	}
	if pastDue.Valid {
		a.PastDueSince = fromMs(pastDue.Int64)
	}
	if stateAt.Valid {
		a.StateAt = fromMs(stateAt.Int64)
	}
	a.UpdatedAt = fromMs(upd)
	return a, nil
}

func nullMs(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return toMs(t)
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Account returns the tenant's billing account or billing.ErrNotFound.
func (s *Store) Account(ctx context.Context, tenantID string) (billing.Account, error) {
	a, err := scanAccount(s.db.QueryRowContext(ctx, `SELECT `+accountCols+` FROM billing_accounts WHERE tenant_id = ?`, tenantID))
	if err != nil && !errors.Is(err, billing.ErrNotFound) {
		return a, fmt.Errorf("billing sqlitestore: account: %w", err)
	}
	return a, err
}

// Accounts returns every billing account.
func (s *Store) Accounts(ctx context.Context) ([]billing.Account, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+accountCols+` FROM billing_accounts ORDER BY tenant_id`)
	if err != nil {
		return nil, fmt.Errorf("billing sqlitestore: accounts: %w", err)
	}
	defer rows.Close()
	var out []billing.Account
	for rows.Next() {
		a, err := scanAccount(rows)
		if err != nil {
			return nil, fmt.Errorf("billing sqlitestore: accounts: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// SetCustomer links the tenant to its Stripe customer, creating the
// account row when needed; at is the update time.
func (s *Store) SetCustomer(ctx context.Context, tenantID, customerID string, at time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO billing_accounts (tenant_id, stripe_customer_id, updated_ms) VALUES (?, ?, ?)
		ON CONFLICT (tenant_id) DO UPDATE SET stripe_customer_id = excluded.stripe_customer_id, updated_ms = excluded.updated_ms`,
		tenantID, customerID, toMs(at))
	if err != nil {
		return fmt.Errorf("billing sqlitestore: set customer: %w", err)
	}
	return nil
}

// ApplyWebhook records Stripe event eventID and, only the first time it is
// seen, applies fn to the account ref names and saves it, in one
// transaction; at is when it was received (and the account's update time).
// applied is false for a replayed event. An event about an unknown account
// is recorded with no effect and returns billing.ErrNotFound.
func (s *Store) ApplyWebhook(ctx context.Context, eventID, evType string, ref billing.AccountRef, at time.Time,
	fn func(a *billing.Account)) (acct billing.Account, applied bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return acct, false, fmt.Errorf("billing sqlitestore: apply webhook: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after commit
	res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO billing_webhook_events (event_id, type, tenant_id, received_ms)
		VALUES (?, ?, ?, ?)`, eventID, evType, ref.TenantID, toMs(at))
	if err != nil {
		return acct, false, fmt.Errorf("billing sqlitestore: apply webhook: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return acct, false, nil
	}
	if ref.TenantID != "" {
		acct, err = scanAccount(tx.QueryRowContext(ctx, `SELECT `+accountCols+` FROM billing_accounts WHERE tenant_id = ?`, ref.TenantID))
		if errors.Is(err, billing.ErrNotFound) {
			acct, err = billing.Account{TenantID: ref.TenantID}, nil
		}
	} else {
		acct, err = scanAccount(tx.QueryRowContext(ctx, `SELECT `+accountCols+` FROM billing_accounts WHERE stripe_customer_id = ?`, ref.CustomerID))
	}
	if errors.Is(err, billing.ErrNotFound) {
		// Keep the event recorded so a replay stays a no-op.
		if cerr := tx.Commit(); cerr != nil {
			return acct, false, fmt.Errorf("billing sqlitestore: apply webhook: %w", cerr)
		}
		return acct, false, err
	}
	if err != nil {
		return acct, false, fmt.Errorf("billing sqlitestore: apply webhook: %w", err)
	}
	fn(&acct)
	_, err = tx.ExecContext(ctx, `INSERT INTO billing_accounts (tenant_id, stripe_customer_id, subscription_id,
		subscription_status, price_id, current_period_end_ms, past_due_since_ms, state_at_ms, updated_ms)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant_id) DO UPDATE SET stripe_customer_id = excluded.stripe_customer_id,
		subscription_id = excluded.subscription_id, subscription_status = excluded.subscription_status,
		price_id = excluded.price_id, current_period_end_ms = excluded.current_period_end_ms,
		past_due_since_ms = excluded.past_due_since_ms, state_at_ms = excluded.state_at_ms, updated_ms = excluded.updated_ms`,
		acct.TenantID, nullString(acct.StripeCustomerID), acct.SubscriptionID, acct.SubscriptionStatus,
		acct.PriceID, nullMs(acct.CurrentPeriodEnd), nullMs(acct.PastDueSince), nullMs(acct.StateAt), toMs(at))
	if err != nil {
		return acct, false, fmt.Errorf("billing sqlitestore: apply webhook: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return acct, false, fmt.Errorf("billing sqlitestore: apply webhook: %w", err)
	}
	return acct, true, nil
}

// Aggregate moves the ledger rows that finished before cutoff and are not
// yet aggregated into outbox rows, one per tenant and hour, in one
// transaction; a (tenant, hour) already in the outbox gets a new row with
// the next seq for the late rows. New rows are created at, and first due
// at, now (the caller's clock). It returns the outbox rows created.
func (s *Store) Aggregate(ctx context.Context, cutoff, now time.Time, unitUSD float64) (int, error) {
	unit, err := billing.MeterUnit(unitUSD)
	if err != nil {
		return 0, fmt.Errorf("billing sqlitestore: aggregate: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("billing sqlitestore: aggregate: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after commit
	// Take the write lock first so the group list cannot go stale.
	if _, err := tx.ExecContext(ctx, `UPDATE billing_outbox SET id = id WHERE 0`); err != nil {
		return 0, fmt.Errorf("billing sqlitestore: aggregate: %w", err)
	}
	const hourMs = int64(time.Hour / time.Millisecond)
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT tenant_id, finished_ms - finished_ms % ? FROM billing_usage
		WHERE outbox_id IS NULL AND finished_ms < ?`, hourMs, toMs(cutoff))
	if err != nil {
		return 0, fmt.Errorf("billing sqlitestore: aggregate: %w", err)
	}
	type group struct {
		tenant string
		hour   int64
	}
	var groups []group
	for rows.Next() {
		var g group
		if err := rows.Scan(&g.tenant, &g.hour); err != nil {
			rows.Close()
			return 0, fmt.Errorf("billing sqlitestore: aggregate: %w", err)
		}
		groups = append(groups, g)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("billing sqlitestore: aggregate: %w", err)
	}
	n := 0
	for _, g := range groups {
		var seq int
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) + 1 FROM billing_outbox WHERE tenant_id = ? AND hour_ms = ?`,
			g.tenant, g.hour).Scan(&seq); err != nil {
			return 0, fmt.Errorf("billing sqlitestore: aggregate: %w", err)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO billing_outbox (tenant_id, hour_ms, seq, identifier, requests, tokens,
			billed_nano, value, created_ms, next_attempt_ms) VALUES (?, ?, ?, ?, 0, 0, 0, 0, ?, ?)`,
			g.tenant, g.hour, seq, billing.OutboxIdentifier(g.tenant, fromMs(g.hour), seq), toMs(now), toMs(now))
		if err != nil {
			return 0, fmt.Errorf("billing sqlitestore: aggregate: %w", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return 0, fmt.Errorf("billing sqlitestore: aggregate: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE billing_usage SET outbox_id = ? WHERE outbox_id IS NULL AND tenant_id = ?
			AND finished_ms >= ? AND finished_ms < ? AND finished_ms < ?`, id, g.tenant, g.hour, g.hour+hourMs, toMs(cutoff)); err != nil {
			return 0, fmt.Errorf("billing sqlitestore: aggregate: %w", err)
		}
		var (
			reqs, toks int64
			whole, rem int64
		)
		if err := tx.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(prompt_tokens + output_tokens), 0),
			`+sumNano("billed_nano")+` FROM billing_usage WHERE outbox_id = ?`, id).Scan(&reqs, &toks, &whole, &rem); err != nil {
			return 0, fmt.Errorf("billing sqlitestore: aggregate: %w", err)
		}
		if reqs == 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM billing_outbox WHERE id = ?`, id); err != nil {
				return 0, fmt.Errorf("billing sqlitestore: aggregate: %w", err)
			}
			continue
		}
		billed := joinNano(whole, rem)
		if _, err := tx.ExecContext(ctx, `UPDATE billing_outbox SET requests = ?, tokens = ?, billed_nano = ?, value = ? WHERE id = ?`,
			reqs, toks, int64(billed), billed.Units(unit), id); err != nil {
			return 0, fmt.Errorf("billing sqlitestore: aggregate: %w", err)
		}
		n++
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("billing sqlitestore: aggregate: %w", err)
	}
	return n, nil
}

// PendingOutbox returns up to limit unsent outbox rows due at now whose
// tenant has a Stripe customer, oldest first.
func (s *Store) PendingOutbox(ctx context.Context, now time.Time, limit int) ([]billing.OutboxItem, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT o.id, o.tenant_id, a.stripe_customer_id, o.hour_ms, o.seq, o.identifier,
		o.requests, o.tokens, o.billed_nano, o.value, o.attempts
		FROM billing_outbox o JOIN billing_accounts a ON a.tenant_id = o.tenant_id
		WHERE o.sent_ms IS NULL AND o.next_attempt_ms <= ? AND a.stripe_customer_id IS NOT NULL
		ORDER BY o.hour_ms, o.id LIMIT ?`, toMs(now), limit)
	if err != nil {
		return nil, fmt.Errorf("billing sqlitestore: pending outbox: %w", err)
	}
	defer rows.Close()
	var out []billing.OutboxItem
	for rows.Next() {
		var (
			o            billing.OutboxItem
			hour, billed int64
		)
		if err := rows.Scan(&o.ID, &o.TenantID, &o.CustomerID, &hour, &o.Seq, &o.Identifier,
			&o.Requests, &o.Tokens, &billed, &o.Value, &o.Attempts); err != nil {
			return nil, fmt.Errorf("billing sqlitestore: pending outbox: %w", err)
		}
		o.Hour, o.Billed = fromMs(hour), billing.Nano(billed)
		out = append(out, o)
	}
	return out, rows.Err()
}

// MarkSent records that Stripe accepted outbox row id.
func (s *Store) MarkSent(ctx context.Context, id int64, at time.Time) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE billing_outbox SET sent_ms = ?, attempts = attempts + 1, last_error = '' WHERE id = ?`,
		toMs(at), id); err != nil {
		return fmt.Errorf("billing sqlitestore: mark sent: %w", err)
	}
	return nil
}

// MarkFailed records a failed attempt and when to try again.
func (s *Store) MarkFailed(ctx context.Context, id int64, msg string, next time.Time) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE billing_outbox SET attempts = attempts + 1, last_error = ?, next_attempt_ms = ? WHERE id = ?`,
		msg, toMs(next), id); err != nil {
		return fmt.Errorf("billing sqlitestore: mark failed: %w", err)
	}
	return nil
}

// OutboxStats counts the tenant's outbox rows: sent and waiting.
func (s *Store) OutboxStats(ctx context.Context, tenantID string) (sent, pending int, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT coalesce(sum(sent_ms IS NOT NULL), 0), coalesce(sum(sent_ms IS NULL), 0)
		FROM billing_outbox WHERE tenant_id = ?`, tenantID).Scan(&sent, &pending)
	if err != nil {
		return 0, 0, fmt.Errorf("billing sqlitestore: outbox stats: %w", err)
	}
	return sent, pending, nil
}
