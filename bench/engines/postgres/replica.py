"""``REPLICA=1`` during the load: the standby sampled once a second (replay lag, query cancellations by cause, the
xmin horizon it holds on the primary) and ``REPLICA_READERS`` readers on it, each in REPEATABLE READ
transactions of ``REPLICA_READER_S`` (docs/replicas.md). Sources:
https://www.postgresql.org/docs/current/monitoring-stats.html#MONITORING-PG-STAT-REPLICATION-VIEW,
https://www.postgresql.org/docs/current/monitoring-stats.html#MONITORING-PG-STAT-DATABASE-CONFLICTS-VIEW,
https://www.postgresql.org/docs/current/functions-admin.html#FUNCTIONS-RECOVERY-INFO-TABLE."""

from __future__ import annotations

import time
from typing import Any, Callable

import gevent
import psycopg
from psycopg import sql

from bench.engines.base import EngineError
from bench.engines.postgres.adapter import connect, connect_dsn, translated

__all__ = ["CONFLICT_CAUSES", "READER_QUERIES", "ReplicaWatch", "is_recovery_conflict"]

#: pg_stat_database_conflicts' columns, by the cause intervals.csv names (``replica_conflicts_<cause>``).
CONFLICT_CAUSES = {"snapshot": "confl_snapshot", "lock": "confl_lock", "bufferpin": "confl_bufferpin",
                   "deadlock": "confl_deadlock", "tablespace": "confl_tablespace"}

_STANDBY = ("SELECT pg_last_wal_replay_lsn()::text, extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8, "
            + ", ".join(CONFLICT_CAUSES.values())
            + " FROM pg_stat_database_conflicts WHERE datname = current_database()")

# The bytes between the primary's current WAL position and the standby's replay position (read just before, so
# never negative), and the oldest xmin a standby's feedback holds (NULL without feedback).
_PRIMARY = ("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)::bigint, "
            "(SELECT max(age(backend_xmin)) FROM pg_stat_replication)")

_SETTINGS = ("SELECT name, setting FROM pg_settings WHERE name IN ('hot_standby_feedback', "
             "'max_standby_streaming_delay', 'wal_receiver_status_interval', 'server_version')")

#: What the readers run in each round of their transaction, in order: (name, SQL over the built-in queue
#: table). ``oldest_eligible`` returns the ids the stale reads are counted on (docs/replicas.md).
READER_QUERIES = (
    ("counts_by_status", "SELECT status, count(*) FROM {jobs} GROUP BY status"),
    ("oldest_eligible", "SELECT id FROM {jobs} WHERE status = 'pending' AND run_at <= now() "
                        "ORDER BY priority, run_at, id LIMIT {limit}"),
    ("dashboard", "SELECT queue, status, count(*), min(created_at), max(finished_at), avg(attempts)::float8 "
                  "FROM {jobs} GROUP BY queue, status"),
)
#: Why the stale reads are not counted when the claim log is not written in this process (docs/replicas.md).
NOT_COUNTED = ("the claim log is written in other processes (PROCESSES > 1, qbench master's workers or a "
               "library's own worker) and reaches this one up to a second late")
#: The oldest eligible jobs each read returns.
OLDEST_LIMIT = 100
#: A reader runs one round of :data:`READER_QUERIES` a second within its transaction.
ROUND_S = 1.0


def is_recovery_conflict(err: EngineError) -> bool:
    """The standby cancelled the statement, or ended the session idle in its transaction, because replay
    conflicted with it (SQLSTATE 40001 or 40P01 with "conflict with recovery")."""
    return "conflict with recovery" in str(err) or err.kind in ("40001", "40P01")


class ReplicaWatch:
    """The standby's sampler and readers of one run. ``note(second, values)``: the samples; ``reads``: the
    readers' log (``query``, ``cancel``, ``error``, ``snapshot``); ``position()``: the claim log's events so
    far, or None when it is not written in this process."""

    def __init__(self, dsn: str, standby_dsn: str, cfg: Any, *, now_s: Callable[[], float],
                 note: Callable[[int, dict], None], position: Callable[[], int | None], reads: Any, source: str):
        self.standby_dsn, self.cfg, self.now_s, self.note = standby_dsn, cfg, now_s, note
        self.position, self.reads = position, reads
        self.primary = connect_dsn(dsn, application_name="queue-bench replica sampler")
        self.standby = connect_dsn(standby_dsn, param="DSN_REPLICA", application_name="queue-bench replica sampler")
        settings = dict(self.standby.execute(_SETTINGS).fetchall())
        self.info = {"source": source, "server_version": settings["server_version"],
                     "hot_standby_feedback": settings["hot_standby_feedback"],
                     "max_standby_streaming_delay_s": _seconds(settings["max_standby_streaming_delay"], 1000),
                     "wal_receiver_status_interval_s": _seconds(settings["wal_receiver_status_interval"], 1),
                     "readers": cfg.replica_readers if cfg.replica_readers != "n/a" else 0,
                     "reader_s": cfg.replica_reader_s if cfg.replica_readers else None,
                     "stale_reads_not_counted": None if position() is not None else NOT_COUNTED,
                     "sampler_errors": 0}
        self.previous = self._conflicts()
        jobs = sql.Identifier(cfg.schema, "jobs")
        self.queries = [(name, sql.SQL(text).format(jobs=jobs, limit=sql.Literal(OLDEST_LIMIT)))
                        for name, text in READER_QUERIES]
        self.greenlets: list = []
        self.stopping = False

    def start(self, n_seconds: int) -> None:
        """Sample at the middle of each second ``k`` < ``n_seconds``; start the readers."""
        self.greenlets = [gevent.spawn(self._sample_loop, n_seconds)]
        self.greenlets += [gevent.spawn(self._reader, i) for i in range(self.info["readers"])]

    def stop(self) -> None:
        """Stop the sampler and the readers (a reader's query in progress is abandoned), close the connections."""
        self.stopping = True
        gevent.killall(self.greenlets, timeout=10)
        for conn in (self.primary, self.standby):
            conn.close()

    # -- the sampler
    def _conflicts(self) -> dict[str, int]:
        row = self.standby.execute(_STANDBY).fetchone()
        return dict(zip(CONFLICT_CAUSES, (int(v) for v in row[2:])))

    def _sample_loop(self, n_seconds: int) -> None:
        k = 0
        while k < n_seconds:
            gevent.sleep(max(0.0, k + 0.5 - self.now_s()))
            self.note(k, self.sample())
            k = max(k + 1, int(self.now_s() + 0.5))

    def sample(self) -> dict:
        """``replica_lag_bytes``, ``replica_lag_s`` (0 when replay has reached the primary's position, else the age
        of the last replayed commit), ``replica_conflicts_<cause>`` (since the previous sample),
        ``replica_xmin_age``, ``cost_s``; an empty dict (and ``sampler_errors`` counted) when a read failed."""
        started = time.perf_counter()
        try:
            with translated():
                row = self.standby.execute(_STANDBY).fetchone()  # the standby first: the difference is never negative
                lag_bytes, xmin_age = self.primary.execute(_PRIMARY, (row[0],)).fetchone()
        except EngineError:
            self.info["sampler_errors"] += 1
            return {"cost_s": time.perf_counter() - started}
        totals = dict(zip(CONFLICT_CAUSES, (int(v) for v in row[2:])))
        out = {f"replica_conflicts_{cause}": totals[cause] - self.previous[cause] for cause in CONFLICT_CAUSES}
        self.previous = totals
        lag_bytes = max(0, int(lag_bytes))
        out.update(replica_lag_bytes=lag_bytes, replica_xmin_age=None if xmin_age is None else int(xmin_age),
                   replica_lag_s=(0.0 if lag_bytes == 0 else None if row[1] is None  # nothing replayed yet
                                  else round(max(0.0, row[1]), 3)),
                   cost_s=time.perf_counter() - started)
        return out

    # -- the readers
    def _reader(self, i: int) -> None:
        """Reader ``i``: REPEATABLE READ READ ONLY transactions of ``REPLICA_READER_S`` one after another, a round
        of the queries each second; a cancelled one counted and followed by a new one a round later (on a new
        connection when the standby ended the session)."""
        conn = None
        try:
            while not self.stopping:
                conn = self._one_transaction(i, conn)
        finally:  # also when stop() kills the reader mid-query
            if conn is not None:
                conn.close()

    def _one_transaction(self, i: int, conn: psycopg.Connection | None) -> psycopg.Connection:
        """One transaction of reader ``i`` on ``conn`` (a new connection when None or broken), a cancellation or
        an error counted; returns the connection to go on with."""
        try:
            if conn is None or conn.closed or conn.broken:
                conn = connect(self.standby_dsn, application_name=f"queue-bench replica-reader-{i}", auto_prepare=True)
            with translated():
                self._transaction(conn)
        except EngineError as err:
            kind = "cancel" if is_recovery_conflict(err) else (err.kind if err.kind[:1].isdigit() else "connection")
            (self.reads.cancel if kind == "cancel" else self.reads.error)(int(self.now_s()), kind, str(err))
            if conn is not None and not conn.closed and not conn.broken:
                try:
                    with translated():
                        conn.execute("ROLLBACK")
                except EngineError:
                    conn.close()
            # the next transaction at the next round, as a dashboard retries at its next refresh (at once, a
            # standby still behind by more than its delay would cancel it again at once, over and over)
            gevent.sleep(ROUND_S)
        return conn

    def _transaction(self, conn: psycopg.Connection) -> None:
        position, t_snap = self.position(), self.now_s()  # every claim logged so far had committed
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        first = True
        while not self.stopping:
            round_start = self.now_s()
            for name, query in self.queries:
                started = time.perf_counter()
                rows = conn.execute(query).fetchall()
                self.reads.query(int(self.now_s()), int((time.perf_counter() - started) * 1e6))
                if name == "oldest_eligible" and first:
                    self.reads.snapshot(int(t_snap), position, [r[0] for r in rows])
                    first = False
            if self.now_s() + ROUND_S > t_snap + self.cfg.replica_reader_s:
                break
            gevent.sleep(max(0.0, round_start + ROUND_S - self.now_s()))
        if not self.stopping:  # the snapshot is held to the transaction's full length
            gevent.sleep(max(0.0, t_snap + self.cfg.replica_reader_s - self.now_s()))
        conn.execute("COMMIT")


def _seconds(setting: str, per_second: int) -> float:
    """A pg_settings value in its unit (ms or s) as seconds; -1 (wait for ever) as it is."""
    value = float(setting)
    return value if value < 0 else value / per_second
