-- layout 'partitioned': the queue table is partitioned by status (declarative
-- LIST partitioning). A claim (pending -> running) stays inside jobs_live; a
-- completion (running -> done) moves the row into jobs_history, which PostgreSQL
-- does as a delete plus an insert
-- (https://www.postgresql.org/docs/current/ddl-partitioning.html). A locking read
-- that meets a row moved by a concurrent update fails with SQLSTATE 40001.
CREATE TABLE {schema}.jobs_live PARTITION OF {schema}.jobs FOR VALUES IN ('pending', 'running', 'failed')
    {storage};
CREATE TABLE {schema}.jobs_history PARTITION OF {schema}.jobs FOR VALUES IN ('done', 'dead');
