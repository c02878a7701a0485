-- index variant 'generated': what replaces a partial index on MariaDB, first choice. A stored
-- generated column that is 1 for a pending row and NULL otherwise, leading an index in claim
-- order. InnoDB indexes NULLs too, so finished rows still have entries, all under the NULL key:
-- the claim's range (claim_pending = 1) never meets them.
-- https://mariadb.com/kb/en/generated-columns/
ALTER TABLE {schema}.jobs
    ADD COLUMN claim_pending TINYINT AS (CASE WHEN status = 'pending' THEN 1 END) STORED,
    ADD INDEX jobs_claim_pending_idx (claim_pending, priority, run_at, id);
