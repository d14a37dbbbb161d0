-- Tenants, users, API keys, clusters, instances and routing settings.
-- JSON-valued settings (policy, weights, SLOs) are kept as text written by
-- the application; times are timestamptz in UTC.

CREATE TABLE tenants (
    id             text PRIMARY KEY,
    name           text NOT NULL,
    config_version bigint NOT NULL DEFAULT 1,
    created_at     timestamptz NOT NULL
);

CREATE TABLE users (
    id            text PRIMARY KEY,
    tenant_id     text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    email         text NOT NULL UNIQUE,
    password_hash text NOT NULL,
    created_at    timestamptz NOT NULL
);
CREATE INDEX users_tenant ON users (tenant_id);

CREATE TABLE clusters (
    id         text PRIMARY KEY,
    tenant_id  text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       text NOT NULL,
    policy     text NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    UNIQUE (tenant_id, id)
);

CREATE TABLE instances (
    id                 text PRIMARY KEY,
    tenant_id          text NOT NULL,
    cluster_id         text NOT NULL,
    base_url           text NOT NULL,
    model              text NOT NULL,
    gpu                text NOT NULL DEFAULT '',
    tensor_parallel    integer NOT NULL DEFAULT 1,
    price_in_per_mtok  double precision NOT NULL DEFAULT 0,
    price_out_per_mtok double precision NOT NULL DEFAULT 0,
    max_concurrency    integer NOT NULL DEFAULT 0,
    quality_prior      double precision NOT NULL DEFAULT 0.5,
    disabled           boolean NOT NULL DEFAULT false,
    api_key_sealed     bytea,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    FOREIGN KEY (tenant_id, cluster_id) REFERENCES clusters (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX instances_cluster ON instances (tenant_id, cluster_id);

CREATE TABLE api_keys (
    id           text PRIMARY KEY,
    tenant_id    text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name         text NOT NULL,
    prefix       text NOT NULL,
    key_hash     text NOT NULL UNIQUE,
    cluster_id   text REFERENCES clusters (id) ON DELETE SET NULL,
    preset       text NOT NULL DEFAULT '',
    weights      text,
    slo          text,
    created_at   timestamptz NOT NULL,
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

CREATE TABLE tenant_settings (
    tenant_id          text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    default_cluster_id text REFERENCES clusters (id) ON DELETE SET NULL,
    preset             text NOT NULL,
    weights            text NOT NULL,
    slo                text NOT NULL
);
