-- queue-bench: the downstream effects of the jobs' work (EFFECTS; docs/effects.md), one row per effect:
-- the job's logical id (what deduplication keys on), the attempt token of the claim whose work wrote it
-- (what fencing keys on) and when (UTC, as every time of the tool's sessions). EFFECTS=idempotent adds
-- effects_unique.sql: a unique key on the logical id, which its INSERT IGNORE relies on.
CREATE TABLE {schema}.effects (
    logical_id    BIGINT      NOT NULL,
    attempt_token BIGINT      NOT NULL,
    written_at    DATETIME(6) NOT NULL DEFAULT NOW(6)
) ENGINE = InnoDB;
