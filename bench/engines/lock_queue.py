"""The lock queue on the queue table while a run has a ``migration`` window: sampled every
:data:`SAMPLE_EVERY_S` by the engine's monitor (``sample_locks``) and folded into each second's columns
(:data:`bench.results.run_files.LOCK_QUEUE_COLUMNS`; the rule that reads them: :mod:`bench.run_summary.migration`)."""

from __future__ import annotations

from typing import Callable

import gevent

from bench.results.run_files import LOCK_QUEUE_COLUMNS as COLUMNS

#: Seconds between two samples of the lock queue (the stall's resolution).
SAMPLE_EVERY_S = 0.1
#: The lock modes (PostgreSQL's pg_locks names) and the intervals.csv column that counts the requests of each
#: not yet granted.
MODE_COLUMNS = {"AccessShareLock": "lock_queue_access_share", "RowShareLock": "lock_queue_row_share",
                "RowExclusiveLock": "lock_queue_row_exclusive",
                "ShareUpdateExclusiveLock": "lock_queue_share_update_exclusive", "ShareLock": "lock_queue_share",
                "ShareRowExclusiveLock": "lock_queue_share_row_exclusive", "ExclusiveLock": "lock_queue_exclusive",
                "AccessExclusiveLock": "lock_queue_access_exclusive"}
_MOST = (*MODE_COLUMNS.values(), "lock_queue_workers", "migration_wait_s", "migration_blocking", "ongoing_stall_ms")


class LockQueueFold:
    """Folds samples ``(requests waiting by mode or None where modes are not read, [(worker, wait start)],
    the migration's wait so far in s or None, does the migration hold or ask for a lock that blocks claims)``
    into a second's columns, counting each worker's wait once among ``delayed_claims`` (with
    :attr:`workers_known` only)."""

    #: Whether a waiting backend can be told to be a worker's (by its application name). Behind a pooler it
    #: cannot: a pooled server connection carries whichever client used it last; the workers' waits, the stall
    #: and the delayed claims are then not measured (None).
    workers_known = True

    def __init__(self):
        self._seen: set[tuple] = set()
        self._run_ms = 0.0  # how long the stall in progress has lasted (ms; 0: none)

    @staticmethod
    def new_second() -> dict:
        """A second's columns before its first sample: None each (nothing sampled)."""
        return dict.fromkeys(COLUMNS)

    def fold(self, acc: dict, row, spacing_ms: float) -> None:
        """Fold one sample (``row``; None: it failed) standing for the ``spacing_ms`` since the previous one."""
        if row is None:
            return
        by_mode, workers, wait_s, blocking = row
        modes = {column: None if by_mode is None else int(by_mode.get(mode, 0)) for mode, column in MODE_COLUMNS.items()}
        sample = {**modes, "migration_wait_s": None if wait_s is None else round(wait_s, 3),
                  "migration_blocking": int(bool(blocking)), "lock_queue_workers": None, "ongoing_stall_ms": None}
        if self.workers_known:  # else the waiters are not attributed to workers: not measured, never wrong
            waits = {(worker, str(start)) for worker, start in workers or []}
            stalled = bool(blocking) and bool(waits)
            new = waits - self._seen if stalled else set()
            self._seen |= new
            self._run_ms = self._run_ms + spacing_ms if stalled else 0.0
            sample.update(lock_queue_workers=len(waits), ongoing_stall_ms=round(self._run_ms))
            acc["delayed_claims"] = (acc["delayed_claims"] or 0) + len(new)
            acc["stall_ms"] = (acc["stall_ms"] or 0) + (round(spacing_ms) if stalled else 0)
        for key in _MOST:
            if sample[key] is not None:
                acc[key] = max(acc[key] or 0, sample[key])


def spawn_lock_sampler(monitor, now_s: Callable[[], float], n_seconds: int, note: Callable[[int, dict], None]):
    """A greenlet calling ``monitor.sample_locks()`` every :data:`SAMPLE_EVERY_S`, folding each into
    ``monitor.lock_queue`` and calling ``note(k, columns)`` at the end of each second ``k`` < ``n_seconds`` of
    ``now_s()`` (kill it to stop)."""
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
