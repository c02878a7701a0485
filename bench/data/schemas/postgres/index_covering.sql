-- index variant 'covering': the key columns the claim filters and sorts on, with
-- id carried as a non-key INCLUDE column (https://www.postgresql.org/docs/current/indexes-index-only-scans.html).
-- A locking read (FOR UPDATE) must visit the heap to lock each row, so it cannot
-- be an Index Only Scan whatever the index covers; and id, not being a key
-- column, cannot serve the ORDER BY tie-breaker. The plan capture shows both.
CREATE INDEX jobs_status_claim_covering_idx ON {schema}.jobs (status, priority, run_at) INCLUDE (id);
