"""Database-side sampling on MariaDB (docs/mariadb.md): lock waiters
(https://mariadb.com/kb/en/information-schema-innodb_lock_waits-table/, :func:`lock_waits_source`), the
history list length (``trx_rseg_history_len``), the table's row estimate, the global status variables of
what a job costs (:mod:`bench.engines.mariadb.cost`); the table queries as on PostgreSQL."""

from __future__ import annotations

from typing import Callable

from bench.engines.base import EngineError
from bench.engines.mariadb.cost import STATUS_NAMES, cost_sample
from bench.engines.lock_queue import LockQueueFold
from bench.engines.mariadb.adapter import DRIVER, translated
from bench.engines.mariadb.fault_actions import MIGRATION_MARK
from bench.engines.mariadb.policies import WORKER_MARK, ident, literal
from bench.engines.sampler import TableSampler, spawn_samplers
from bench.engines.server_cpu import ServerCpu
from bench.results.run_files import CPU_COUNTERS

__all__ = ["Monitor", "lock_waits_source", "spawn_samplers"]

#: The comment the monitor's table queries start with (the lock queue leaves them out).
MONITOR_MARK = "/* queue-bench monitor */ "
#: The metadata lock queue on the queue table (https://mariadb.com/kb/en/metadata-locking/): {mark} the
#: migration's statement, {worker} a worker's (:data:`bench.engines.mariadb.policies.WORKER_MARK`: the producers'
#: and the reaper's waits are not the workers'), {jobs} the table's name, {monitor} the monitor's queries, as LIKE
#: patterns.
_LOCKS = """\
SELECT GROUP_CONCAT(IF(INFO LIKE {worker} AND STATE = 'Waiting for table metadata lock',
                       CONCAT(ID, ':', ROUND(UNIX_TIMESTAMP(NOW(6)) - TIME_MS / 1000, 1)), NULL)),
       MAX(IF(INFO LIKE {mark} AND STATE = 'Waiting for table metadata lock', TIME_MS / 1000, NULL)),
       MAX(INFO LIKE {mark})
FROM information_schema.PROCESSLIST
WHERE ID <> CONNECTION_ID() AND INFO LIKE {jobs} AND INFO NOT LIKE {monitor}
  AND (STATE = 'Waiting for table metadata lock' OR INFO LIKE {mark})"""

#: Where lock waits can be read, in the order tried: (table, the count of waiting transactions).
LOCK_WAIT_SOURCES = (
    ("information_schema.INNODB_LOCK_WAITS", "COUNT(DISTINCT requesting_trx_id)"),
    ("sys.innodb_lock_waits", "COUNT(DISTINCT waiting_trx_id)"),
    ("performance_schema.data_lock_waits", "COUNT(DISTINCT REQUESTING_ENGINE_TRANSACTION_ID)"),
)


def lock_waits_source(conn) -> tuple[str, str] | None:
    """The first of :data:`LOCK_WAIT_SOURCES` this server can read, or None."""
    for table, count in LOCK_WAIT_SOURCES:
        try:
            with translated(), conn.cursor() as cur:
                cur.execute(f"SELECT {count} FROM {table}")
                cur.fetchall()
            return table, count
        except EngineError:
            continue
    return None


def eligible_source(schema: str, index: str) -> tuple[str, str]:
    """(table, predicate) of the eligible rows for ``index``: ``jobs_ready`` holds only pending rows."""
    if index == "ready_table":
        return ident(schema, "jobs_ready"), "run_at <= NOW(6)"
    if index == "generated":
        return ident(schema, "jobs"), "claim_pending = 1 AND run_at <= NOW(6)"
    return ident(schema, "jobs"), "status = 'pending' AND run_at <= NOW(6)"


class Monitor(TableSampler):
    """Samples a MariaDB server over two connections (``connect(name)``); table statements bounded by
    30 s, statistics ones by 5 s (``max_statement_time``)."""

    driver = DRIVER

    def __init__(self, connect: Callable[[str], object], schema: str, index: str, priorities: tuple[int, ...] = (0,),
                 lock_queue: bool = False):
        table, eligible = eligible_source(schema, index)
        jobs = ident(schema, "jobs")
        self.age_query = MONITOR_MARK + " UNION ALL ".join(
            f"SELECT {int(p)}, COALESCE(TIMESTAMPDIFF(MICROSECOND, (SELECT MIN(run_at) FROM {table} "
            f"WHERE {eligible} AND priority = {int(p)}), NOW(6)) / 1e6, 0)" for p in priorities)
        self.count_query = (f"{MONITOR_MARK}SELECT (SELECT COUNT(*) FROM {table} WHERE {eligible}), "
                            f"(SELECT COUNT(*) FROM {jobs} WHERE status = 'running')")
        super().__init__(connect, priorities)
        # A migration's window: the metadata lock queue from the processlist, on a third connection.
        self.lock_queue = LockQueueFold() if lock_queue else None
        if lock_queue:
            self._timeouts_ms["locks"] = 1000
            self._conns["locks"] = self._open("locks")
            self.locks_query = _LOCKS.format(mark=literal(f"%{MIGRATION_MARK.strip()}%"), jobs=literal(f"%{jobs}%"),
                                             worker=literal(f"{WORKER_MARK.strip()}%"),
                                             monitor=literal(f"%{MONITOR_MARK.strip()}%"))
        pid_file, port = self.driver.fetch(self._conns["stats"], "SELECT @@pid_file, @@port", None, False)
        self.server_cpu = ServerCpu.threaded_server(pid_file, int(port))  # None: the server is on another host
        source = lock_waits_source(self._conns["stats"])
        waits = f"(SELECT {source[1]} FROM {source[0]})" if source else "NULL"
        self.stats_query = (
            f"SELECT {waits}, (SELECT `COUNT` FROM information_schema.INNODB_METRICS "
            f"WHERE NAME = 'trx_rseg_history_len'), (SELECT TABLE_ROWS FROM information_schema.TABLES "
            f"WHERE TABLE_SCHEMA = {literal(schema)} AND TABLE_NAME = 'jobs'), "
            f"(SELECT GROUP_CONCAT(VARIABLE_NAME, '=', VARIABLE_VALUE) FROM information_schema.GLOBAL_STATUS "
            f"WHERE VARIABLE_NAME IN ({', '.join(literal(n.upper()) for n in STATUS_NAMES)}))")

    def sample_stats(self) -> dict:
        """``{lock_waiters, dead_tuples: None, xmin_age: None, table_tuples, history_list_length,
        notify_lock_waiters: None, the :data:`bench.results.run_files.COST_COUNTERS` (as the server counts them
        so far; :func:`bench.engines.mariadb.cost.cost_sample`), cost_s}``; None when the query failed."""
        row, cost = self._timed("stats", self.stats_query)
        value = (lambda i: None if row is None or row[i] is None else int(row[i]))
        status = None if row is None or not row[3] else dict(
            (name, int(number)) for name, _, number in (pair.partition("=") for pair in row[3].split(",")))
        return {"lock_waiters": value(0), "dead_tuples": None, "xmin_age": None, "table_tuples": value(2),
                "history_list_length": value(1), "notify_lock_waiters": None, **cost_sample(status),
                **self._server_cpu(row is not None), "cost_s": cost}

    def sample_locks(self):
        """(one lock queue sample for :class:`bench.engines.lock_queue.LockQueueFold`, or None; seconds it took):
        no lock modes (performance_schema's metadata_locks is off by default: the processlist has no mode), the
        workers' statements waiting for the queue table's metadata lock (each with its wait's start), the
        migration's wait (s), and whether its statement is in progress (waiting or running)."""
        row, cost = self._timed("locks", self.locks_query)
        if row is None:
            return None, cost
        waits = [tuple(w.split(":")) for w in (row[0] or "").split(",") if w]
        return (None, waits, None if row[1] is None else float(row[1]), bool(row[2])), cost

    def _server_cpu(self, sampled: bool) -> dict:
        """The server's CPU so far (µs, all of it ``backends``: one process, its threads the sessions'), read from
        /proc beside the statistics; None when the server is on another host or the statistics failed."""
        if self.server_cpu is None or not sampled:
            return {}
        try:
            return {CPU_COUNTERS["backends"]: self.server_cpu.read({})["backends"]}
        except OSError:  # the server went away
            return {}
