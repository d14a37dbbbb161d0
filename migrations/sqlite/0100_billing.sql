-- Billing: the usage ledger (one row per served request, idempotent by
-- request id), the Stripe meter-event outbox, billing accounts and the
-- webhook events already applied. Times are Unix milliseconds (UTC).
CREATE TABLE billing_usage (
    request_id        TEXT PRIMARY KEY,
    tenant_id         TEXT NOT NULL,
    key_id            TEXT NOT NULL DEFAULT '',
    cluster_id        TEXT NOT NULL DEFAULT '',
    instance_id       TEXT NOT NULL DEFAULT '',
    model             TEXT NOT NULL DEFAULT '',
    policy            TEXT NOT NULL DEFAULT '',
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    output_tokens     INTEGER NOT NULL DEFAULT 0,
    cost_usd          REAL NOT NULL DEFAULT 0,
    billed_usd        REAL NOT NULL DEFAULT 0,
    predicted_quality REAL NOT NULL DEFAULT 0,
    ttft_ms           REAL NOT NULL DEFAULT 0,
    e2e_ms            REAL NOT NULL DEFAULT 0,
    status            TEXT NOT NULL DEFAULT '',
    http_status       INTEGER NOT NULL DEFAULT 0,
    started_ms        INTEGER NOT NULL,
    finished_ms       INTEGER NOT NULL,
    outbox_id         INTEGER
);
CREATE INDEX billing_usage_tenant_time ON billing_usage (tenant_id, finished_ms);
CREATE INDEX billing_usage_unaggregated ON billing_usage (finished_ms) WHERE outbox_id IS NULL;

CREATE TABLE billing_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id       TEXT NOT NULL,
    hour_ms         INTEGER NOT NULL,
    seq             INTEGER NOT NULL,
    identifier      TEXT NOT NULL UNIQUE,
    requests        INTEGER NOT NULL,
    tokens          INTEGER NOT NULL,
    billed_usd      REAL NOT NULL,
    value           INTEGER NOT NULL,
    created_ms      INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT NOT NULL DEFAULT '',
    sent_ms         INTEGER,
    UNIQUE (tenant_id, hour_ms, seq)
);
CREATE INDEX billing_outbox_pending ON billing_outbox (next_attempt_ms) WHERE sent_ms IS NULL;

CREATE TABLE billing_accounts (
    tenant_id           TEXT PRIMARY KEY,
    stripe_customer_id  TEXT UNIQUE,
    subscription_id     TEXT NOT NULL DEFAULT '',
    subscription_status TEXT NOT NULL DEFAULT '',
    price_id            TEXT NOT NULL DEFAULT '',
    current_period_end_ms INTEGER,
    past_due_since_ms   INTEGER,
    updated_ms          INTEGER NOT NULL
);

CREATE TABLE billing_webhook_events (
    event_id    TEXT PRIMARY KEY,
    type        TEXT NOT NULL,
    tenant_id   TEXT NOT NULL DEFAULT '',
    received_ms INTEGER NOT NULL
);
