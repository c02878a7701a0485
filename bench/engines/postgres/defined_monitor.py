"""The per-second monitor and the reaper of a queue definition's queue.

The monitor is :class:`bench.engines.postgres.monitor.Monitor` with its table queries written from
the definition: the statistics of its table (dead tuples, tuples, indexes but the primary key,
autovacuum runs), the oldest eligible age ``now() - min(eligible_at)`` over the rows matching
``predicates.eligible``, and the exact counts of eligible and running rows. How fast these answer
depends on the definition's own indexes; the sampler keeps their cost within its budget and records
it (``monitor_query_us``), as for the built-in queue. The reaper runs the definition's ``reaper``
statement every ``REAPER_INTERVAL_S``; the rows it returns are the jobs taken back, their second
column true (or ``dead``) for those dead-lettered.
"""

from __future__ import annotations

import time
from typing import Callable

import psycopg
from psycopg import sql

from bench.config.queue_definition import QueueDefinition
from bench.engines.postgres import defined_sql
from bench.engines.postgres.monitor import _STATS, Monitor
from bench.engines.postgres.periodic import Periodic
from bench.measure.metrics import Recorder

_AGE = """\
SELECT 0::smallint, coalesce(extract(epoch FROM now() - min({eligible_at})), 0)::float8
FROM {jobs} WHERE {eligible}"""

_COUNTS = """\
SELECT (SELECT count(*) FROM {jobs} WHERE {eligible}) AS queue_depth,
       {running} AS running"""


class DefinedMonitor(Monitor):
    """The monitor over ``defn``'s table in ``schema`` (see :class:`Monitor` for the loop, the budgets
    and the connections)."""

    def __init__(self, connect: Callable[[str], psycopg.Connection], schema: str, defn: QueueDefinition):
        super().__init__(connect, schema)
        jobs = sql.Identifier(schema, defn.table)
        regclass = sql.Literal(jobs.as_string(None))
        self.stats_query = sql.SQL(_STATS).format(regclass=regclass, jobs=jobs)
        self.age_query = sql.SQL(_AGE).format(eligible_at=defined_sql.eligible_at(defn), jobs=jobs,
                                              eligible=sql.SQL(defn.predicates["eligible"]))
        running = (sql.SQL("(SELECT count(*) FROM {} WHERE {})").format(jobs, sql.SQL(defn.predicates["running"]))
                   if "running" in defn.predicates else sql.SQL("NULL::bigint"))
        self.count_query = sql.SQL(_COUNTS).format(jobs=jobs, eligible=sql.SQL(defn.predicates["eligible"]),
                                                   running=running)

    def _age_params(self):
        return None


class DefinedReaper(Periodic):
    """Runs the definition's reaper statement every ``interval_s`` seconds until :meth:`stop`; counts
    as :class:`bench.engines.postgres.reaper.Reaper` does (``lease_expiries``, ``reaper_dead_lettered``,
    ``reaper_runs``)."""

    def __init__(self, conn: psycopg.Connection, schema: str, defn: QueueDefinition, lease_s: float,
                 interval_s: float, recorder: Recorder):
        super().__init__(conn, interval_s, recorder)
        conn.execute(defined_sql.set_search_path(schema))
        # Sent unprepared with its value inlined (psycopg would read a % in it as a placeholder).
        self.query = defined_sql.literal(defn.statements["reaper"], {"lease_s": float(lease_s)}).strip().rstrip(";")

    def once(self) -> tuple[int, int]:
        """One pass; returns (jobs re-queued, jobs dead-lettered)."""
        started = time.perf_counter()
        cur = self.conn.execute(self.query, prepare=False)
        rows = cur.fetchall() if cur.description else []
        self.query_us_total += int((time.perf_counter() - started) * 1e6)
        dead = {True: "dead", "dead": "dead", "t": "dead"}
        return self.count_pass([(r[0], dead.get(r[1] if len(r) > 1 else None, "pending")) for r in rows])
