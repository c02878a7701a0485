-- queue-bench: the queue table on MariaDB (InnoDB), docs/design.md "The queue table".
-- {schema} is replaced by the quoted database name (a MariaDB "schema" is a database); nothing
-- outside it is touched. Times are DATETIME(6) in UTC: every session of the tool sets
-- time_zone = '+00:00', so NOW(6) and UNIX_TIMESTAMP() agree with the run's clock.
-- InnoDB clusters rows by the primary key; secondary indexes (the index variant) are added after
-- seeding, as a dump restore does.
CREATE TABLE {schema}.jobs (
    id               BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    queue            VARCHAR(64)  NOT NULL DEFAULT 'default',
    priority         SMALLINT     NOT NULL DEFAULT 0,
    run_at           DATETIME(6)  NOT NULL DEFAULT NOW(6),
    status           VARCHAR(8)   NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'done', 'failed', 'dead')),
    attempts         INT          NOT NULL DEFAULT 0,
    max_attempts     INT          NOT NULL DEFAULT 5,
    attempt_token    BIGINT,
    locked_by        VARCHAR(64),
    lease_expires_at DATETIME(6),
    payload          JSON         NOT NULL DEFAULT '{{}}',
    created_at       DATETIME(6)  NOT NULL DEFAULT NOW(6),
    started_at       DATETIME(6),
    finished_at      DATETIME(6),
    last_error       TEXT
) ENGINE = InnoDB;

-- Fencing tokens: a fresh, monotonically increasing value per claimed row (MariaDB 10.3+ sequences).
CREATE SEQUENCE {schema}.attempt_token_seq NOCACHE;
