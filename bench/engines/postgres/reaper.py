"""The reaper: takes back jobs whose lease expired, on its own connection.

Every ``reaper_interval_s`` it runs :func:`bench.engines.postgres.policies.reap_sql` in one
short autocommit transaction: running rows whose ``lease_expires_at`` (database
time) has passed go back to ``pending`` (the expired attempt counts), or to
``dead`` once ``attempts >= max_attempts``. It locks with ``SKIP LOCKED``, so it
never blocks a claimer, and re-checks status and lease in the ``UPDATE``, so a
job completed meanwhile is never resurrected (field case FR-06). Its statement
time is load on the server too and is kept as ``reaper_query_us``.
"""

from __future__ import annotations

import time

import psycopg

from bench.engines.postgres import policies
from bench.measure.metrics import Recorder
from bench.engines.postgres.periodic import Periodic


class Reaper(Periodic):
    """Re-queues expired leases every ``interval_s`` seconds until :meth:`stop`.

    Counts go to ``recorder``: ``lease_expiries`` (jobs taken back),
    ``reaper_dead_lettered`` (of those, the ones past ``max_attempts``),
    ``reaper_runs``; statement errors by SQLSTATE.
    """

    def __init__(self, conn: psycopg.Connection, schema: str, interval_s: float, recorder: Recorder):
        super().__init__(conn, interval_s, recorder)
        self.query = policies.reap_sql(schema)

    def once(self) -> tuple[int, int]:
        """One pass; returns (jobs re-queued, jobs dead-lettered)."""
        started = time.perf_counter()
        rows = self.conn.execute(self.query).fetchall()
        self.query_us_total += int((time.perf_counter() - started) * 1e6)
        return self.count_pass(rows)
