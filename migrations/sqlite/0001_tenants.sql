-- Tenants, users, API keys, clusters, instances and routing settings.
-- JSON-valued settings (policy, weights, SLOs) are kept as TEXT written by
-- the application; times are TEXT in UTC, formatted 2006-01-02T15:04:05.000000Z so they sort.

CREATE TABLE tenants (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    config_version INTEGER NOT NULL DEFAULT 1,
    created_at     TEXT NOT NULL
);

CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    email         TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    created_at    TEXT NOT NULL
);
CREATE INDEX users_tenant ON users (tenant_id);

CREATE TABLE clusters (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    policy     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (tenant_id, id)
);

CREATE TABLE instances (
    id                 TEXT PRIMARY KEY,
    tenant_id          TEXT NOT NULL,
    cluster_id         TEXT NOT NULL,
    base_url           TEXT NOT NULL,
    model              TEXT NOT NULL,
    gpu                TEXT NOT NULL DEFAULT '',
    tensor_parallel    INTEGER NOT NULL DEFAULT 1,
    price_in_per_mtok  REAL NOT NULL DEFAULT 0,
    price_out_per_mtok REAL NOT NULL DEFAULT 0,
    max_concurrency    INTEGER NOT NULL DEFAULT 0,
    quality_prior      REAL NOT NULL DEFAULT 0.5,
    disabled           INTEGER NOT NULL DEFAULT 0,
    api_key_sealed     BLOB,
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL,
    FOREIGN KEY (tenant_id, cluster_id) REFERENCES clusters (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX instances_cluster ON instances (tenant_id, cluster_id);

CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    prefix       TEXT NOT NULL,
    key_hash     TEXT NOT NULL UNIQUE,
    cluster_id   TEXT REFERENCES clusters (id) ON DELETE SET NULL,
    preset       TEXT NOT NULL DEFAULT '',
    weights      TEXT,
    slo          TEXT,
    created_at   TEXT NOT NULL,
    last_used_at TEXT,
    revoked_at   TEXT
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

CREATE TABLE tenant_settings (
    tenant_id          TEXT PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    default_cluster_id TEXT REFERENCES clusters (id) ON DELETE SET NULL,
    preset             TEXT NOT NULL,
    weights            TEXT NOT NULL,
    slo                TEXT NOT NULL
);
