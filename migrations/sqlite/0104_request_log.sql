-- The request log (GET /api/v1/requests): the routing decision behind each
-- ledger row, and an index for newest-first cursor paging per tenant.
-- Rows written before this migration have no decision: weights 0/0/0
-- (shown as unknown), no preset, attempts 1.
ALTER TABLE billing_usage ADD COLUMN predicted_e2e_ms REAL NOT NULL DEFAULT 0;
ALTER TABLE billing_usage ADD COLUMN preset TEXT NOT NULL DEFAULT '';
ALTER TABLE billing_usage ADD COLUMN w_quality REAL NOT NULL DEFAULT 0;
ALTER TABLE billing_usage ADD COLUMN w_cost REAL NOT NULL DEFAULT 0;
ALTER TABLE billing_usage ADD COLUMN w_latency REAL NOT NULL DEFAULT 0;
ALTER TABLE billing_usage ADD COLUMN relaxed TEXT NOT NULL DEFAULT '';
ALTER TABLE billing_usage ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1;
CREATE INDEX billing_usage_tenant_started ON billing_usage (tenant_id, started_ms DESC, request_id DESC);
