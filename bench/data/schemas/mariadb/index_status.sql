-- index variant 'status': a single-column index on status; the claim still sorts, and InnoDB's
-- locking read locks every index record it scans (next-key locks under REPEATABLE READ).
CREATE INDEX jobs_status_idx ON {schema}.jobs (status);
