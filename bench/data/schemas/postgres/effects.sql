-- queue-bench: the downstream effects of the jobs' work (EFFECTS; docs/effects.md), one row per effect:
-- the job's logical id (what deduplication keys on), the attempt token of the claim whose work wrote it
-- (what fencing keys on) and when. The unique placeholder is empty, or UNIQUE (logical_id) for
-- EFFECTS=idempotent, whose insert is ON CONFLICT (logical_id) DO NOTHING.
CREATE TABLE {schema}.effects (
    logical_id    bigint      NOT NULL,
    attempt_token bigint      NOT NULL,
    written_at    timestamptz NOT NULL DEFAULT clock_timestamp(){unique}
);
