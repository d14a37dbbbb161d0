-- Billing: the usage ledger (one row per served request, idempotent by
-- request id), the Stripe meter-event outbox, billing accounts and the
-- webhook events already applied.
CREATE TABLE billing_usage (
    request_id        text PRIMARY KEY,
    tenant_id         text NOT NULL,
    key_id            text NOT NULL DEFAULT '',
    cluster_id        text NOT NULL DEFAULT '',
    instance_id       text NOT NULL DEFAULT '',
    model             text NOT NULL DEFAULT '',
    policy            text NOT NULL DEFAULT '',
    prompt_tokens     integer NOT NULL DEFAULT 0,
    output_tokens     integer NOT NULL DEFAULT 0,
    cost_usd          double precision NOT NULL DEFAULT 0,
    billed_usd        double precision NOT NULL DEFAULT 0,
    predicted_quality double precision NOT NULL DEFAULT 0,
    ttft_ms           double precision NOT NULL DEFAULT 0,
    e2e_ms            double precision NOT NULL DEFAULT 0,
    status            text NOT NULL DEFAULT '',
    http_status       integer NOT NULL DEFAULT 0,
    started_at        timestamptz NOT NULL,
    finished_at       timestamptz NOT NULL,
    -- outbox_id is the outbox row this request was aggregated into; NULL
    -- until the hourly aggregation picks it up.
    outbox_id         bigint
);
CREATE INDEX billing_usage_tenant_time ON billing_usage (tenant_id, finished_at);
CREATE INDEX billing_usage_unaggregated ON billing_usage (finished_at) WHERE outbox_id IS NULL;

CREATE TABLE billing_outbox (
    id              bigserial PRIMARY KEY,
    tenant_id       text NOT NULL,
    hour            timestamptz NOT NULL,
    seq             integer NOT NULL,
    identifier      text NOT NULL UNIQUE,
    requests        bigint NOT NULL,
    tokens          bigint NOT NULL,
    billed_usd      double precision NOT NULL,
    value           bigint NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text NOT NULL DEFAULT '',
    sent_at         timestamptz,
    UNIQUE (tenant_id, hour, seq)
);
CREATE INDEX billing_outbox_pending ON billing_outbox (next_attempt_at) WHERE sent_at IS NULL;

CREATE TABLE billing_accounts (
    tenant_id           text PRIMARY KEY,
    stripe_customer_id  text UNIQUE,
    subscription_id     text NOT NULL DEFAULT '',
    subscription_status text NOT NULL DEFAULT '',
    price_id            text NOT NULL DEFAULT '',
    current_period_end  timestamptz,
    past_due_since      timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE billing_webhook_events (
    event_id    text PRIMARY KEY,
    type        text NOT NULL,
    tenant_id   text NOT NULL DEFAULT '',
    received_at timestamptz NOT NULL DEFAULT now()
);
