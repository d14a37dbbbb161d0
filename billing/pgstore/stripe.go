package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/routebalance/routebalance/billing"
)

const accountCols = `tenant_id, coalesce(stripe_customer_id, ''), subscription_id, subscription_status, price_id,
	current_period_end, past_due_since, state_at, updated_at`

func scanAccount(r pgx.Row) (billing.Account, error) {
	var (
		a                    billing.Account
		end, pastDu, stateAt *time.Time
	)
	if err := r.Scan(&a.TenantID, &a.StripeCustomerID, &a.SubscriptionID, &a.SubscriptionStatus, &a.PriceID,
		&end, &pastDu, &stateAt, &a.UpdatedAt); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return a, billing.ErrNotFound
		}
		return a, err
	}
	if end != nil {
		a.CurrentPeriodEnd = end.UTC()
	}
	if pastDu != nil {
		a.PastDueSince = pastDu.UTC()
	}
	if stateAt != nil {
		a.StateAt = stateAt.UTC()
	}
	a.UpdatedAt = a.UpdatedAt.UTC()
	return a, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Account returns the tenant's billing account or billing.ErrNotFound.
func (s *Store) Account(ctx context.Context, tenantID string) (billing.Account, error) {
	a, err := scanAccount(s.pool.QueryRow(ctx, `SELECT `+accountCols+` FROM billing_accounts WHERE tenant_id = $1`, tenantID))
	if err != nil && !errors.Is(err, billing.ErrNotFound) {
		return a, fmt.Errorf("billing pgstore: account: %w", err)
	}
	return a, err
}

// Accounts returns every billing account.
func (s *Store) Accounts(ctx context.Context) ([]billing.Account, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+accountCols+` FROM billing_accounts ORDER BY tenant_id`)
	if err != nil {
		return nil, fmt.Errorf("billing pgstore: accounts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (billing.Account, error) { return scanAccount(r) })
	if err != nil {
		return nil, fmt.Errorf("billing pgstore: accounts: %w", err)
	}
	return out, nil
}

// SetCustomer links the tenant to its Stripe customer, creating the
// account row when needed; at is the update time.
func (s *Store) SetCustomer(ctx context.Context, tenantID, customerID string, at time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO billing_accounts (tenant_id, stripe_customer_id, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (tenant_id) DO UPDATE SET stripe_customer_id = EXCLUDED.stripe_customer_id, updated_at = EXCLUDED.updated_at`,
		tenantID, customerID, at)
	if err != nil {
		return fmt.Errorf("billing pgstore: set customer: %w", err)
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
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO billing_webhook_events (event_id, type, tenant_id, received_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (event_id) DO NOTHING`, eventID, evType, ref.TenantID, at)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		applied = true
		if ref.TenantID != "" {
			acct, err = scanAccount(tx.QueryRow(ctx, `SELECT `+accountCols+` FROM billing_accounts WHERE tenant_id = $1 FOR UPDATE`, ref.TenantID))
			if errors.Is(err, billing.ErrNotFound) {
				acct, err = billing.Account{TenantID: ref.TenantID}, nil
			}
		} else {
			acct, err = scanAccount(tx.QueryRow(ctx, `SELECT `+accountCols+` FROM billing_accounts WHERE stripe_customer_id = $1 FOR UPDATE`, ref.CustomerID))
		}
		if err != nil {
			return err
		}
		fn(&acct)
		_, err = tx.Exec(ctx, `INSERT INTO billing_accounts (tenant_id, stripe_customer_id, subscription_id,
			subscription_status, price_id, current_period_end, past_due_since, state_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (tenant_id) DO UPDATE SET stripe_customer_id = EXCLUDED.stripe_customer_id,
			subscription_id = EXCLUDED.subscription_id, subscription_status = EXCLUDED.subscription_status,
			price_id = EXCLUDED.price_id, current_period_end = EXCLUDED.current_period_end,
			past_due_since = EXCLUDED.past_due_since, state_at = EXCLUDED.state_at, updated_at = EXCLUDED.updated_at`,
			acct.TenantID, nullString(acct.StripeCustomerID), acct.SubscriptionID, acct.SubscriptionStatus,
			acct.PriceID, nullTime(acct.CurrentPeriodEnd), nullTime(acct.PastDueSince), nullTime(acct.StateAt), at)
		return err
	})
	if errors.Is(err, billing.ErrNotFound) {
		// Record the event anyway so a replay stays a no-op.
		_, _ = s.pool.Exec(ctx, `INSERT INTO billing_webhook_events (event_id, type, received_at) VALUES ($1, $2, $3)
			ON CONFLICT (event_id) DO NOTHING`, eventID, evType, at)
		return acct, false, err
	}
	if err != nil {
		return acct, false, fmt.Errorf("billing pgstore: apply webhook: %w", err)
	}
	return acct, applied, nil
}

// Aggregate moves the ledger rows that finished before cutoff and are not
// yet aggregated into outbox rows, one per tenant and hour, in one
// transaction. A (tenant, hour) that already has outbox rows gets a new
// one with the next seq for the late rows. unitUSD converts billed USD to
// the integer meter value (in integers: round(billed nano-USD / unit)).
// New rows are created at, and first due at, now (the caller's clock,
// never the database's). It returns the number of outbox rows created.
func (s *Store) Aggregate(ctx context.Context, cutoff, now time.Time, unitUSD float64) (int, error) {
	unit, err := billing.MeterUnit(unitUSD)
	if err != nil {
		return 0, fmt.Errorf("billing pgstore: aggregate: %w", err)
	}
	n := 0
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		n = 0
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(74652701)`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT DISTINCT tenant_id, date_trunc('hour', finished_at, 'UTC') FROM billing_usage
			WHERE outbox_id IS NULL AND finished_at < $1`, cutoff)
		if err != nil {
			return err
		}
		type group struct {
			tenant string
			hour   time.Time
		}
		groups, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (group, error) {
			var g group
			err := r.Scan(&g.tenant, &g.hour)
			return g, err
		})
		if err != nil {
			return err
		}
		for _, g := range groups {
			var seq int
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(seq), 0) + 1 FROM billing_outbox WHERE tenant_id = $1 AND hour = $2`,
				g.tenant, g.hour).Scan(&seq); err != nil {
				return err
			}
			var id int64
			if err := tx.QueryRow(ctx, `INSERT INTO billing_outbox (tenant_id, hour, seq, identifier, requests, tokens, billed_nano, value,
				created_at, next_attempt_at) VALUES ($1, $2, $3, $4, 0, 0, 0, 0, $5, $5) RETURNING id`,
				g.tenant, g.hour, seq, billing.OutboxIdentifier(g.tenant, g.hour, seq), now).Scan(&id); err != nil {
				return err
			}
			// Mark first, then sum what was marked: a row committed by the
			// meter in between is either marked and summed, or neither.
			var (
				reqs, toks int64
				billed     int64
			)
			if err := tx.QueryRow(ctx, `WITH m AS (UPDATE billing_usage SET outbox_id = $1
				WHERE outbox_id IS NULL AND tenant_id = $2 AND finished_at >= $3 AND finished_at < $4 AND finished_at < $5
				RETURNING prompt_tokens + output_tokens AS tok, billed_nano)
				SELECT count(*), coalesce(sum(tok), 0)::bigint, `+sumNano("billed_nano")+` FROM m`,
				id, g.tenant, g.hour, g.hour.Add(time.Hour), cutoff).Scan(&reqs, &toks, &billed); err != nil {
				return err
			}
			if reqs == 0 {
				if _, err := tx.Exec(ctx, `DELETE FROM billing_outbox WHERE id = $1`, id); err != nil {
					return err
				}
				continue
			}
			if _, err := tx.Exec(ctx, `UPDATE billing_outbox SET requests = $2, tokens = $3, billed_nano = $4, value = $5 WHERE id = $1`,
				id, reqs, toks, billed, billing.Nano(billed).Units(unit)); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("billing pgstore: aggregate: %w", err)
	}
	return n, nil
}

// PendingOutbox returns up to limit unsent outbox rows due at now whose
// tenant has a Stripe customer, oldest first.
func (s *Store) PendingOutbox(ctx context.Context, now time.Time, limit int) ([]billing.OutboxItem, error) {
	rows, err := s.pool.Query(ctx, `SELECT o.id, o.tenant_id, a.stripe_customer_id, o.hour, o.seq, o.identifier,
		o.requests, o.tokens, o.billed_nano, o.value, o.attempts
		FROM billing_outbox o JOIN billing_accounts a ON a.tenant_id = o.tenant_id
		WHERE o.sent_at IS NULL AND o.next_attempt_at <= $1 AND a.stripe_customer_id IS NOT NULL
		ORDER BY o.hour, o.id LIMIT $2`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("billing pgstore: pending outbox: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (billing.OutboxItem, error) {
		var (
			o      billing.OutboxItem
			billed int64
		)
		err := r.Scan(&o.ID, &o.TenantID, &o.CustomerID, &o.Hour, &o.Seq, &o.Identifier,
			&o.Requests, &o.Tokens, &billed, &o.Value, &o.Attempts)
		o.Billed = billing.Nano(billed)
		o.Hour = o.Hour.UTC()
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("billing pgstore: pending outbox: %w", err)
	}
	return out, nil
}

// MarkSent records that Stripe accepted outbox row id.
func (s *Store) MarkSent(ctx context.Context, id int64, at time.Time) error {
	if _, err := s.pool.Exec(ctx, `UPDATE billing_outbox SET sent_at = $2, attempts = attempts + 1, last_error = '' WHERE id = $1`, id, at); err != nil {
		return fmt.Errorf("billing pgstore: mark sent: %w", err)
	}
	return nil
}

// MarkFailed records a failed attempt and when to try again.
func (s *Store) MarkFailed(ctx context.Context, id int64, msg string, next time.Time) error {
	if _, err := s.pool.Exec(ctx, `UPDATE billing_outbox SET attempts = attempts + 1, last_error = $2, next_attempt_at = $3 WHERE id = $1`,
		id, msg, next); err != nil {
		return fmt.Errorf("billing pgstore: mark failed: %w", err)
	}
	return nil
}

// OutboxStats counts the tenant's outbox rows: sent and waiting.
func (s *Store) OutboxStats(ctx context.Context, tenantID string) (sent, pending int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE sent_at IS NOT NULL), count(*) FILTER (WHERE sent_at IS NULL)
		FROM billing_outbox WHERE tenant_id = $1`, tenantID).Scan(&sent, &pending)
	if err != nil {
		return 0, 0, fmt.Errorf("billing pgstore: outbox stats: %w", err)
	}
	return sent, pending, nil
}
