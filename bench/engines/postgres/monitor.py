"""Database-side sampling, once a second, on one extra connection.

Every second:

- from the statistics views and catalogs only (never the queue table's rows, so it always
  answers), in one round trip: lock waiters, sessions of this database waiting on a heavyweight lock
  (``pg_stat_activity.wait_event_type = 'Lock'``: row and transaction locks, but
  also relation extension; https://www.postgresql.org/docs/current/monitoring-stats.html#WAIT-EVENT-TABLE),
  and among them the notify lock waiters (``wait_event = 'object'``: commits waiting for
  the lock that a transaction which sent ``NOTIFY`` holds while it commits, FR-10),
  both from one pass over ``pg_stat_activity``;
  dead tuples of the queue table (``pg_stat_user_tables.n_dead_tup``, which
  lags by up to a second: backends flush their counters at most once a second), the oldest
  snapshot's xmin age, the table's tuples, the size of the claim's index and autovacuum runs on
  the table so far (:meth:`Monitor.sample_stats`);
- from the queue table, read through the queue's definition (:mod:`bench.config.queue_definition`; the
  built-in queue's is generated, :mod:`bench.engines.postgres.builtin_queue`): oldest eligible age,
  ``now() - min(eligible_at)`` over the rows matching ``predicates.eligible`` (0 when none), computed on
  the built-in table as the minimum of each priority's oldest eligible row, so that with the ``partial``
  and ``composite`` variants it is a handful of index probes (a written definition's table has no
  priority column the tool knows: one probe); and the exact counts queue depth (eligible rows) and
  running rows (``predicates.running``; None without one). How fast these answer depends on the
  table's indexes.

The table queries are load on the server under test, so each is taken only as
often as keeps its measured cost within a budget of the wall time
(:data:`AGE_BUDGET`, :data:`COUNT_BUDGET`) and never more than once a second: with an index, the age every second
and the counts every second or every few seconds; under ``INDEX=none`` at
millions of rows every one is a sequential scan, so they are sampled less often
(and a sample cut by ``statement_timeout`` is recorded as such). Seconds without
a value have empty cells. The monitor's own query time is recorded every second
as ``monitor_query_us``.
"""

from __future__ import annotations

from typing import Callable

import psycopg
from psycopg import sql

from bench.config.queue_definition import QueueDefinition, is_builtin
from bench.engines.postgres import builtin_queue
from bench.engines.postgres.db import DRIVER
from bench.engines.sampler import AGE_BUDGET, COUNT_BUDGET, MIN_INTERVAL_S, TableSampler, spawn_samplers

__all__ = ["AGE_BUDGET", "COUNT_BUDGET", "MIN_INTERVAL_S", "Monitor", "spawn_samplers"]

_STATS = """\
WITH tree AS (SELECT {regclass}::regclass AS relid UNION SELECT relid FROM pg_partition_tree({regclass}::regclass)),
queue AS (SELECT sum(n_dead_tup) AS dead, sum(n_live_tup + n_dead_tup) AS tuples, sum(autovacuum_count) AS autovacuums
          FROM pg_stat_user_tables WHERE relid IN (SELECT relid FROM tree))
SELECT
  w.lock_waiters,
  (SELECT dead FROM queue) AS dead_tuples,
  (SELECT max(age(backend_xmin)) FROM pg_stat_activity WHERE datname = current_database()) AS xmin_age,
  (SELECT tuples FROM queue) AS table_tuples,
  (SELECT sum(pg_relation_size(indexrelid)) FROM pg_index
     WHERE NOT indisprimary AND indrelid IN (SELECT relid FROM tree)) AS claim_index_bytes,
  (SELECT autovacuums FROM queue) AS autovacuum_count,
  w.notify_lock_waiters
FROM (SELECT count(*) AS lock_waiters, count(*) FILTER (WHERE wait_event = 'object') AS notify_lock_waiters
      FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()) AS w"""

# The oldest eligible row of each priority: one probe each (on a written definition's table, one probe
# over every priority, reported as priority 0).
_AGE = """\
SELECT p.priority, coalesce(extract(epoch FROM now() - h.at), 0)::float8
FROM unnest({priorities}::smallint[]) AS p(priority)
LEFT JOIN LATERAL (
  SELECT {eligible_at} AS at FROM {jobs}
  WHERE {eligible}{of_priority}
  ORDER BY {eligible_at} LIMIT 1) AS h ON true"""

# TENANTS > 1 (the built-in table's queue names): the same per-priority rows with two more columns, the
# flooder's (q0) oldest eligible age and the oldest of the other tenants' heads: one probe per tenant and
# priority, each an index probe on the tenant index (bench/data/schemas/postgres/tenant_index_<variant>.sql).
_TENANT_AGE = """\
SELECT p.priority, coalesce(extract(epoch FROM now() - h.at), 0)::float8,
       coalesce(extract(epoch FROM now() - f.at), 0)::float8,
       coalesce(extract(epoch FROM now() - o.at), 0)::float8
FROM unnest({priorities}::smallint[]) AS p(priority)
LEFT JOIN LATERAL (
  SELECT {eligible_at} AS at FROM {jobs}
  WHERE {eligible}{of_priority}
  ORDER BY {eligible_at} LIMIT 1) AS h ON true
LEFT JOIN LATERAL (
  SELECT {eligible_at} AS at FROM {jobs}
  WHERE {eligible} AND queue = %(flooder)s{of_priority}
  ORDER BY {eligible_at} LIMIT 1) AS f ON true
LEFT JOIN LATERAL (
  SELECT min(t.at) AS at
  FROM unnest(%(others)s::text[]) AS q(name)
  CROSS JOIN LATERAL (
    SELECT {eligible_at} AS at FROM {jobs}
    WHERE {eligible} AND queue = q.name{of_priority}
    ORDER BY {eligible_at} LIMIT 1) AS t) AS o ON true"""

_COUNTS = """\
SELECT (SELECT count(*) FROM {jobs} WHERE {eligible}) AS queue_depth,
       {running} AS running"""


class Monitor(TableSampler):
    """Samples the database over two autocommit connections of its own (the loop is
    :class:`bench.engines.sampler.TableSampler`'s).

    ``connect(application_name)`` opens its connections (and reopens one whose
    backend went away). ``defn``: the queue's definition (None: the built-in queue's table).
    ``priorities``: the priority values jobs can have (the oldest-age
    probe looks at each; the built-in table's only); ``tenants``: with ``TENANTS`` > 1 the tenants' queue names, the first the
    flooder (the age query then also returns its age and the largest of the others'). Table statements are bounded by ``table_timeout_ms`` (default
    30 s), stats statements by 5 s. Errors are counted by
    :func:`bench.engines.postgres.error_kinds.error_kind` (SQLSTATE, e.g. ``57014`` for a statement
    timeout, or ``connect_failed`` when the connection could not be reopened).
    """

    driver = DRIVER

    def __init__(self, connect: Callable[[str], psycopg.Connection], schema: str,
                 priorities: tuple[int, ...] = (0,), table_timeout_ms: int = 30_000, tenants: list[str] = (),
                 defn: QueueDefinition | None = None):
        columns, predicates = (defn.columns, defn.predicates) if defn else (builtin_queue.COLUMNS, builtin_queue.PREDICATES)
        builtin = defn is None or is_builtin(defn.name)  # the table has the priority and queue columns
        self.tenants = list(tenants)  # with two or more: the flooder's and the others' ages too
        jobs = sql.Identifier(schema, defn.table if defn else "jobs")
        at = columns["eligible_at"]
        names = {"jobs": jobs, "regclass": sql.Literal(jobs.as_string(None)), "eligible": sql.SQL(predicates["eligible"]),
                 "eligible_at": sql.Identifier(at) if at.isidentifier() else sql.SQL(at),
                 "of_priority": sql.SQL(" AND priority = p.priority" if builtin else ""),
                 # a written definition's SQL is sent without parameters (a % in it is the SQL's own)
                 "priorities": sql.Placeholder("priorities") if builtin else sql.Literal([0]),
                 "running": (sql.SQL("(SELECT count(*) FROM {} WHERE {})").format(jobs, sql.SQL(predicates["running"]))
                             if "running" in predicates else sql.SQL("NULL::bigint"))}
        self.stats_query = sql.SQL(_STATS).format(**names)
        self.age_query = sql.SQL(_TENANT_AGE if len(self.tenants) > 1 else _AGE).format(**names)
        self.count_query = sql.SQL(_COUNTS).format(**names)
        self._builtin = builtin
        super().__init__(connect, priorities if builtin else (0,), table_timeout_ms)

    def _age_params(self):
        if not self._builtin:
            return None
        if len(self.tenants) > 1:
            return {"priorities": self.priorities, "flooder": self.tenants[0], "others": self.tenants[1:]}
        return {"priorities": self.priorities}

    def sample_stats(self) -> dict:
        """``{lock_waiters, notify_lock_waiters, dead_tuples, xmin_age, table_tuples, claim_index_bytes,
        autovacuum_count, history_list_length, cost_s}`` (values None when the query failed;
        ``history_list_length`` is InnoDB's, always None here). One round trip.

        ``notify_lock_waiters``: of the lock waiters, those waiting on a lock of type ``object``
        (wait event ``Lock:object``, a lock on a database object other than a relation). In a run
        the one such lock is the one a committing transaction that sent ``NOTIFY`` takes on
        "database 0" (PostgreSQL's ``src/backend/commands/async.c``, ``PreCommit_Notify``:
        ``LockSharedObject(DatabaseRelationId, InvalidOid, 0, AccessExclusiveLock)``, held until
        the commit ends), so these are commits queued behind another one's notification: one lock
        for the whole server. Other sessions of this database doing DDL on non-relation objects
        would be counted too (wait events:
        https://www.postgresql.org/docs/current/monitoring-stats.html#WAIT-EVENT-LOCK-TABLE).

        ``dead_tuples``: ``n_dead_tup`` of the queue table, summed over its partitions (a
        partitioned table's own row counts nothing).
        ``xmin_age``: the age in transactions of the oldest snapshot (``backend_xmin``)
        held by a session of this database: what stops vacuum removing dead rows.
        ``table_tuples``: live + dead heap tuples of the queue table (all its partitions),
        from the same statistics view: what a sequential scan of the table reads.
        ``claim_index_bytes``: ``pg_relation_size`` of the index variant's index (every index of
        the queue table and its partitions but the primary key; None with ``INDEX=none``): dead
        entries at its head stay until vacuum removes them (FR-12), and the file does not shrink
        after that, so a growing size shows pages the claim's scan may step through.
        ``autovacuum_count``: autovacuum runs on the queue table so far (``pg_stat_user_tables``,
        partitions summed; it counts up when a run ends): the seconds it rises in are the runs.
        https://www.postgresql.org/docs/current/monitoring-stats.html#MONITORING-PG-STAT-ALL-TABLES-VIEW,
        https://www.postgresql.org/docs/current/functions-admin.html#FUNCTIONS-ADMIN-DBSIZE.
        ``pgstatindex`` (leaf density) is not read: it needs ``CREATE EXTENSION pgstattuple``
        outside the tool's schema, and it reads the whole index on every call."""
        row, cost = self._timed("stats", self.stats_query)
        names = ("lock_waiters", "dead_tuples", "xmin_age", "table_tuples", "claim_index_bytes", "autovacuum_count",
                 "notify_lock_waiters")
        values = dict.fromkeys(names) if row is None else {k: None if v is None else int(v) for k, v in zip(names, row)}
        return {**values, "history_list_length": None, "cost_s": cost}
