"""PgBouncer's admin console (database ``pgbouncer``): its ``SHOW`` commands, which it answers only over the simple
query protocol (psycopg's ``ClientCursor``: the values are put into the text client-side; no ``Parse``/``Bind``).
https://www.pgbouncer.org/usage.html, "Admin console"."""

from __future__ import annotations

import psycopg
from psycopg import ClientCursor

from bench.engines.base import EngineError
from bench.engines.postgres.adapter import connect, translated

__all__ = ["Console", "console_rows"]

#: The application name of the tool's console connections (PgBouncer shows it in ``SHOW CLIENTS``).
APPLICATION_NAME = "queue-bench pooler console"


def _rows(conn: psycopg.Connection, command: str) -> list[dict]:
    """The rows of ``command`` on ``conn`` as dicts by column name."""
    cur = ClientCursor(conn)
    cur.execute(command)
    names = [col.name for col in cur.description or ()]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def console_rows(admin_dsn: str, command: str, *, timeout_s: float = 5) -> list[dict]:
    """The rows of one console command (``SHOW POOLS``, ``SHOW VERSION``) as dicts by column name, on a connection
    of its own. Raises the adapter's EngineError (ConnectFailed: the console refused or is gone)."""
    console = Console(admin_dsn, timeout_s)
    try:
        return console.rows(command)
    finally:
        console.close()


class Console:
    """One console connection kept open for commands sent again and again (the per-second ``SHOW POOLS`` and
    ``SHOW STATS``), reopened when it broke. :meth:`rows` raises the adapter's EngineError."""

    def __init__(self, admin_dsn: str, timeout_s: float = 5):
        self.admin_dsn, self.timeout_s = admin_dsn, timeout_s
        self._conn: psycopg.Connection | None = None

    def rows(self, command: str) -> list[dict]:
        """:func:`console_rows` of ``command`` on the kept connection (opened now if none or broken)."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = connect(self.admin_dsn, connect_timeout_s=self.timeout_s, application_name=APPLICATION_NAME)
        try:
            with translated():
                return _rows(self._conn, command)
        except EngineError:
            self.close()
            raise

    def close(self) -> None:
        """Close the kept connection (psycopg's ``close`` on one already gone does nothing)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
