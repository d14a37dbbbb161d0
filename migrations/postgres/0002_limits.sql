-- Rate limits (tenants.Limits as JSON {"rpm","tpm","max_concurrency"},
-- 0 = unlimited) of each API key and each tenant.
ALTER TABLE api_keys ADD COLUMN rate_limits text NOT NULL DEFAULT '{}';
ALTER TABLE tenant_settings ADD COLUMN rate_limits text NOT NULL DEFAULT '{}';
