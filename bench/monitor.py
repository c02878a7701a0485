"""Database-side sampling, once a second, on one extra connection.

Every second, one round trip returns:

- oldest eligible age: ``now() - min(run_at)`` over eligible rows (0 when none),
  computed as the minimum of each priority's oldest eligible row, so that with
  the ``partial`` and ``composite`` variants it is a handful of index probes;
- lock waiters: ``pg_stat_activity`` rows of this database with
  ``wait_event_type = 'Lock'``
  (https://www.postgresql.org/docs/current/monitoring-stats.html#WAIT-EVENT-TABLE);
- dead tuples of the queue table (``pg_stat_user_tables.n_dead_tup``, which lags
  by up to a second: backends flush their counters at most once a second).

Queue depth (eligible rows) and running rows are exact ``count(*)`` s, whose cost
grows with the table (an index-only scan that must visit a heap being updated
thousands of times a second, and a sequential scan for ``running`` under the
``partial`` variant). They ride on the same round trip, but only as often as
keeps their measured cost within :data:`COUNT_BUDGET` of the server's time: on a
small table every second, on a large one every few seconds (seconds without
them have empty cells). The monitor's own query time is recorded every second
as ``monitor_query_us``; under ``INDEX=none`` every sample is a sequential scan
and that cost shows there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg
from psycopg import sql

#: Largest share of wall time the exact counts may take (their query time / interval).
COUNT_BUDGET = 0.02

_CHEAP = """\
  (SELECT coalesce(extract(epoch FROM now() - min(h.run_at)), 0)::float8
     FROM unnest(%(priorities)s::smallint[]) AS p(priority)
     CROSS JOIN LATERAL (
       SELECT run_at FROM {jobs}
       WHERE status = 'pending' AND priority = p.priority AND run_at <= now()
       ORDER BY run_at LIMIT 1) AS h) AS oldest_eligible_age_s,
  (SELECT count(*) FROM pg_stat_activity
     WHERE wait_event_type = 'Lock' AND datname = current_database()) AS lock_waiters,
  (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = {regclass}::regclass) AS dead_tuples"""

_COUNTS = """,
  (SELECT count(*) FROM {jobs} WHERE status = 'pending' AND run_at <= now()) AS queue_depth,
  (SELECT count(*) FROM {jobs} WHERE status = 'running') AS running"""


@dataclass
class Sample:
    """One database sample; ``queue_depth``/``running`` are None when not counted this second."""

    oldest_eligible_age_s: float
    lock_waiters: int
    dead_tuples: int | None
    queue_depth: int | None
    running: int | None
    monitor_query_us: int

    def as_row(self) -> dict:
        """The sample as a flat dict keyed by ``intervals.csv`` column name."""
        return dict(self.__dict__)


class Monitor:
    """Samples the queue table over its own autocommit connection.

    ``priorities``: the priority values jobs can have (the oldest-age probe looks
    at each). ``statement_timeout`` bounds one sample (default 5 s); a sample that
    fails returns None and is counted in ``failures``.
    """

    def __init__(self, conn: psycopg.Connection, schema: str, priorities: tuple[int, ...] = (0,),
                 statement_timeout_ms: int = 5000):
        self.conn = conn
        self.failures = 0
        self.priorities = list(priorities)
        names = {"jobs": sql.Identifier(schema, "jobs"),
                 "regclass": sql.Literal(f"{sql.Identifier(schema).as_string(None)}.jobs")}
        self.cheap_query = sql.SQL("SELECT" + _CHEAP).format(**names)
        self.full_query = sql.SQL("SELECT" + _CHEAP + _COUNTS).format(**names)
        self._next_count_s = 0.0
        conn.execute(sql.SQL("SET statement_timeout = {}").format(sql.Literal(statement_timeout_ms)))

    def sample(self, *, force_counts: bool = False) -> Sample | None:
        """Take one sample (one round trip). Returns None if the query failed."""
        now = time.monotonic()
        counting = force_counts or now >= self._next_count_s
        started = time.perf_counter()
        try:
            row = self.conn.execute(self.full_query if counting else self.cheap_query,
                                    {"priorities": self.priorities}).fetchone()
        except psycopg.Error:
            self.failures += 1
            return None
        cost_s = time.perf_counter() - started
        if counting:
            # Next count after cost / budget seconds: counts take at most COUNT_BUDGET of the time.
            self._next_count_s = now + cost_s / COUNT_BUDGET
        return Sample(
            oldest_eligible_age_s=float(row[0]), lock_waiters=int(row[1]),
            dead_tuples=None if row[2] is None else int(row[2]),
            queue_depth=int(row[3]) if counting else None, running=int(row[4]) if counting else None,
            monitor_query_us=int(cost_s * 1e6))
