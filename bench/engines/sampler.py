"""The database monitor's sampling loop, the same for every engine: statistics every second on one
connection, table queries on another within a budget of the wall time (docs/reading-the-report.md,
"Monitor cost"); an engine subclasses :class:`TableSampler`."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Callable

import gevent
from gevent.lock import BoundedSemaphore

from bench.engines.wait_events import spawn_wait_sampler
from bench.errors import ConfigError, RunFailed

#: Largest share of wall time each table query may take (its query time / interval).
AGE_BUDGET = 0.05
COUNT_BUDGET = 0.02
#: Never more often than once a second.
MIN_INTERVAL_S = 1.0
#: How long a table query may wait for a lock on the queue table (a migration's ACCESS EXCLUSIVE request, or the
#: metadata lock on MariaDB, where it is whole seconds): that second goes without a sample, and the wait, which is
#: not the query's cost, does not space out the next one (docs/reading-the-report.md, "Monitor cost").
TABLE_LOCK_TIMEOUT_MS = 200
_BUDGET = {"age": AGE_BUDGET, "counts": COUNT_BUDGET}
#: The error kind counted when a monitor connection cannot be (re)opened.
CONNECT_FAILED = "connect_failed"


class TableSampler:
    """Samples the database over a ``stats`` and a ``table`` connection of its own. Subclasses give the
    driver's calls and the engine's queries; ``failures`` counts failed or timed-out statements, ``errors`` by kind."""

    #: The engine's driver adapter (:class:`bench.engines.driver.Driver`).
    driver: Any = None
    #: How long a table query waits for a lock on the queue table (ms; :data:`TABLE_LOCK_TIMEOUT_MS`).
    table_lock_timeout_ms = TABLE_LOCK_TIMEOUT_MS
    #: How the full-page image bytes in the log are read, or why they are not.
    images_note = "this engine's log has no full-page images to count"
    #: The server's CPU meter (:class:`bench.engines.server_cpu.ServerCpu`) when the server is on this host, else None.
    server_cpu: Any = None

    def __init__(self, connect: Callable[[str], Any], priorities: tuple[int, ...] = (0,)):
        self._connect = connect  # application name -> a new autocommit connection
        self._timeouts_ms = {"stats": 5000, "table": 30_000}
        self.failures = 0
        self.errors: Counter = Counter()
        self.priorities = list(priorities)
        self._next = {"age": 0.0, "counts": 0.0}
        self._table_query_since: float | None = None  # perf_counter start of the table query in progress
        self.table_cost_s = {"age": [], "counts": []}  # each table query's time, by kind
        self.lock_skips = {"age": 0, "counts": 0}  # table queries that gave up waiting for a lock, by kind
        self._lock_timed_out = False  # the last statement ended waiting for a lock past its lock timeout
        self._conns: dict[str, Any] = {"stats": None, "table": None}
        # One statement at a time on a connection that several greenlets sample on (the statistics' connection:
        # each second's statistics and the wait events' samples), taken before the clock starts: a statement's
        # time is its own, not its wait for the other's.
        self._turns: dict[str, BoundedSemaphore] = {}
        for role in self._conns:
            self._conns[role] = self._open(role)
            if self._conns[role] is None:
                raise RunFailed(f"the monitor cannot open its {role} connection")

    def _open(self, role: str) -> Any:
        """A new connection for ``role`` (``stats``/``table``) with its statement timeout, or None."""
        try:
            conn = self._connect(f"queue-bench monitor {role}")
            self.driver.statement_timeout(conn, self._timeouts_ms[role])
            if role == "table":
                self.driver.lock_timeout(conn, self.table_lock_timeout_ms)
            return conn
        except (ConfigError, *self.driver.errors):  # the database is unreachable now
            return None

    def server_pids(self) -> tuple[int, ...]:
        """The server's processes that serve this run when it runs on this host (:attr:`ServerCpu.pids`), else ()."""
        return () if self.server_cpu is None else self.server_cpu.pids

    def settle(self) -> None:
        """Return once the load's sessions have left and published what they counted (an engine whose counters
        are live has nothing to wait for)."""

    def _age_params(self) -> Any:
        return None

    # -- the loop's parts
    def _live(self, role: str) -> Any:
        """The ``role`` connection, reopened if it went away (None while it cannot be)."""
        conn = self._conns[role]
        if conn is None or self.driver.is_broken(conn):
            self._conns[role] = conn = self._open(role)
        return conn

    def reset_table_conn(self) -> None:
        """Close the table connection (it may be mid-query, its greenlet killed) and open a new one."""
        self._close(self._conns["table"])
        self._conns["table"] = self._open("table")

    def _close(self, conn: Any) -> None:
        if conn is not None:
            try:
                conn.close()
            except self.driver.errors:
                pass

    def close(self) -> None:
        """Close both connections (either may already be broken)."""
        for conn in self._conns.values():
            self._close(conn)

    def _timed(self, role: str, query, params=None, *, all_rows: bool = False):
        """(row, all rows, or None on failure; seconds spent) on the ``role`` connection, one statement at a time."""
        with self._turns.setdefault(role, BoundedSemaphore()):
            return self._timed_turn(role, query, params, all_rows)

    def _timed_turn(self, role: str, query, params, all_rows: bool):
        started = time.perf_counter()
        conn = self._live(role)
        if conn is None:
            self.failures += 1
            self.errors[CONNECT_FAILED] += 1
            return None, time.perf_counter() - started
        self._lock_timed_out = False
        try:
            row = self.driver.fetch(conn, query, params, all_rows)
        except self.driver.errors as err:
            kind = self.driver.error_kind(err, conn)
            self._lock_timed_out = role == "table" and kind in self.driver.lock_timeout_kinds
            if not self._lock_timed_out:  # a table query that gave up on a lock is a skipped sample, not a failure
                self.failures += 1
                self.errors[kind] += 1
            self.driver.after_error(conn)
            row = None
        return row, time.perf_counter() - started

    def _table_query(self, kind: str, now: float, query, params=None, *, all_rows: bool = False):
        """Run table query ``kind`` (``age`` or ``counts``), record its cost and schedule the next one."""
        self._table_query_since = time.perf_counter()
        try:
            result, cost = self._timed("table", query, params, all_rows=all_rows)
        finally:
            self._table_query_since = None
        if self._lock_timed_out:  # it waited, it did not cost: try again in a second
            self.lock_skips[kind] += 1
            self._next[kind] = now + MIN_INTERVAL_S
            return result, cost
        first = not self.table_cost_s[kind]
        self.table_cost_s[kind].append(cost)
        # The first query of a kind pays for opening the table on a new connection (about 1 s on
        # MariaDB, where later ones took 0.5 ms): it does not set the spacing of the next.
        self._next[kind] = now + (MIN_INTERVAL_S if first else max(MIN_INTERVAL_S, cost / _BUDGET[kind]))
        return result, cost

    def table_query_running_s(self) -> float:
        """How long the table query in progress has been running (0 when none is)."""
        since = self._table_query_since
        return 0.0 if since is None else time.perf_counter() - since

    def sample_stats(self) -> dict:
        """``{lock_waiters, notify_lock_waiters, dead_tuples, xmin_age, table_tuples, history_list_length,
        cost_s}`` (PostgreSQL adds ``claim_index_bytes``, ``autovacuum_count``); None: failed or no such figure."""
        raise NotImplementedError

    def seconds_until_due(self) -> float:
        """Seconds until the next table query is due (0 when one is due now)."""
        return max(0.0, min(self._next.values()) - time.monotonic())

    def sample_table(self, *, force: bool = False) -> dict:
        """The table queries due (all with ``force``): ``{oldest_eligible_age_s, age_by_priority, queue_depth,
        running, cost_s}``, with tenants ``oldest_eligible_age_flooder_s`` and ``..._others_s``; None: not due
        or failed. The next of a kind comes ``max(1 s, cost / budget)`` later."""
        now = time.monotonic()
        out = {"oldest_eligible_age_s": None, "age_by_priority": None, "queue_depth": None, "running": None,
               "cost_s": 0.0}
        if force or now >= self._next["age"]:
            rows, cost = self._table_query("age", now, self.age_query, self._age_params(), all_rows=True)
            out["cost_s"] += cost
            if rows is not None:
                out["age_by_priority"] = {int(r[0]): float(r[1]) for r in rows}
                out["oldest_eligible_age_s"] = max(out["age_by_priority"].values(), default=0.0)
                if rows and len(rows[0]) == 4:  # with tenants: the flooder's and the others' largest
                    out["oldest_eligible_age_flooder_s"] = max(float(r[2]) for r in rows)
                    out["oldest_eligible_age_others_s"] = max(float(r[3]) for r in rows)
        if force or now >= self._next["counts"]:
            row, cost = self._table_query("counts", now, self.count_query)
            out["cost_s"] += cost
            if row is not None:
                out["queue_depth"], out["running"] = int(row[0]), int(row[1])
        return out


def spawn_samplers(monitor: TableSampler, now_s: Callable[[], float], n_seconds: int,
                   note: Callable[[int, dict], None], *, table: bool = True) -> list:
    """The monitor's sampling greenlets (kill them to stop): stats at the middle of each second ``k`` <
    ``n_seconds`` of ``now_s()``, table queries when due, the wait events where the monitor samples them (its
    ``wait_events``): neither without ``table`` (``MONITOR=stats``); each sample to ``note(k, values)``."""
    def table_loop() -> None:
        while True:
            delay = monitor.seconds_until_due()
            if delay > 0:
                gevent.sleep(min(delay, 1.0))
                continue
            note(int(now_s()), monitor.sample_table())

    return [spawn_each_second(monitor.sample_stats, now_s, n_seconds, note),
            *([gevent.spawn(table_loop)] if table else []),
            *([spawn_wait_sampler(monitor, now_s, n_seconds, note)]
              if table and getattr(monitor, "wait_events", None) else [])]


def spawn_each_second(sample: Callable[[], dict], now_s: Callable[[], float], n_seconds: int,
                      note: Callable[[int, dict], None]):
    """A greenlet calling ``note(k, sample())`` at the middle of each second ``k`` < ``n_seconds`` of ``now_s()``
    (a second the sample overran is skipped; kill it to stop)."""
    def loop() -> None:
        k = 0
        while k < n_seconds:
            gevent.sleep(max(0.0, k + 0.5 - now_s()))
            note(k, sample())
            k = max(k + 1, int(now_s() + 0.5))
    return gevent.spawn(loop)
