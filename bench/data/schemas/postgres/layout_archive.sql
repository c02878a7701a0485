-- layout 'archive': finished rows live in an archive table. Seeded history goes
-- there, and a mover (bench.mover) on its own connection moves rows that reach a
-- terminal state (done, dead) out of the queue table while the load runs.
CREATE TABLE {schema}.jobs_archive (LIKE {schema}.jobs INCLUDING DEFAULTS);
-- Every job, wherever it lives now: what the end-of-run audit reads.
CREATE VIEW {schema}.jobs_all AS
    SELECT * FROM {schema}.jobs UNION ALL SELECT * FROM {schema}.jobs_archive;
