-- TENANTS > 1 with index variant 'partial': a second partial index that leads with the queue column,
-- so one tenant's eligible head (the round-robin claim's per-tenant read, the monitor's per-tenant
-- age) is an index probe; the plain claim keeps jobs_pending_claim_order_idx for claim order.
CREATE INDEX jobs_pending_queue_order_idx ON {schema}.jobs (queue, priority, run_at, id)
    WHERE status = 'pending';
