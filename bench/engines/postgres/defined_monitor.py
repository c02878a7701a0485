"""The per-second monitor of a written queue definition's queue.

The monitor is :class:`bench.engines.postgres.monitor.Monitor` with its table queries written from
the definition: the statistics of its table (dead tuples, tuples, indexes but the primary key,
autovacuum runs), the oldest eligible age ``now() - min(eligible_at)`` over the rows matching
``predicates.eligible``, and the exact counts of eligible and running rows. How fast these answer
depends on the definition's own indexes; the sampler keeps their cost within its budget and records
it (``monitor_query_us``), as for the built-in queue. Its reaper is PostgreSQL's one
(:mod:`bench.engines.postgres.reaper`).
"""

from __future__ import annotations

from typing import Callable

import psycopg
from psycopg import sql

from bench.config.queue_definition import QueueDefinition
from bench.engines.postgres import defined_sql
from bench.engines.postgres.monitor import _STATS, Monitor

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
