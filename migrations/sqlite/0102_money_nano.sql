-- Money as integers (issue 16 item 8). The usage ledger's cost and billed
-- amounts and the outbox's billed amount move from REAL USD to INTEGER
-- nano-USD (1e-9 USD), which add exactly and cannot be NaN or Infinity. A
-- row whose amount is NULL (SQLite's NaN), ±Infinity, negative or above
-- 9e9 USD (a price of 1e308 per million tokens stored +Infinity before
-- prices were bounded, and made GET /api/v1/usage and /api/v1/billing
-- answer 500) is repaired to 0; its original values are kept in
-- billing_money_repairs.
CREATE TABLE billing_money_repairs (
    table_name TEXT NOT NULL,
    row_key    TEXT NOT NULL,
    cost_usd   TEXT NOT NULL DEFAULT '',
    billed_usd TEXT NOT NULL,
    PRIMARY KEY (table_name, row_key)
);
INSERT INTO billing_money_repairs (table_name, row_key, cost_usd, billed_usd)
    SELECT 'billing_usage', request_id, coalesce(CAST(cost_usd AS TEXT), 'NULL'), coalesce(CAST(billed_usd AS TEXT), 'NULL')
    FROM billing_usage
    WHERE cost_usd IS NULL OR billed_usd IS NULL
       OR NOT (cost_usd BETWEEN 0 AND 9e9) OR NOT (billed_usd BETWEEN 0 AND 9e9);
INSERT INTO billing_money_repairs (table_name, row_key, billed_usd)
    SELECT 'billing_outbox', CAST(id AS TEXT), coalesce(CAST(billed_usd AS TEXT), 'NULL') FROM billing_outbox
    WHERE billed_usd IS NULL OR NOT (billed_usd BETWEEN 0 AND 9e9);

ALTER TABLE billing_usage ADD COLUMN cost_nano INTEGER NOT NULL DEFAULT 0;
ALTER TABLE billing_usage ADD COLUMN billed_nano INTEGER NOT NULL DEFAULT 0;
UPDATE billing_usage SET
    cost_nano   = CASE WHEN cost_usd BETWEEN 0 AND 9e9 THEN CAST(round(cost_usd * 1e9) AS INTEGER) ELSE 0 END,
    billed_nano = CASE WHEN billed_usd BETWEEN 0 AND 9e9 THEN CAST(round(billed_usd * 1e9) AS INTEGER) ELSE 0 END
    WHERE cost_usd IS NOT 0 OR billed_usd IS NOT 0;
ALTER TABLE billing_usage DROP COLUMN cost_usd;
ALTER TABLE billing_usage DROP COLUMN billed_usd;

ALTER TABLE billing_outbox ADD COLUMN billed_nano INTEGER NOT NULL DEFAULT 0;
UPDATE billing_outbox SET
    billed_nano = CASE WHEN billed_usd BETWEEN 0 AND 9e9 THEN CAST(round(billed_usd * 1e9) AS INTEGER) ELSE 0 END
    WHERE billed_usd IS NOT 0;
-- A meter value computed from a bad amount (+Infinity became MinInt64) is
-- recomputed from the repaired amount in the default unit (1 µUSD) while
-- the row is unsent; a sent row keeps what Stripe was told.
UPDATE billing_outbox SET value = CAST(round(billed_nano / 1000.0) AS INTEGER)
    WHERE sent_ms IS NULL AND (value < 0 OR CAST(id AS TEXT) IN
        (SELECT row_key FROM billing_money_repairs WHERE table_name = 'billing_outbox'));
ALTER TABLE billing_outbox DROP COLUMN billed_usd;
