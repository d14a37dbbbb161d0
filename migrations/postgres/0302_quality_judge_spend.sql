-- A cluster's LLM-judge spend per calendar month (UTC, "2006-01"), in
-- nano-USD, and the labels it bought: the judge's monthly budget survives
-- restarts and is shared by every replica (each adds its calls' cost). It
-- goes with the cluster.
CREATE TABLE quality_judge_spend (
    cluster_id text NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    month      text NOT NULL,
    tenant_id  text NOT NULL,
    spent_nano bigint NOT NULL DEFAULT 0,
    labels     integer NOT NULL DEFAULT 0,
    PRIMARY KEY (cluster_id, month)
);
