-- TENANTS > 1 with index variant 'composite': the composite index with the queue column after status,
-- so one tenant's eligible head is an index probe (see tenant_index_partial.sql).
CREATE INDEX jobs_status_queue_order_idx ON {schema}.jobs (status, queue, priority, run_at, id);
