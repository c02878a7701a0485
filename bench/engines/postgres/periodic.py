"""A statement run every few seconds on its own connection, in a greenlet: the shared
loop of the reaper and the archive mover."""

from __future__ import annotations

import gevent
import psycopg

from bench.engines.postgres.error_kinds import error_kind
from bench.measure.metrics import Recorder


class Periodic:
    """Calls :meth:`once` every ``interval_s`` seconds until :meth:`stop`; a statement
    error is counted in ``recorder`` by :func:`bench.engines.postgres.error_kinds.error_kind` and the loop goes on.
    Subclasses implement :meth:`once`; ``query_us_total`` sums their statement time (µs)."""

    def __init__(self, conn: psycopg.Connection, interval_s: float, recorder: Recorder):
        self.conn = conn
        self.interval_s = interval_s
        self.recorder = recorder
        self.stopping = False
        self.query_us_total = 0

    def once(self):  # pragma: no cover - abstract
        """One pass (implemented by subclasses)."""
        raise NotImplementedError

    def run(self) -> None:
        """Loop until :meth:`stop` (run it in a greenlet)."""
        while not self.stopping:
            try:
                self.once()
            except psycopg.Error as err:
                self.recorder.error(error_kind(err, lost=self.conn.broken))
            gevent.sleep(self.interval_s)

    def stop(self) -> None:
        """Ask the loop to end after its current pass."""
        self.stopping = True
