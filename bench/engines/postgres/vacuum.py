"""Vacuum of the queue table (``jobs`` or its partitions; field case FR-12): ``AUTOVACUUM_SETTINGS`` applied
in prepare, and the periodic plain ``VACUUM`` of ``VACUUM_EVERY_S`` on a connection of its own."""

from __future__ import annotations

import time
from typing import Callable

import psycopg
from psycopg import sql

from bench.engines.common import Periodic
from bench.engines.base import EngineError
from bench.engines.postgres.adapter import DRIVER, QUERY_CANCELED, translated

#: The queue table's leaf relations, with their storage parameters: ``jobs`` itself, or its
#: partitions (a partitioned table takes no storage parameters:
#: https://www.postgresql.org/docs/current/sql-createtable.html).
_LEAVES = """\
SELECT c.relname, coalesce(c.reloptions, '{}') FROM pg_class c
WHERE c.relkind = 'r' AND c.oid IN (SELECT relid FROM pg_partition_tree(%(t)s::regclass) WHERE isleaf
                                    UNION SELECT %(t)s::regclass)
ORDER BY c.relname"""


def _regclass(schema: str) -> str:
    return f'"{schema}"."jobs"'


def apply_autovacuum_settings(conn: psycopg.Connection, schema: str, settings: tuple,
                              log: Callable[[str], None]) -> None:
    """``ALTER TABLE … SET (name = value, …)`` of ``settings`` (checked ``(full name, value)`` pairs) on each
    leaf of the queue table, with a note when the server's ``autovacuum`` is off. Raises psycopg.Error."""
    if not settings:
        return
    options = sql.SQL(", ").join(sql.SQL("{} = {}").format(sql.Identifier(name), sql.Literal(value))
                                 for name, value in settings)
    leaves = list(reloptions(conn, schema))  # jobs, or its partitions
    for name in leaves:
        conn.execute(sql.SQL("ALTER TABLE {} SET ({})").format(sql.Identifier(schema, name), options))
    log(f"autovacuum settings on {', '.join(leaves)}: " + ", ".join(f"{n} = {v:g}" for n, v in settings))
    if conn.execute("SELECT current_setting('autovacuum')").fetchone()[0] != "on":
        log("note: this server runs with autovacuum = off, so autovacuum never takes the queue table and "
            "AUTOVACUUM_SETTINGS change nothing")


def reloptions(conn: psycopg.Connection, schema: str) -> dict[str, list[str]]:
    """``{leaf of the queue table: pg_class.reloptions}`` (``["autovacuum_vacuum_threshold=1000", …]`` or ``[]``)."""
    rows = conn.execute(_LEAVES, {"t": _regclass(schema)}).fetchall()
    return {name: list(options) for name, options in rows}


class Vacuumer(Periodic):
    """A plain ``VACUUM`` of the queue table ``interval_s`` s after each pass, on autocommit ``conn``, until
    :meth:`stop`; ``passes``: ``(start_s by now_s(), duration_s)`` of each finished pass (a cancelled one is
    neither a pass nor an error)."""

    driver = DRIVER

    def __init__(self, conn: psycopg.Connection, schema: str, interval_s: float, recorder,
                 now_s: Callable[[], float]):
        super().__init__(conn, interval_s, recorder)
        self.query = sql.SQL("VACUUM {}").format(sql.Identifier(schema, "jobs"))
        self.now_s = now_s
        self.passes: list[tuple[float, float]] = []
        self._in_pass = False

    def once(self) -> float | None:
        """One pass; returns its duration (s), or None when :meth:`stop` cancelled it."""
        start_s = self.now_s()
        started = time.perf_counter()
        self._in_pass = True
        try:
            with translated():
                self.conn.execute(self.query)
        except EngineError as err:
            if err.kind == QUERY_CANCELED and self.stopping:
                return None
            raise
        finally:
            self._in_pass = False
        duration_s = time.perf_counter() - started
        self.passes.append((start_s, duration_s))
        return duration_s

    def stop(self) -> None:
        """End the loop, cancelling a pass in progress."""
        super().stop()
        if self._in_pass:
            self.conn.cancel_safe(timeout=5)
