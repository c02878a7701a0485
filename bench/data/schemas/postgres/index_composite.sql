-- index variant 'composite': (status, priority, run_at, id) serves the eligible
-- predicate and the claim order, but also indexes every finished row.
CREATE INDEX jobs_status_claim_order_idx ON {schema}.jobs (status, priority, run_at, id);
