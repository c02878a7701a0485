"""The mover of the ``archive`` layout: moves finished rows out of the queue table.

Every :data:`MOVE_EVERY_S` seconds, on its own connection, it deletes up to
:data:`MOVE_BATCH` rows in a terminal state (``done``, ``dead``) from
``jobs`` and inserts them into ``jobs_archive`` in the same statement (one
short autocommit transaction), repeating while a pass fills its batch. It locks
with ``SKIP LOCKED`` in a ``MATERIALIZED`` CTE, so it never waits on a worker
and never takes more rows than its LIMIT (docs/design.md, claim protocol traps).
Its statement time is load on the server too, kept as ``query_us_total``.
"""

from __future__ import annotations

import time

import psycopg
from psycopg import sql

from bench.measure.metrics import Recorder
from bench.engines.common import Periodic
from bench.engines.postgres.db import DRIVER

MOVE_EVERY_S = 1.0
MOVE_BATCH = 10_000

_MOVE = """\
WITH finished AS MATERIALIZED (
    SELECT id FROM {jobs} WHERE status IN ('done', 'dead') LIMIT {limit} FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM {jobs} AS j USING finished WHERE j.id = finished.id RETURNING j.*
)
INSERT INTO {archive} SELECT * FROM moved"""


def move_sql(schema: str, limit: int = MOVE_BATCH) -> sql.Composed:
    """The mover's statement for ``schema`` (moves at most ``limit`` rows)."""
    return sql.SQL(_MOVE).format(jobs=sql.Identifier(schema, "jobs"),
                                 archive=sql.Identifier(schema, "jobs_archive"), limit=sql.Literal(limit))


class Mover(Periodic):
    """Moves finished rows to the archive until :meth:`stop` (run :meth:`run` in a greenlet).

    Counts go to ``recorder``: ``archived_jobs`` (rows moved), ``mover_runs``;
    statement errors by SQLSTATE.
    """

    driver = DRIVER

    def __init__(self, conn: psycopg.Connection, schema: str, recorder: Recorder,
                 interval_s: float = MOVE_EVERY_S, batch: int = MOVE_BATCH):
        super().__init__(conn, interval_s, recorder)
        self.query = move_sql(schema, batch)
        self.batch = batch

    def once(self) -> int:
        """One pass: move finished rows until a statement moves fewer than a batch; returns rows moved."""
        total = 0
        while not self.stopping:
            started = time.perf_counter()
            moved = self.conn.execute(self.query).rowcount
            self.query_us_total += int((time.perf_counter() - started) * 1e6)
            total += moved
            if moved < self.batch:
                break
        self.recorder.count("mover_runs")
        self.recorder.count("archived_jobs", total)
        return total
