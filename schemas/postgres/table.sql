-- queue-bench: the queue table (DESIGN.md "The queue table").
-- {schema} is replaced by the quoted schema identifier; nothing outside it is touched.
CREATE TABLE {schema}.jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
);

-- Fencing tokens: a fresh, monotonically increasing value per claim.
CREATE SEQUENCE {schema}.attempt_token_seq;
