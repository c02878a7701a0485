-- TENANTS > 1 with index variant 'covering': the covering index with the queue column after status,
-- id carried as INCLUDE (see index_covering.sql and tenant_index_partial.sql).
CREATE INDEX jobs_status_queue_covering_idx ON {schema}.jobs (status, queue, priority, run_at) INCLUDE (id);
