-- A cluster's uploaded quality data (POST /api/v1/clusters/{id}/quality-data):
-- the valid records as gzip-compressed JSON lines, rebuilt into the cluster's
-- index at start-up. One row per cluster; it goes with the cluster.
CREATE TABLE quality_data (
    cluster_id  text PRIMARY KEY REFERENCES clusters (id) ON DELETE CASCADE,
    tenant_id   text NOT NULL,
    uploaded_ms bigint NOT NULL,
    records     integer NOT NULL,
    meta        text NOT NULL,
    data        bytea NOT NULL
);
