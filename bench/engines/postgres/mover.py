"""The mover of ``LAYOUT=archive``: every :data:`MOVE_EVERY_S` s, on its own connection, finished rows moved
from ``jobs`` to ``jobs_archive`` in one statement (``SKIP LOCKED`` in a ``MATERIALIZED`` CTE), batch by batch."""

from __future__ import annotations


import psycopg
from psycopg import sql

from bench.measure.metrics import Recorder
from bench.engines.common import Periodic
from bench.engines.postgres.adapter import DRIVER

MOVE_EVERY_S = 1.0
MOVE_BATCH = 10_000

_MOVE = """\
WITH finished AS MATERIALIZED (
    SELECT id FROM {jobs} WHERE status IN ('done', 'dead') LIMIT {limit} FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM {jobs} AS j USING finished WHERE j.id = finished.id RETURNING j.*
)
INSERT INTO {archive} SELECT * FROM moved"""


class Mover(Periodic):
    """Moves finished rows to the archive until :meth:`stop`; counts ``archived_jobs``, ``mover_runs``."""

    driver = DRIVER

    def __init__(self, conn: psycopg.Connection, schema: str, recorder: Recorder):
        super().__init__(conn, MOVE_EVERY_S, recorder)
        self.query = sql.SQL(_MOVE).format(jobs=sql.Identifier(schema, "jobs"), limit=sql.Literal(MOVE_BATCH),
                                           archive=sql.Identifier(schema, "jobs_archive"))

    def once(self) -> int:
        """One pass: move finished rows until a statement moves fewer than a batch; returns rows moved."""
        total = 0
        while not self.stopping:
            moved = self.conn.execute(self.query).rowcount
            total += moved
            if moved < MOVE_BATCH:
                break
        self.recorder.count("mover_runs")
        self.recorder.count("archived_jobs", total)
        return total
