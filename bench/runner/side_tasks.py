"""The run's own database tasks beside the workers, each a greenlet on a connection of its own."""

from __future__ import annotations

import gevent

from bench.config.run_config import RunConfig
from bench.measure import replica_reads


class SideTasks:
    """The reaper (``REAPER_INTERVAL_S``), archive mover (``LAYOUT=archive``) and periodic VACUUM
    (``VACUUM_EVERY_S``, master process only), started at construction from ``engine``; ``now_s`` is the
    clock. The reaper connects to ``dsn`` (through a pooler, as the workers), the others to ``direct_dsn``
    (default ``dsn``). With ``REPLICA=1``, :meth:`watch_replica` adds the standby's sampler and readers."""

    def __init__(self, engine, cfg: RunConfig, dsn: str, recorder, now_s, *, direct_dsn: str | None = None):
        self.started: list[tuple] = []  # (task, its greenlet), stopped in this order
        self.vacuumer = None
        self.engine, self.cfg, self.now_s = engine, cfg, now_s
        self.replica = None  # the standby's sampler and readers
        self.reads = replica_reads.ReadLog()
        if cfg.reaper_interval_s > 0:
            self._start(engine.reaper(dsn, cfg, recorder))
        if cfg.layout == "archive":
            self._start(engine.mover(direct_dsn or dsn, cfg, recorder))
        if cfg.vacuums():
            self.vacuumer = self._start(engine.vacuumer(direct_dsn or dsn, cfg, recorder, now_s))

    def _start(self, task):
        self.started.append((task, gevent.spawn(task.run)))
        return task

    def watch_replica(self, dsn: str, standby_dsn: str, note, n_seconds: int, position) -> None:
        """Sample the standby each second into ``note`` and start ``REPLICA_READERS`` readers on it; ``position()``:
        the claim log's events so far (None when the claim log is not written in this process)."""
        self.replica = self.engine.replica_watch(dsn, standby_dsn, self.cfg, now_s=self.now_s, note=note,
                                                 position=position, reads=self.reads)
        self.replica.start(n_seconds)

    def stop(self) -> None:
        """Stop each task (a VACUUM pass in progress is cancelled), wait up to 30 s for it, close its connection;
        then the standby's sampler and readers."""
        for task, greenlet in self.started:
            task.stop()
            greenlet.join(timeout=30)
            task.conn.close()
        if self.replica is not None:
            self.replica.stop()

    def replica_columns(self, rows: list[dict], n_warm: int, claim_log) -> None:
        """The readers' intervals.csv columns (:data:`bench.measure.replica_reads.READ_COLUMNS`), the stale reads
        counted against ``claim_log``; nothing without readers."""
        if self.replica is None or not self.replica.info["readers"]:
            return
        stale = replica_reads.stale_reads(self.reads.snapshots, claim_log.rows())
        replica_reads.add_columns(rows, n_warm, self.reads, stale)
        self.replica.info["cancel_messages"] = dict(self.reads.messages.most_common(5))
