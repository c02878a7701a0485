-- queue-bench: the queue table (docs/design.md, "The queue table").
-- {schema} is replaced by the quoted schema identifier; nothing outside it is touched.
-- The partitioning placeholder after the column list is empty, or
-- PARTITION BY LIST (status) for the 'partitioned' layout. The storage placeholder is
-- WITH (fillfactor = N) (FILLFACTOR below 100), or empty for the 'partitioned' layout: a
-- partitioned table holds no rows and takes no storage parameters, so its jobs_live
-- partition gets it (layout_partitioned.sql).
-- The primary key is added after seeding (bench.db.prepare), as pg_restore does:
-- building an index once is faster than maintaining it row by row.
CREATE TABLE {schema}.jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY,
    queue            text        NOT NULL DEFAULT 'default',
    priority         smallint    NOT NULL DEFAULT 0,
    run_at           timestamptz NOT NULL DEFAULT now(),
    status           text        NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'done', 'failed', 'dead')),
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 5,
    attempt_token    bigint,
    locked_by        text,
    lease_expires_at timestamptz,
    payload          jsonb       NOT NULL DEFAULT '{{}}'::jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    last_error       text
) {partitioning}{storage};

-- Fencing tokens: a fresh, monotonically increasing value per claim.
CREATE SEQUENCE {schema}.attempt_token_seq;
