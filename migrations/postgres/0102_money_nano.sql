-- Money as integers (issue 16 item 8). The usage ledger's cost and billed
-- amounts and the outbox's billed amount move from double precision USD
-- to bigint nano-USD (1e-9 USD), which add exactly and cannot be NaN or
-- Infinity. A row whose amount is NaN, ±Infinity, negative or above 9e9
-- USD (a price of 1e308 per million tokens stored +Infinity before prices
-- were bounded, and made GET /api/v1/usage and /api/v1/billing answer 500)
-- is repaired to 0; its original values are kept in billing_money_repairs.
CREATE TABLE billing_money_repairs (
    table_name text NOT NULL,
    row_key    text NOT NULL,
    cost_usd   text NOT NULL DEFAULT '',
    billed_usd text NOT NULL,
    PRIMARY KEY (table_name, row_key)
);
INSERT INTO billing_money_repairs (table_name, row_key, cost_usd, billed_usd)
    SELECT 'billing_usage', request_id, cost_usd::text, billed_usd::text FROM billing_usage
    WHERE NOT (cost_usd BETWEEN 0 AND 9e9) OR NOT (billed_usd BETWEEN 0 AND 9e9);
INSERT INTO billing_money_repairs (table_name, row_key, billed_usd)
    SELECT 'billing_outbox', id::text, billed_usd::text FROM billing_outbox
    WHERE NOT (billed_usd BETWEEN 0 AND 9e9);

ALTER TABLE billing_usage
    ADD COLUMN cost_nano   bigint NOT NULL DEFAULT 0,
    ADD COLUMN billed_nano bigint NOT NULL DEFAULT 0;
UPDATE billing_usage SET
    cost_nano   = CASE WHEN cost_usd BETWEEN 0 AND 9e9 THEN round(cost_usd * 1e9)::bigint ELSE 0 END,
    billed_nano = CASE WHEN billed_usd BETWEEN 0 AND 9e9 THEN round(billed_usd * 1e9)::bigint ELSE 0 END
    WHERE cost_usd <> 0 OR billed_usd <> 0;
ALTER TABLE billing_usage DROP COLUMN cost_usd, DROP COLUMN billed_usd;

ALTER TABLE billing_outbox ADD COLUMN billed_nano bigint NOT NULL DEFAULT 0;
UPDATE billing_outbox SET
    billed_nano = CASE WHEN billed_usd BETWEEN 0 AND 9e9 THEN round(billed_usd * 1e9)::bigint ELSE 0 END
    WHERE billed_usd <> 0;
-- A meter value computed from a bad amount (+Infinity became MinInt64) is
-- recomputed from the repaired amount in the default unit (1 µUSD) while
-- the row is unsent; a sent row keeps what Stripe was told.
UPDATE billing_outbox SET value = round(billed_nano / 1000.0)::bigint
    WHERE sent_at IS NULL AND (value < 0 OR id::text IN
        (SELECT row_key FROM billing_money_repairs WHERE table_name = 'billing_outbox'));
ALTER TABLE billing_outbox DROP COLUMN billed_usd;
