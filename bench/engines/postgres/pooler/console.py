"""PgBouncer's admin console (database ``pgbouncer``): its ``SHOW`` commands, which it answers only over the simple
query protocol (psycopg's ``ClientCursor``: the values are put into the text client-side; no ``Parse``/``Bind``)."""

from __future__ import annotations

from psycopg import ClientCursor

from bench.engines.postgres.adapter import connect, translated

__all__ = ["console_rows"]


def console_rows(admin_dsn: str, command: str, *, timeout_s: float = 5) -> list[dict]:
    """The rows of one console command (``SHOW POOLS``, ``SHOW VERSION``) as dicts by column name, on a connection
    of its own. Raises the adapter's EngineError (ConnectFailed: the console refused or is gone)."""
    with connect(admin_dsn, connect_timeout_s=timeout_s, application_name="queue-bench pooler console") as conn, \
            translated():
        cur = ClientCursor(conn)
        cur.execute(command)
        names = [col.name for col in cur.description or ()]
        return [dict(zip(names, row)) for row in cur.fetchall()]
