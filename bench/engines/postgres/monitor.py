"""Database-side sampling, once a second, on one extra connection.

Every second:

- from the statistics views only (never the queue table, so it always answers):
  lock waiters, sessions of this database waiting on a heavyweight lock
  (``pg_stat_activity.wait_event_type = 'Lock'``: row and transaction locks, but
  also relation extension; https://www.postgresql.org/docs/current/monitoring-stats.html#WAIT-EVENT-TABLE),
  dead tuples of the queue table (``pg_stat_user_tables.n_dead_tup``, which
  lags by up to a second: backends flush their counters at most once a second);
- from the queue table: oldest eligible age, ``now() - min(run_at)`` over eligible
  rows (0 when none), computed as the minimum of each priority's oldest eligible
  row, so that with the ``partial`` and ``composite`` variants it is a handful of
  index probes; and the exact counts queue depth (eligible rows) and running rows.

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

import time
from collections import Counter
from typing import Callable

import psycopg
from psycopg import sql

from bench.errors import ConfigError
from bench.engines.postgres.error_kinds import CONNECT_FAILED, error_kind

#: Largest share of wall time each table query may take (its query time / interval).
AGE_BUDGET = 0.05
COUNT_BUDGET = 0.02
#: Never more often than once a second.
MIN_INTERVAL_S = 1.0
_BUDGET = {"age": AGE_BUDGET, "counts": COUNT_BUDGET}

_STATS = """\
SELECT
  (SELECT count(*) FROM pg_stat_activity
     WHERE wait_event_type = 'Lock' AND datname = current_database()) AS lock_waiters,
  (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = {regclass}::regclass) AS dead_tuples,
  (SELECT max(age(backend_xmin)) FROM pg_stat_activity WHERE datname = current_database()) AS xmin_age,
  (SELECT sum(n_live_tup + n_dead_tup) FROM pg_stat_user_tables
     WHERE relid = {regclass}::regclass
        OR relid IN (SELECT relid FROM pg_partition_tree({regclass}::regclass))) AS table_tuples"""

_AGE = """\
SELECT p.priority, coalesce(extract(epoch FROM now() - h.run_at), 0)::float8
FROM unnest(%(priorities)s::smallint[]) AS p(priority)
LEFT JOIN LATERAL (
  SELECT run_at FROM {jobs}
  WHERE status = 'pending' AND priority = p.priority AND run_at <= now()
  ORDER BY run_at LIMIT 1) AS h ON true"""

_COUNTS = """\
SELECT
  (SELECT count(*) FROM {jobs} WHERE status = 'pending' AND run_at <= now()) AS queue_depth,
  (SELECT count(*) FROM {jobs} WHERE status = 'running') AS running"""


class Monitor:
    """Samples the database over two autocommit connections of its own.

    ``connect(application_name)`` opens its connections (and reopens one whose
    backend went away). The stats connection answers the statistics-view query
    every second and never touches the queue table, so a slow table scan cannot cost a lock-waiter
    sample; the table connection runs the table queries as often as their budget
    allows. ``priorities``: the priority values jobs can have (the oldest-age
    probe looks at each). Table statements are bounded by
    ``table_timeout_ms`` (default 30 s), stats statements by 5 s. ``failures``
    counts statements that failed or timed out, ``errors`` the same by
    :func:`bench.engines.postgres.error_kinds.error_kind` (SQLSTATE, e.g. ``57014`` for a statement
    timeout, or ``connect_failed`` when the connection could not be reopened).
    """

    def __init__(self, connect: Callable[[str], psycopg.Connection], schema: str,
                 priorities: tuple[int, ...] = (0,), table_timeout_ms: int = 30_000):
        self._connect = connect
        self.failures = 0
        self.errors: Counter = Counter()
        self.priorities = list(priorities)
        names = {"jobs": sql.Identifier(schema, "jobs"),
                 "regclass": sql.Literal(f"{sql.Identifier(schema).as_string(None)}.jobs")}
        self.stats_query = sql.SQL(_STATS).format(**names)
        self.age_query = sql.SQL(_AGE).format(**names)
        self.count_query = sql.SQL(_COUNTS).format(**names)
        self._next = {"age": 0.0, "counts": 0.0}
        self._table_timeout_ms = table_timeout_ms
        self._table_query_since: float | None = None  # perf_counter start of the table query in progress
        self.table_cost_s = {"age": [], "counts": []}  # each table query's time, by kind
        self._timeouts_ms = {"stats": 5000, "table": table_timeout_ms}
        self._conns: dict[str, psycopg.Connection | None] = {"stats": None, "table": None}
        for role in self._conns:
            self._conns[role] = self._open(role)
            if self._conns[role] is None:
                raise psycopg.OperationalError(f"the monitor cannot open its {role} connection")

    def _open(self, role: str) -> psycopg.Connection | None:
        """A new connection for ``role`` (``stats``/``table``) with its statement timeout, or None."""
        try:
            conn = self._connect(f"queue-bench monitor {role}")
            conn.execute(sql.SQL("SET statement_timeout = {}").format(sql.Literal(self._timeouts_ms[role])))
            return conn
        except (ConfigError, psycopg.Error):  # the database is unreachable now
            return None

    def _live(self, role: str) -> psycopg.Connection | None:
        """The ``role`` connection, reopened if its backend went away (None while it cannot be)."""
        conn = self._conns[role]
        if conn is None or conn.broken or conn.closed:
            self._conns[role] = conn = self._open(role)
        return conn

    def reset_table_conn(self) -> None:
        """Close the table connection (it may be mid-query, its greenlet killed) and open a new one."""
        self._close(self._conns["table"])
        self._conns["table"] = self._open("table")

    @staticmethod
    def _close(conn: psycopg.Connection | None) -> None:
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass

    def close(self) -> None:
        """Close both connections (either may already be broken)."""
        for conn in self._conns.values():
            self._close(conn)

    def _timed(self, role: str, query, params=None, *, all_rows: bool = False):
        """(row — or all rows — or None, seconds spent) on the ``role`` connection.

        A failed statement counts its time, up to the timeout, and a connection
        whose backend went away is reopened for the next sample."""
        started = time.perf_counter()
        conn = self._live(role)
        if conn is None:
            self.failures += 1
            self.errors[CONNECT_FAILED] += 1
            return None, time.perf_counter() - started
        try:
            cur = conn.execute(query, params)
            row = cur.fetchall() if all_rows else cur.fetchone()
        except psycopg.Error as err:
            self.failures += 1
            self.errors[error_kind(err, lost=conn.broken)] += 1
            row = None
        return row, time.perf_counter() - started

    def _table_query(self, kind: str, now: float, query, params=None, *, all_rows: bool = False):
        """Run table query ``kind`` (``age`` or ``counts``), record its cost and schedule the next one."""
        self._table_query_since = time.perf_counter()
        try:
            result, cost = self._timed("table", query, params, all_rows=all_rows)
        finally:
            self._table_query_since = None
        self.table_cost_s[kind].append(cost)
        self._next[kind] = now + max(MIN_INTERVAL_S, cost / _BUDGET[kind])
        return result, cost

    def table_query_running_s(self) -> float:
        """How long the table query in progress has been running (0 when none is)."""
        since = self._table_query_since
        return 0.0 if since is None else time.perf_counter() - since

    def sample_stats(self) -> dict:
        """``{lock_waiters, dead_tuples, xmin_age, table_tuples, cost_s}`` (values None when the query failed).

        ``xmin_age``: the age in transactions of the oldest snapshot (``backend_xmin``)
        held by a session of this database: what stops vacuum removing dead rows.
        ``table_tuples``: live + dead heap tuples of the queue table (all its partitions),
        from the same statistics view: what a sequential scan of the table reads."""
        row, cost = self._timed("stats", self.stats_query)
        return {"lock_waiters": None if row is None else int(row[0]),
                "dead_tuples": None if row is None or row[1] is None else int(row[1]),
                "xmin_age": None if row is None or row[2] is None else int(row[2]),
                "table_tuples": None if row is None or row[3] is None else int(row[3]), "cost_s": cost}

    def seconds_until_due(self) -> float:
        """Seconds until the next table query is due (0 when one is due now)."""
        return max(0.0, min(self._next.values()) - time.monotonic())

    def sample_table(self, *, force: bool = False) -> dict:
        """The table queries that are due (all of them with ``force``).

        Returns ``{oldest_eligible_age_s, age_by_priority, queue_depth, running, cost_s}``
        (``age_by_priority`` maps each priority to its oldest eligible age, 0 when none); a
        value is None when its query was not due or failed. After each query the
        next one of its kind is scheduled ``max(1 s, cost / budget)`` later.
        """
        now = time.monotonic()
        out = {"oldest_eligible_age_s": None, "age_by_priority": None, "queue_depth": None, "running": None,
               "cost_s": 0.0}
        if force or now >= self._next["age"]:
            rows, cost = self._table_query("age", now, self.age_query, {"priorities": self.priorities}, all_rows=True)
            out["cost_s"] += cost
            if rows is not None:
                out["age_by_priority"] = {int(p): float(a) for p, a in rows}
                out["oldest_eligible_age_s"] = max(out["age_by_priority"].values(), default=0.0)
        if force or now >= self._next["counts"]:
            row, cost = self._table_query("counts", now, self.count_query)
            out["cost_s"] += cost
            if row is not None:
                out["queue_depth"], out["running"] = int(row[0]), int(row[1])
        return out


def spawn_samplers(monitor: Monitor, now_s: Callable[[], float], n_seconds: int,
                   note: Callable[[int, dict], None]) -> list:
    """Start the monitor's two sampling greenlets; returns them (kill them to stop).

    ``now_s()``: seconds since the load started. The stats query runs at the middle
    of each second ``k`` (0 <= k < ``n_seconds``), the table queries whenever their
    budget lets them (until killed); each sample is handed to ``note(k, values)``
    with ``k`` the second it was taken in and ``values`` as returned by
    :meth:`Monitor.sample_stats` / :meth:`Monitor.sample_table` (``cost_s`` included).
    Needs gevent (the process that runs the swarm); used by the runner and, during
    pgbench, by ``make calibrate``, so that both carry the same monitor load.
    """
    import gevent

    def stats_loop() -> None:
        k = 0
        while k < n_seconds:
            gevent.sleep(max(0.0, k + 0.5 - now_s()))
            note(k, monitor.sample_stats())
            k = max(k + 1, int(now_s() + 0.5))

    def table_loop() -> None:
        while True:
            delay = monitor.seconds_until_due()
            if delay > 0:
                gevent.sleep(min(delay, 1.0))
                continue
            note(int(now_s()), monitor.sample_table())

    return [gevent.spawn(stats_loop), gevent.spawn(table_loop)]
