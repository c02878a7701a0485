"""The lock queue on the queue table, sampled every :data:`SAMPLE_EVERY_S` while a run has a ``migration``
window and folded into each second's columns: the relation locks not granted, by mode
(https://www.postgresql.org/docs/current/view-pg-locks.html), the migration's own wait, and the stall (the
rule that reads these: :mod:`bench.run_summary.migration`)."""

from __future__ import annotations

from typing import Callable

import gevent
from psycopg import sql

from bench.results.run_files import LOCK_QUEUE_COLUMNS as COLUMNS

#: Seconds between two samples of the lock queue (the stall's resolution).
SAMPLE_EVERY_S = 0.1
#: pg_locks' mode names and the intervals.csv column that counts the requests of each not yet granted.
MODE_COLUMNS = {"AccessShareLock": "lock_queue_access_share", "RowShareLock": "lock_queue_row_share",
                "RowExclusiveLock": "lock_queue_row_exclusive",
                "ShareUpdateExclusiveLock": "lock_queue_share_update_exclusive", "ShareLock": "lock_queue_share",
                "ShareRowExclusiveLock": "lock_queue_share_row_exclusive", "ExclusiveLock": "lock_queue_exclusive",
                "AccessExclusiveLock": "lock_queue_access_exclusive"}
#: The modes that conflict with ROW EXCLUSIVE, the lock a claim's UPDATE takes on the table ("Conflicting
#: Lock Modes", https://www.postgresql.org/docs/current/explicit-locking.html#TABLE-LOCK-COMPATIBILITY).
BLOCKS_CLAIMS = ("ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")
_MOST = (*MODE_COLUMNS.values(), "lock_queue_workers", "migration_wait_s", "migration_blocking", "longest_stall_ms")

_QUERY = """\
WITH l AS (
  SELECT l.pid, l.mode, l.granted, l.waitstart, a.application_name AS app
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
  WHERE l.locktype = 'relation' AND l.relation = {regclass}::regclass
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND NOT starts_with(a.application_name, 'queue-bench monitor'))
SELECT (SELECT json_object_agg(mode, n) FROM (SELECT mode, count(*) AS n FROM l WHERE NOT granted GROUP BY mode) m),
       (SELECT json_agg(json_build_array(pid, waitstart)) FROM l
        WHERE NOT granted AND app ~ '^queue-bench (p[0-9]+-)?worker-[0-9]+$'),
       (SELECT extract(epoch FROM now() - min(waitstart))::float8 FROM l
        WHERE NOT granted AND app = 'queue-bench migration'),
       EXISTS (SELECT 1 FROM l WHERE app = 'queue-bench migration' AND mode = ANY(%(blocking)s))"""


class LockQueue:
    """The query over ``table`` (a :class:`psycopg.sql.Identifier`) and the fold of its rows into a second's
    columns (:data:`COLUMNS`), counting each worker's wait (backend, wait start) once among ``delayed_claims``."""

    def __init__(self, table: sql.Identifier):
        self.query = sql.SQL(_QUERY).format(regclass=sql.Literal(table.as_string(None)))
        self.params = {"blocking": list(BLOCKS_CLAIMS)}
        self._seen: set[tuple] = set()
        self._run_ms = 0.0  # the stall in progress

    @staticmethod
    def new_second() -> dict:
        """A second's columns before its first sample: None each (nothing sampled)."""
        return dict.fromkeys(COLUMNS)

    def fold(self, acc: dict, row, spacing_ms: float) -> None:
        """Fold one sample (``row``; None: it failed) standing for the ``spacing_ms`` since the previous one."""
        if row is None:
            return
        by_mode, workers, wait_s, blocking = row
        waits = {(pid, str(start)) for pid, start in workers or []}
        stalled = bool(blocking) and bool(waits)
        new = waits - self._seen if stalled else set()
        self._seen |= new
        self._run_ms = self._run_ms + spacing_ms if stalled else 0.0
        sample = {**{column: int((by_mode or {}).get(mode, 0)) for mode, column in MODE_COLUMNS.items()},
                  "lock_queue_workers": len(waits), "migration_wait_s": None if wait_s is None else round(wait_s, 3),
                  "migration_blocking": int(bool(blocking)), "longest_stall_ms": round(self._run_ms)}
        for key in _MOST:
            if sample[key] is not None:
                acc[key] = max(acc[key] or 0, sample[key])
        acc["delayed_claims"] = (acc["delayed_claims"] or 0) + len(new)
        acc["stall_ms"] = (acc["stall_ms"] or 0) + (round(spacing_ms) if stalled else 0)


def spawn_lock_sampler(monitor, now_s: Callable[[], float], n_seconds: int, note: Callable[[int, dict], None]):
    """A greenlet sampling ``monitor``'s lock queue every :data:`SAMPLE_EVERY_S` and calling ``note(k, columns)``
    at the end of each second ``k`` < ``n_seconds`` of ``now_s()`` (kill it to stop)."""
    def loop() -> None:
        k, last = 0, now_s()
        while k < n_seconds:
            acc, cost = monitor.lock_queue.new_second(), 0.0
            while now_s() < k + 1:
                row, spent = monitor.sample_locks()
                at = now_s()
                monitor.lock_queue.fold(acc, row, (at - last) * 1000)
                last, cost = at, cost + spent
                gevent.sleep(max(0.0, min(k + 1.0, at + SAMPLE_EVERY_S) - now_s()))
            note(k, {**acc, "cost_s": cost})
            k = max(k + 1, int(now_s()))
    return gevent.spawn(loop)
