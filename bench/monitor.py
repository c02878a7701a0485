"""Database-side sampling, once a second, on one extra connection.

One round trip per sample returns queue depth (eligible rows), oldest eligible
age (``now() - min(run_at)`` over eligible rows, 0 when none), running rows,
lock waiters (``pg_stat_activity`` rows of this database with
``wait_event_type = 'Lock'``, see
https://www.postgresql.org/docs/current/monitoring-stats.html#WAIT-EVENT-TABLE)
and dead tuples of the queue table (``pg_stat_user_tables.n_dead_tup``, which
the statistics system updates with a delay of up to ``stats_fetch_consistency``
/ backend flush interval, about a second). The monitor's own query is load on
the server too: its wall time is recorded as ``monitor_query_us``. Without an
index on the eligible predicate (``INDEX=none``) each sample is a sequential
scan of the whole table; the report shows that cost rather than hiding it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg
from psycopg import sql

_SAMPLE = """\
SELECT
  (SELECT count(*) FROM {jobs} WHERE status = 'pending' AND run_at <= now()) AS queue_depth,
  (SELECT coalesce(extract(epoch FROM now() - min(run_at)), 0)::float8
     FROM {jobs} WHERE status = 'pending' AND run_at <= now()) AS oldest_eligible_age_s,
  (SELECT count(*) FROM {jobs} WHERE status = 'running') AS running,
  (SELECT count(*) FROM pg_stat_activity
     WHERE wait_event_type = 'Lock' AND datname = current_database()) AS lock_waiters,
  (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = {regclass}::regclass) AS dead_tuples"""

SAMPLE_COLUMNS = ("queue_depth", "oldest_eligible_age_s", "running", "lock_waiters", "dead_tuples")


@dataclass
class Sample:
    """One database sample: the :data:`SAMPLE_COLUMNS` plus its own cost in µs."""

    queue_depth: int
    oldest_eligible_age_s: float
    running: int
    lock_waiters: int
    dead_tuples: int | None
    monitor_query_us: int

    def as_row(self) -> dict:
        """The sample as a flat dict keyed by column name."""
        return dict(self.__dict__)


class Monitor:
    """Samples the queue table over its own autocommit connection.

    ``statement_timeout`` bounds one sample (default 5 s) so a slow scan cannot
    pile samples up; a sample that fails returns None and is counted in
    ``failures``.
    """

    def __init__(self, conn: psycopg.Connection, schema: str, statement_timeout_ms: int = 5000):
        self.conn = conn
        self.failures = 0
        self.query = sql.SQL(_SAMPLE).format(
            jobs=sql.Identifier(schema, "jobs"),
            regclass=sql.Literal(f"{sql.Identifier(schema).as_string(None)}.jobs"),
        )
        conn.execute(sql.SQL("SET statement_timeout = {}").format(sql.Literal(statement_timeout_ms)))
        conn.execute("SET application_name = 'queue-bench monitor'")

    def sample(self) -> Sample | None:
        """Take one sample (one round trip). Returns None if the query failed."""
        started = time.perf_counter()
        try:
            row = self.conn.execute(self.query).fetchone()
        except psycopg.Error:
            self.failures += 1
            return None
        cost_us = int((time.perf_counter() - started) * 1e6)
        return Sample(int(row[0]), float(row[1]), int(row[2]), int(row[3]),
                      None if row[4] is None else int(row[4]), cost_us)
