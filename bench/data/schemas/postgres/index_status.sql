-- index variant 'status': a single-column index on status; the claim still sorts.
CREATE INDEX jobs_status_idx ON {schema}.jobs (status);
