"""The run's own database tasks beside the workers, each a greenlet on a connection of its own."""

from __future__ import annotations

import gevent

from bench.config.run_config import RunConfig


class SideTasks:
    """The reaper (``REAPER_INTERVAL_S``), archive mover (``LAYOUT=archive``) and periodic VACUUM
    (``VACUUM_EVERY_S``, master process only), started at construction from ``engine``; ``now_s`` is the
    clock."""

    def __init__(self, engine, cfg: RunConfig, dsn: str, recorder, now_s):
        self.started: list[tuple] = []  # (task, its greenlet), stopped in this order
        self.vacuumer = None
        if cfg.reaper_interval_s > 0:
            self._start(engine.reaper(dsn, cfg, recorder))
        if cfg.layout == "archive":
            self._start(engine.mover(dsn, cfg, recorder))
        if cfg.vacuums():
            self.vacuumer = self._start(engine.vacuumer(dsn, cfg, recorder, now_s))

    def _start(self, task):
        self.started.append((task, gevent.spawn(task.run)))
        return task

    def stop(self) -> None:
        """Stop each task (a VACUUM pass in progress is cancelled), wait up to 30 s for it, close its connection."""
        for task, greenlet in self.started:
            task.stop()
            greenlet.join(timeout=30)
            task.conn.close()
