-- A cluster's LLM-judge settings (PUT /api/v1/clusters/{id}/quality-judge):
-- {enabled, model, sample_rate, monthly_budget_usd} as JSON. It goes with
-- the cluster.
CREATE TABLE quality_judge (
    cluster_id text PRIMARY KEY REFERENCES clusters (id) ON DELETE CASCADE,
    tenant_id  text NOT NULL,
    settings   text NOT NULL
);
