-- index variant 'partial': claim order over pending rows only, so finished history
-- does not grow it. run_at <= now() cannot be part of the predicate (now() is not
-- immutable: https://www.postgresql.org/docs/current/indexes-partial.html).
CREATE INDEX jobs_pending_claim_order_idx ON {schema}.jobs (priority, run_at, id)
    WHERE status = 'pending';
