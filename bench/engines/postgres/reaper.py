"""The reaper on PostgreSQL: the queue definition's ``reaper`` statement (``:lease_s`` inlined) every
``reaper_interval_s`` on its own connection; its rows are the jobs taken back, the second column true (or
``dead``) for those dead-lettered."""

from __future__ import annotations


import psycopg

from bench.config.queue_definition import QueueDefinition
from bench.engines.postgres import defined_sql
from bench.engines.common import Periodic
import contextlib

from bench.engines.postgres.adapter import DRIVER, apply_settings, local_transaction
from bench.measure.metrics import Recorder

#: A reaper row's second column that means dead-lettered (``t`` as psycopg reads a boolean as text).
_DEAD = {True: "dead", "dead": "dead", "t": "dead"}


class Reaper(Periodic):
    """Runs ``defn``'s reaper statement every ``interval_s`` s until :meth:`stop`, counted in ``recorder``;
    ``stateless`` (behind a transaction pool): its ``search_path`` and ``settings`` (``SYNC_COMMIT``'s) set per pass
    with ``SET LOCAL``."""

    driver = DRIVER

    def __init__(self, conn: psycopg.Connection, schema: str, defn: QueueDefinition, lease_s: float,
                 interval_s: float, recorder: Recorder, *, stateless: bool = False,
                 settings: dict[str, str] | None = None):
        super().__init__(conn, interval_s, recorder)
        self.schema = schema
        self.settings = {"search_path": schema, **(settings or {})}
        self.local_settings = self.settings if stateless else None
        self.set_up(conn)
        # Sent with its value inlined (psycopg would read a % in it as a placeholder); a written one is never
        # prepared (it may hold several statements), the generated one as the adapter's connection prepares a
        # repeated statement (bench.engines.postgres.adapter.connect_dsn).
        self.query = defined_sql.literal(defn.statements["reaper"], {"lease_s": float(lease_s)}).strip().rstrip(";")
        self.prepare = None if defn.claim_row else False

    def set_up(self, conn: psycopg.Connection) -> psycopg.Connection:
        """``conn`` (a new connection of the reaper's) with its ``search_path`` and settings (``SYNC_COMMIT``'s)
        set, unless stateless (then each pass sets them locally)."""
        if self.local_settings is None:
            apply_settings(conn, self.settings)
        return conn

    def once(self) -> tuple[int, int]:
        """One pass; returns (jobs re-queued, jobs dead-lettered)."""
        with (local_transaction(self.conn, self.local_settings) if self.local_settings else contextlib.nullcontext()):
            cur = self.conn.execute(self.query, prepare=self.prepare)
            rows = cur.fetchall() if cur.description else []
        return self.count_pass([(r[0], _DEAD.get(r[1] if len(r) > 1 else None, "pending")) for r in rows])
