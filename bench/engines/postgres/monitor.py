"""The per-second database sample on PostgreSQL, over the queue's definition: lock waiters and table
statistics from the catalogs (https://www.postgresql.org/docs/current/monitoring-stats.html#WAIT-EVENT-TABLE),
the oldest eligible age and the counts from the table, each within its budget of the wall time
(:data:`AGE_BUDGET`, :data:`COUNT_BUDGET`; docs/reading-the-report.md, "Monitor cost")."""

from __future__ import annotations

import time
from typing import Callable

import psycopg
from psycopg import sql

from bench.config.queue_definition import QueueDefinition, is_builtin
from bench.engines.postgres import builtin_queue
from bench.engines.postgres.lock_queue import LockQueue
from bench.engines.postgres import wait_events
from bench.engines.wait_events import WaitEventFold
from bench.engines.postgres.wal_images import FullPageImages
from bench.engines.postgres.adapter import DRIVER
from bench.results.run_files import COST_COUNTERS, CPU_COUNTERS, IMAGES_COUNTER
from bench.engines.server_cpu import ServerCpu
from bench.engines.sampler import AGE_BUDGET, COUNT_BUDGET, MIN_INTERVAL_S, TableSampler, spawn_samplers

#: The statistics query's cost counters, in its column order (the server CPU is read from /proc).
SERVER_COUNTERS = [k for k in COST_COUNTERS if k not in (*CPU_COUNTERS.values(), IMAGES_COUNTER)]

__all__ = ["AGE_BUDGET", "COUNT_BUDGET", "MIN_INTERVAL_S", "Monitor", "spawn_samplers"]

_STATS = """\
WITH tree AS (SELECT {regclass}::regclass AS relid UNION SELECT relid FROM pg_partition_tree({regclass}::regclass)),
queue AS (SELECT sum(n_dead_tup) AS dead, sum(n_live_tup + n_dead_tup) AS tuples, sum(autovacuum_count) AS autovacuums,
                 sum(n_tup_ins) AS ins, sum(n_tup_upd) AS upd, sum(n_tup_hot_upd) AS hot, sum(n_tup_del) AS del,
                 sum(seq_tup_read + coalesce(idx_tup_fetch, 0)) AS rows_read
          FROM pg_stat_user_tables WHERE relid IN (SELECT relid FROM tree))
SELECT
  w.lock_waiters,
  (SELECT dead FROM queue) AS dead_tuples,
  (SELECT max(age(backend_xmin)) FROM pg_stat_activity WHERE datname = current_database()) AS xmin_age,
  (SELECT tuples FROM queue) AS table_tuples,
  (SELECT sum(pg_relation_size(indexrelid)) FROM pg_index
     WHERE NOT indisprimary AND indrelid IN (SELECT relid FROM tree)) AS claim_index_bytes,
  (SELECT autovacuums FROM queue) AS autovacuum_count,
  w.notify_lock_waiters,
  pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS wal_lsn,
  (SELECT wal_records FROM pg_stat_wal), (SELECT wal_fpi FROM pg_stat_wal),
  (SELECT ins FROM queue), (SELECT upd FROM queue), (SELECT hot FROM queue), (SELECT del FROM queue),
  (SELECT blks_hit FROM pg_stat_database WHERE datname = current_database()),
  (SELECT blks_read FROM pg_stat_database WHERE datname = current_database()),
  (SELECT rows_read FROM queue),
  (SELECT json_object_agg(pid, CASE WHEN backend_type <> 'client backend' THEN 'background'
                                    WHEN starts_with(application_name, 'queue-bench monitor') THEN 'monitor'
                                    ELSE 'backends' END)
   FROM pg_stat_activity WHERE backend_type <> 'client backend' OR datname = current_database()) AS server_kinds
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

# TENANTS > 1: also the flooder's (q0) oldest eligible age and the oldest of the other tenants' heads, one
# probe per tenant and priority on the tenant index (bench/data/schemas/postgres/tenant_index_<variant>.sql).
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

_LOAD_SESSIONS = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                  "AND application_name ~ '^queue-bench (p[0-9]+-)?(worker|producer)-'")

_COUNTS = """\
SELECT (SELECT count(*) FROM {jobs} WHERE {eligible}) AS queue_depth,
       {running} AS running"""


class Monitor(TableSampler):
    """The sampler (:class:`bench.engines.sampler.TableSampler`) on two connections ``connect(application_name)``
    opens (and reopens). ``defn``: the queue (None: the built-in table); ``priorities``: those jobs can
    have (the built-in table's); ``tenants``: with ``TENANTS`` > 1 their names, the flooder first;
    ``behind_pooler``: the workers reach the server through a pooler (their lock waits not attributed). Table
    statements bounded by 30 s, stats by 5 s; errors counted by
    :func:`bench.engines.postgres.adapter.errors.error_kind` (``57014`` a timeout, ``connect_failed``)."""

    driver = DRIVER

    def __init__(self, connect: Callable[[str], psycopg.Connection], schema: str,
                 priorities: tuple[int, ...] = (0,), tenants: list[str] = (), defn: QueueDefinition | None = None,
                 lock_queue: bool = False, *, behind_pooler: bool = False):
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
        # A migration's window: the lock queue sampled on a third connection (bench.engines.postgres.lock_queue);
        # the statistics' size reads wait at most 200 ms for a table a migration rewrites.
        self.lock_queue = LockQueue(jobs, workers_known=not behind_pooler) if lock_queue else None
        # The workers' backends' wait events, ten samples a second on the statistics' connection
        # (bench.engines.wait_events; behind a pooler, the pool's server connections).
        self.wait_events = WaitEventFold(behind_pooler)
        super().__init__(connect, priorities if builtin else (0,))
        if self.lock_queue is not None:
            self._timeouts_ms["locks"] = 1000
            self._conns["locks"] = self._open("locks")
        pid = self.driver.fetch(self._conns["stats"], "SELECT pg_backend_pid()", None, False)[0]
        self.server_cpu = ServerCpu.local(pid)  # None: the server is on another host
        self.images = FullPageImages(self._conns["stats"])
        self.images_note = self.images.note

    def _age_params(self):
        if not self._builtin:
            return None
        if len(self.tenants) > 1:
            return {"priorities": self.priorities, "flooder": self.tenants[0], "others": self.tenants[1:]}
        return {"priorities": self.priorities}

    def sample_stats(self) -> dict:
        """``{lock_waiters, notify_lock_waiters, dead_tuples, xmin_age, table_tuples, claim_index_bytes,
        autovacuum_count, server_backends (client backends in the database, the monitor's own left out: behind a
        pooler its server connections and the tool's direct ones), the :data:`COST_COUNTERS` (as the server counts them so far; server CPU only when the
        server is on this host), history_list_length (InnoDB's: None), cost_s}``, None when the query failed; one
        round trip (docs/reading-the-report.md, "Monitor cost"; ``notify_lock_waiters``: docs/field-cases.md, FR-10).
        Sources: https://www.postgresql.org/docs/current/monitoring-stats.html#MONITORING-PG-STAT-ALL-TABLES-VIEW,
        https://www.postgresql.org/docs/current/functions-admin.html#FUNCTIONS-ADMIN-DBSIZE."""
        row, cost = self._timed("stats", self.stats_query)
        names = ("lock_waiters", "dead_tuples", "xmin_age", "table_tuples", "claim_index_bytes", "autovacuum_count",
                 "notify_lock_waiters", *SERVER_COUNTERS)
        values = dict.fromkeys(names) if row is None else {k: None if v is None else int(v) for k, v in zip(names, row)}
        images, images_cost = self._image_bytes()
        kinds = row[-1] if row else None
        values["server_backends"] = None if kinds is None else sum(kind == "backends" for kind in kinds.values())
        return {**values, **self._server_cpu(kinds), IMAGES_COUNTER: images,
                "history_list_length": None, "cost_s": cost + images_cost}

    def sample_waits(self):
        """(the run's client backends as ``(application_name, state, wait_event_type, wait_event)`` rows or None,
        seconds it took) on the ``stats`` connection, taken in turn with the per-second statistics."""
        return self._timed("stats", wait_events.QUERY, all_rows=True)

    def sample_locks(self):
        """(one row of the lock queue's query or None, seconds it took) on the ``locks`` connection."""
        return self._timed("locks", self.lock_queue.query, self.lock_queue.params)

    def _open(self, role: str):
        """:meth:`TableSampler._open`; with a migration's window, the statistics' connection waits at most 200 ms
        for a lock."""
        conn = super()._open(role)
        if conn is not None and role == "stats" and getattr(self, "lock_queue", None) is not None:
            self.driver.lock_timeout(conn, self.table_lock_timeout_ms)
        return conn

    def settle(self, timeout_s: float = 2.0) -> None:
        """Wait (up to ``timeout_s``) until no worker or producer session of the tool is connected to the database:
        a session publishes its last statistics as it exits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            row, _ = self._timed("stats", _LOAD_SESSIONS)
            if row is None or not row[0]:
                return
            time.sleep(0.05)

    def _image_bytes(self) -> tuple[int | None, float]:
        """(the full-page image bytes flushed so far, or None; the seconds its read took)."""
        if self.images.total is None:
            return None, 0.0
        row, cost = self._timed("stats", self.images.query, self.images.params())
        return self.images.advance(row), cost

    def _server_cpu(self, backend_kinds: dict[str, str] | None) -> dict:
        """The server's CPU so far (:data:`CPU_COUNTERS`, µs), read from /proc beside the statistics; None each
        when the server is on another host or the statistics failed."""
        if self.server_cpu is None or backend_kinds is None:
            return dict.fromkeys(CPU_COUNTERS.values())
        try:
            totals = self.server_cpu.read({int(pid): kind for pid, kind in backend_kinds.items()})
        except OSError:  # the server went away
            return dict.fromkeys(CPU_COUNTERS.values())
        return {key: totals[kind] for kind, key in CPU_COUNTERS.items()}
